// The staged Q6_K layout (staged_dp4a_q8_1): each warp copies its row's super-blocks
// eight at a time (1680 bytes) into shared memory with asynchronous 16-byte copies,
// several groups ahead of the one it computes, and the half-warp lane code reads the
// group from there. The copies hold no registers while in flight, so a warp keeps two
// groups (3.4 KB) in flight at full occupancy, where the register-loaded half-warp
// kernel holds six super-blocks at a time at half of it; and each copy is one aligned
// 16-byte load, where the 2-aligned 210-byte blocks allow only 16-bit loads.
// Plain C++ with QMV_HD: the kernel and its CPU replay use the same geometry.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cuda/q6_K_lanes.h"

namespace qmv::cuda::q5q6 {

inline constexpr int kStagedGroupBlocks = 8;
inline constexpr int kStagedStages = 3;  // groups a warp holds: one computed, two arriving
// A group and the up to 15 bytes before it that its first aligned chunk starts with.
inline constexpr int kStageBytes = kStagedGroupBlocks * kQ6KBlockBytes + 16;
inline constexpr int kStageChunks = kStageBytes / 16;
static_assert(kStageBytes % 16 == 0, "whole 16-byte chunks");

// The 16-byte chunks that bring group `group` of row `row` (nb super-blocks a row) to
// shared memory, as byte offsets from a 16-aligned matrix: chunk c comes from
// aligned + 16c, the group's first byte lands at `head` in the stage, and the last
// chunk reads only `last_chunk_bytes` (no byte past the group's end is read, so none
// past the matrix's).
struct Q6KStage {
  std::int64_t aligned = 0;
  int head = 0, chunks = 0, last_chunk_bytes = 0, blocks = 0;
};

QMV_HD Q6KStage q6k_stage(std::int64_t row, int group, std::int64_t nb) {
  const std::int64_t first_block = static_cast<std::int64_t>(group) * kStagedGroupBlocks;
  const std::int64_t begin = (row * nb + first_block) * kQ6KBlockBytes;
  const std::int64_t left = nb - first_block;
  Q6KStage s;
  s.blocks = static_cast<int>(left < kStagedGroupBlocks ? left : kStagedGroupBlocks);
  s.aligned = begin & ~std::int64_t{15};
  s.head = static_cast<int>(begin - s.aligned);
  const std::int64_t span = s.head + static_cast<std::int64_t>(s.blocks) * kQ6KBlockBytes;
  s.chunks = static_cast<int>((span + 15) / 16);
  s.last_chunk_bytes = static_cast<int>(span - 16 * (s.chunks - 1));
  return s;
}

// A warp's work as one sequence of groups, so the copies run ahead across rows: its
// rows are first_row, first_row + row_stride, ... (the warp-per-row grid-stride loop),
// each cut into `groups` groups. A cursor walks it by adding, not dividing (a 64-bit
// division is a long routine on the GPU).
struct Q6KStagedCursor {
  std::int64_t row;
  int group = 0;
  QMV_HD void next(int groups, std::int64_t row_stride) {
    if (++group == groups) {
      group = 0;
      row += row_stride;
    }
  }
};

QMV_HD int q6k_staged_groups(std::int64_t nb) {
  return static_cast<int>((nb + kStagedGroupBlocks - 1) / kStagedGroupBlocks);
}

// The Q8_1 blocks group `group` of a row dots with.
QMV_HD const BlockQ8_1* q6k_staged_activation(const BlockQ8_1* x, int group) {
  return x + static_cast<std::int64_t>(group) * kStagedGroupBlocks * (kSuperBlock / kQ8_1Block);
}

// The lane code on a staged group: one step of four super-block pairs covers it.
using Q6KStagedGroupRow = Q6KHalfWarpRowOf<kStagedGroupBlocks / 2>;

// GlobalReads with the weights read from the stage (shared memory) by plain loads.
struct StagedReads : GlobalReads {
  QMV_HD std::uint16_t weight_u16_if(bool pred, const std::uint8_t* p) const {
    if (!pred) return 0;
#if defined(__CUDA_ARCH__)
    return *reinterpret_cast<const std::uint16_t*>(p);
#else
    std::uint16_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
#endif
  }
};

}  // namespace qmv::cuda::q5q6
