// Pieces the Q5_K and Q6_K CUDA variants share with their CPU replay test: how a lane
// reads global memory and talks to the other lanes (two small policies, so the same
// lane code runs in a kernel and, with recording policies, in the test), the integer
// to float conversions of the inner loops, and the launch geometry of warp-per-row
// kernels. Plain C++ with QMV_HD: g++ compiles it for the test, nvcc for the kernels.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>  // lane_math.h's fp16 conversion uses it on the device
#endif

#include "kernels/cuda/lane_math.h"
#include "kernels/formats/formats.h"

// #pragma unroll for nvcc; g++ would warn about a pragma it does not know.
#ifndef QMV_UNROLL
#if defined(__CUDACC__)
#define QMV_UNROLL _Pragma("unroll")
#else
#define QMV_UNROLL
#endif
#endif

// The family namespace keeps these general names (GlobalReads, join_u16, ...) apart
// from other kernel families' helpers.
namespace qmv::cuda::q5q6 {

inline constexpr int kLanes = 32;
inline constexpr int kQ5KBlockBytes = 176;
inline constexpr int kQ6KBlockBytes = 210;
static_assert(sizeof(BlockQ5K) == kQ5KBlockBytes && sizeof(BlockQ6K) == kQ6KBlockBytes);
static_assert(sizeof(BlockQ8_1) == 36 && kQ8_1Block == 32);

// Global loads of the lane code. On the device every load takes the read-only
// (non-coherent) data path, ld.global.nc: nothing changes during a call. Weight bytes
// are used once per call, so their lines are marked first to leave L1
// (L1::evict_first): they stay for the other 16-bit loads of the same sector (Q6_K
// words come in two halves), then make room for the activation vector, which every
// row reads again.
// Weight loads and activation loads are separate calls so the test can count which
// weight bytes each load fetches. The *_if forms load only where `pred` holds (0
// elsewhere) and are one load instruction for the warp either way.
struct GlobalReads {
  QMV_HD std::uint8_t weight_u8(const std::uint8_t* p) const {
#if defined(__CUDA_ARCH__)
    unsigned v;
    asm("ld.global.nc.L1::evict_first.u8 %0, [%1];" : "=r"(v) : "l"(p));
    return static_cast<std::uint8_t>(v);
#else
    return host_load<std::uint8_t>(p);
#endif
  }
  // p 2-aligned.
  QMV_HD std::uint16_t weight_u16(const std::uint8_t* p) const { return weight_u16_if(true, p); }
  // p 4-aligned.
  QMV_HD std::uint32_t weight_u32(const std::uint8_t* p) const { return weight_u32_if(true, p); }
  QMV_HD std::uint16_t weight_u16_if(bool pred, const std::uint8_t* p) const {
#if defined(__CUDA_ARCH__)
    unsigned short v;
    asm("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\tmov.u16 %0, 0;\n\t"
        "@q ld.global.nc.L1::evict_first.u16 %0, [%1];\n\t}"
        : "=&h"(v)
        : "l"(p), "r"(static_cast<unsigned>(pred)));
    return v;
#else
    return pred ? host_load<std::uint16_t>(p) : std::uint16_t{0};
#endif
  }
  QMV_HD std::uint32_t weight_u32_if(bool pred, const std::uint8_t* p) const {
#if defined(__CUDA_ARCH__)
    unsigned v;
    asm("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\tmov.u32 %0, 0;\n\t"
        "@q ld.global.nc.L1::evict_first.u32 %0, [%1];\n\t}"
        : "=&r"(v)
        : "l"(p), "r"(static_cast<unsigned>(pred)));
    return v;
#else
    return pred ? host_load<std::uint32_t>(p) : 0u;
#endif
  }

  QMV_HD float act_f32(const float* p) const {
#if defined(__CUDA_ARCH__)
    return __ldg(p);
#else
    return host_load<float>(p);
#endif
  }
  // Four consecutive floats from a 16-byte aligned p (zeros where !pred).
  QMV_HD void act_f32x4_if(bool pred, const float* p, float v[4]) const {
#if defined(__CUDA_ARCH__)
    asm("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %5, 0;\n\t"
        "mov.f32 %0, 0f00000000;\n\tmov.f32 %1, 0f00000000;\n\t"
        "mov.f32 %2, 0f00000000;\n\tmov.f32 %3, 0f00000000;\n\t"
        "@q ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];\n\t}"
        : "=&f"(v[0]), "=&f"(v[1]), "=&f"(v[2]), "=&f"(v[3])
        : "l"(p), "r"(static_cast<unsigned>(pred)));
#else
    if (pred) {
      std::memcpy(v, p, 4 * sizeof(float));
    } else {
      v[0] = v[1] = v[2] = v[3] = 0.0f;
    }
#endif
  }
  // Q8_1 activation bytes: a 4-aligned word of quants, a 2-aligned fp16 scale.
  QMV_HD std::uint32_t act_u32_if(bool pred, const std::uint8_t* p) const {
#if defined(__CUDA_ARCH__)
    unsigned v;
    asm("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\tmov.u32 %0, 0;\n\t"
        "@q ld.global.nc.u32 %0, [%1];\n\t}"
        : "=&r"(v)
        : "l"(p), "r"(static_cast<unsigned>(pred)));
    return v;
#else
    return pred ? host_load<std::uint32_t>(p) : 0u;
#endif
  }
  QMV_HD std::uint16_t act_u16_if(bool pred, const std::uint8_t* p) const {
#if defined(__CUDA_ARCH__)
    unsigned short v;
    asm("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\tmov.u16 %0, 0;\n\t"
        "@q ld.global.nc.u16 %0, [%1];\n\t}"
        : "=&h"(v)
        : "l"(p), "r"(static_cast<unsigned>(pred)));
    return v;
#else
    return pred ? host_load<std::uint16_t>(p) : std::uint16_t{0};
#endif
  }

 private:
  template <class T>
  static T host_load(const void* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
};

// Lane exchange of the lane code: v from lane `src` (0..31) of the same warp. Every
// lane of the warp must make the same calls in the same order (they are never under a
// lane-dependent condition). The CPU test replays them with its own policy.
struct WarpShuffle {
  QMV_HD std::uint32_t operator()(std::uint32_t v, int src) const {
#if defined(__CUDA_ARCH__)
    return __shfl_sync(0xffffffffu, v, src);
#else
    (void)v;
    (void)src;
    std::abort();  // host code replays shuffles with a policy that sees every lane
#endif
  }
};

// Byte i (0..3) of `word`, as unsigned, minus `bias`, as float. On the device, without
// an int-to-float conversion (a quarter-rate instruction): the byte goes into the
// mantissa of 2^23 and one subtraction removes 2^23 + bias. Exact for bias 0 and 32.
QMV_HD float byte_as_float(std::uint32_t word, int i, float bias) {
#if defined(__CUDA_ARCH__)
  const std::uint32_t bits = __byte_perm(word, 0x4B000000u, 0x7540u | static_cast<unsigned>(i));
  return __uint_as_float(bits) - (8388608.0f + bias);
#else
  return static_cast<float>((word >> (8 * i)) & 0xffu) - bias;
#endif
}

// Byte i (0..3) of `word` as a signed int8, as float; same trick, with the sign bit
// flipped to bias the byte by 128.
QMV_HD float int8_byte_as_float(std::uint32_t word, int i) {
#if defined(__CUDA_ARCH__)
  const std::uint32_t bits = __byte_perm(word, 0x4B000000u, 0x7540u | static_cast<unsigned>(i)) ^ 0x80u;
  return __uint_as_float(bits) - 8388736.0f;
#else
  return static_cast<float>(static_cast<std::int8_t>(word >> (8 * i)));
#endif
}

// Byte i (0..3) of `word` as a signed int8, sign-extended. On the device one prmt: in
// its generic form a selector nibble with bit 3 set (i | 8) repeats the sign of byte i.
// Inline PTX, because __byte_perm is defined on the low three bits of each nibble and
// nvcc drops bit 3 from a selector it builds.
QMV_HD int int8_byte(std::uint32_t word, int i) {
#if defined(__CUDA_ARCH__)
  const unsigned sign = static_cast<unsigned>(i) | 8u;
  const unsigned selector = static_cast<unsigned>(i) | sign << 4 | sign << 8 | sign << 12;
  int v;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(v) : "r"(word), "r"(selector));
  return v;
#else
  return static_cast<int>(word << (24 - 8 * i)) >> 24;
#endif
}

// An int with |v| < 2^22 as float, exactly: v added to the mantissa of 1.5 * 2^23.
QMV_HD float small_int_as_float(int v) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(0x4B400000 + v) - 12582912.0f;
#else
  return static_cast<float>(v);
#endif
}

// Two 16-bit loads of a little-endian 32-bit word whose address is only 2-aligned.
QMV_HD std::uint32_t join_u16(std::uint16_t lo, std::uint16_t hi) {
  return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
}

// Warp-per-row kernels: `warps_per_block` warps per thread block, one row per warp;
// block `block`'s warp `warp` takes rows first, first + stride, ... (a grid-stride loop,
// so any grid covers every row once).
QMV_HD std::int64_t warp_first_row(int block, int warp, int warps_per_block) {
  return static_cast<std::int64_t>(block) * warps_per_block + warp;
}
QMV_HD std::int64_t warp_row_stride(int grid, int warps_per_block) {
  return static_cast<std::int64_t>(grid) * warps_per_block;
}

inline constexpr int kRowWarpsPerBlock = 4;  // 128 threads: 8 such blocks fill an SM at 64 registers

// Grid of a warp-per-row launch: one row per warp, at most `max_blocks` blocks (the
// grid-stride loop gives the warps of a smaller grid several rows each).
inline int warp_per_row_grid(std::int64_t rows, std::int64_t max_blocks = INT64_MAX) {
  const std::int64_t wanted = (rows + kRowWarpsPerBlock - 1) / kRowWarpsPerBlock;
  const std::int64_t cap = max_blocks < 1 ? 1 : max_blocks;
  const std::int64_t grid = wanted < cap ? wanted : cap;
  return static_cast<int>(grid < 0x7fffffff ? grid : 0x7fffffff);
}

// Grid of a warp-per-row launch when `resident_blocks` blocks fit on the device at
// once: all of them, or fewer, so that every warp gets the same number of rows (one
// more row for some warps would leave the device nearly idle while they finish it).
// 14336 rows on 1056 resident blocks: 896 blocks, 4 rows per warp.
inline int balanced_warp_per_row_grid(std::int64_t rows, std::int64_t resident_blocks) {
  if (resident_blocks < 1) return warp_per_row_grid(rows);
  const std::int64_t warps = resident_blocks * kRowWarpsPerBlock;
  const std::int64_t rows_per_warp = (rows + warps - 1) / warps;
  const std::int64_t busy_warps = (rows + rows_per_warp - 1) / rows_per_warp;
  return warp_per_row_grid(busy_warps);
}

}  // namespace qmv::cuda::q5q6
