#include "kernels/former_names.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <set>

namespace qmv {
namespace {

constexpr FormerName kFormerNames[] = {
    {"bf16.cpu.avx2_4row", "bf16.cpu.avx2_x4"},
    {"bf16.cpu.avx2_f32", "bf16.cpu.avx2"},
    {"bf16.cuda.legacy", "bf16.cuda.warp"},
    {"bf16.cuda.warp_row", "bf16.cuda.warp"},
    {"f16.cpu.avx2_4row", "f16.cpu.avx2_x4"},
    {"f16.cpu.avx2_f32", "f16.cpu.avx2"},
    {"f16.cuda.legacy", "f16.cuda.warp"},
    {"f16.cuda.warp_row", "f16.cuda.warp"},
    {"f32.cpu.avx2_4row", "f32.cpu.avx2_x4"},
    {"f32.cpu.avx2_f32", "f32.cpu.avx2"},
    {"f32.cuda.legacy", "f32.cuda.warp"},
    {"f32.cuda.warp_row", "f32.cuda.warp"},
    {"q4_0.cpu.avx2_4row_q8_1", "q4_0.cpu.avx2_x4_q8_1"},
    {"q4_0.cpu.avx512_vnni", "q4_0.cpu.avx512vnni_q8_1"},
    {"q4_0.cpu.avx512_vnni_4row", "q4_0.cpu.avx512vnni_x4_q8_1"},
    {"q4_0.cpu.avx512vnni_4row_q8_1", "q4_0.cpu.avx512vnni_x4_q8_1"},
    {"q4_0.cpu.scalar", "q4_0.cpu.scalar_f32"},
    {"q4_0.cuda.legacy", "q4_0.cuda.warp_f32"},
    {"q4_0.cuda.warp_row_dp4a_q8_1", "q4_0.cuda.warp_dp4a_q8_1"},
    {"q4_0.cuda.warp_row_f32", "q4_0.cuda.warp_f32"},
    {"q4_1.cpu.avx2_4row_q8_1", "q4_1.cpu.avx2_x4_q8_1"},
    {"q4_1.cpu.avx512_vnni", "q4_1.cpu.avx512vnni_q8_1"},
    {"q4_1.cpu.avx512_vnni_4row", "q4_1.cpu.avx512vnni_x4_q8_1"},
    {"q4_1.cpu.avx512vnni_4row_q8_1", "q4_1.cpu.avx512vnni_x4_q8_1"},
    {"q4_1.cpu.scalar", "q4_1.cpu.scalar_f32"},
    {"q4_1.cuda.legacy", "q4_1.cuda.warp_f32"},
    {"q4_1.cuda.warp_row_dp4a_q8_1", "q4_1.cuda.warp_dp4a_q8_1"},
    {"q4_1.cuda.warp_row_f32", "q4_1.cuda.warp_f32"},
    {"q4_K.cpu.avx2_4row_q8k", "q4_K.cpu.avx2_x4_q8k"},
    {"q4_K.cpu.avx2_raw", "q4_K.cpu.avx2_q8k"},
    {"q4_K.cpu.avx512_vnni", "q4_K.cpu.avx512vnni_q8k"},
    {"q4_K.cpu.avx512_vnni_4row", "q4_K.cpu.avx512vnni_x4_q8k"},
    {"q4_K.cpu.avx512_vnni_up_gate", "q4_K.cpu.avx512vnni_up_gate_q8k"},
    {"q4_K.cpu.avx512vnni_2row_q8k", "q4_K.cpu.avx512vnni_x2_q8k"},
    {"q4_K.cpu.avx512vnni_4row_q8k", "q4_K.cpu.avx512vnni_x4_q8k"},
    {"q4_K.cpu.scalar", "q4_K.cpu.scalar_f32"},
    {"q4_K.cuda.chunked", "q4_K.cuda.chunked_f32"},
    {"q4_K.cuda.coalesced", "q4_K.cuda.coalesced_f32"},
    {"q4_K.cuda.dp4a", "q4_K.cuda.dp4a_q8_1"},
    {"q4_K.cuda.hw_dp4a", "q4_K.cuda.halfwarp_dp4a_q8_1"},
    {"q4_K.cuda.legacy", "q4_K.cuda.warp_f32"},
    {"q4_K.cuda.multiwarp_dp4a_q8_1.w2", "q4_K.cuda.warpx2_dp4a_q8_1"},
    {"q4_K.cuda.multiwarp_dp4a_q8_1.w3", "q4_K.cuda.warpx3_dp4a_q8_1"},
    {"q4_K.cuda.multiwarp_dp4a_q8_1.w4", "q4_K.cuda.warpx4_dp4a_q8_1"},
    {"q4_K.cuda.multiwarp_f32.w2", "q4_K.cuda.warpx2_f32"},
    {"q4_K.cuda.multiwarp_f32.w3", "q4_K.cuda.warpx3_f32"},
    {"q4_K.cuda.multiwarp_f32.w4", "q4_K.cuda.warpx4_f32"},
    {"q4_K.cuda.mwv.w2", "q4_K.cuda.warpx2_f32"},
    {"q4_K.cuda.mwv.w3", "q4_K.cuda.warpx3_f32"},
    {"q4_K.cuda.mwv.w4", "q4_K.cuda.warpx4_f32"},
    {"q4_K.cuda.mwv_dp4a.w2", "q4_K.cuda.warpx2_dp4a_q8_1"},
    {"q4_K.cuda.mwv_dp4a.w3", "q4_K.cuda.warpx3_dp4a_q8_1"},
    {"q4_K.cuda.mwv_dp4a.w4", "q4_K.cuda.warpx4_dp4a_q8_1"},
    {"q4_K.cuda.tiled", "q4_K.cuda.tiled_f32"},
    {"q4_K.cuda.vectorized", "q4_K.cuda.vectorized_f32"},
    {"q4_K.cuda.warp_row_f32", "q4_K.cuda.warp_f32"},
    {"q4_K.cuda.wide", "q4_K.cuda.wide_f32"},
    {"q5_0.cpu.avx2_4row_q8_1", "q5_0.cpu.avx2_x4_q8_1"},
    {"q5_0.cpu.avx512_vnni", "q5_0.cpu.avx512vnni_q8_1"},
    {"q5_0.cpu.avx512_vnni_4row", "q5_0.cpu.avx512vnni_x4_q8_1"},
    {"q5_0.cpu.avx512vnni_4row_q8_1", "q5_0.cpu.avx512vnni_x4_q8_1"},
    {"q5_0.cpu.scalar", "q5_0.cpu.scalar_f32"},
    {"q5_0.cuda.legacy", "q5_0.cuda.warp_f32"},
    {"q5_0.cuda.warp_row_dp4a_q8_1", "q5_0.cuda.warp_dp4a_q8_1"},
    {"q5_0.cuda.warp_row_f32", "q5_0.cuda.warp_f32"},
    {"q5_1.cpu.avx2_4row_q8_1", "q5_1.cpu.avx2_x4_q8_1"},
    {"q5_1.cpu.avx512_vnni", "q5_1.cpu.avx512vnni_q8_1"},
    {"q5_1.cpu.avx512_vnni_4row", "q5_1.cpu.avx512vnni_x4_q8_1"},
    {"q5_1.cpu.avx512vnni_4row_q8_1", "q5_1.cpu.avx512vnni_x4_q8_1"},
    {"q5_1.cpu.scalar", "q5_1.cpu.scalar_f32"},
    {"q5_1.cuda.legacy", "q5_1.cuda.warp_f32"},
    {"q5_1.cuda.warp_row_dp4a_q8_1", "q5_1.cuda.warp_dp4a_q8_1"},
    {"q5_1.cuda.warp_row_f32", "q5_1.cuda.warp_f32"},
    {"q5_K.cpu.avx2_4row_q8k", "q5_K.cpu.avx2_x4_q8k"},
    {"q5_K.cpu.avx2_raw", "q5_K.cpu.avx2_q8k"},
    {"q5_K.cpu.avx512_vnni", "q5_K.cpu.avx512vnni_q8k"},
    {"q5_K.cpu.avx512_vnni_4row", "q5_K.cpu.avx512vnni_x4_q8k"},
    {"q5_K.cpu.avx512vnni_4row_q8k", "q5_K.cpu.avx512vnni_x4_q8k"},
    {"q5_K.cpu.scalar", "q5_K.cpu.scalar_f32"},
    {"q5_K.cuda.legacy", "q5_K.cuda.warp_f32"},
    {"q5_K.cuda.multiwarp_f32.w2", "q5_K.cuda.warpx2_f32"},
    {"q5_K.cuda.multiwarp_f32.w3", "q5_K.cuda.warpx3_f32"},
    {"q5_K.cuda.multiwarp_f32.w4", "q5_K.cuda.warpx4_f32"},
    {"q5_K.cuda.mwv.w2", "q5_K.cuda.warpx2_f32"},
    {"q5_K.cuda.mwv.w3", "q5_K.cuda.warpx3_f32"},
    {"q5_K.cuda.mwv.w4", "q5_K.cuda.warpx4_f32"},
    {"q5_K.cuda.warp_row_f32", "q5_K.cuda.warp_f32"},
    {"q6_K.cpu.avx2_2row_q8k", "q6_K.cpu.avx2_x2_q8k"},
    {"q6_K.cpu.avx2_4row_q8k", "q6_K.cpu.avx2_x4_q8k"},
    {"q6_K.cpu.avx2_raw", "q6_K.cpu.avx2_q8k"},
    {"q6_K.cpu.avx512_vnni", "q6_K.cpu.avx512vnni_q8k"},
    {"q6_K.cpu.avx512_vnni_4row", "q6_K.cpu.avx512vnni_x4_q8k"},
    {"q6_K.cpu.avx512vnni_4row_q8k", "q6_K.cpu.avx512vnni_x4_q8k"},
    {"q6_K.cpu.scalar", "q6_K.cpu.scalar_f32"},
    {"q6_K.cuda.dp4a", "q6_K.cuda.dp4a_q8_1"},
    {"q6_K.cuda.hw_dp4a", "q6_K.cuda.halfwarp_dp4a_q8_1"},
    {"q6_K.cuda.legacy", "q6_K.cuda.warp_f32"},
    {"q6_K.cuda.multiwarp_f32.w2", "q6_K.cuda.warpx2_f32"},
    {"q6_K.cuda.multiwarp_f32.w3", "q6_K.cuda.warpx3_f32"},
    {"q6_K.cuda.multiwarp_f32.w4", "q6_K.cuda.warpx4_f32"},
    {"q6_K.cuda.mwv.w2", "q6_K.cuda.warpx2_f32"},
    {"q6_K.cuda.mwv.w3", "q6_K.cuda.warpx3_f32"},
    {"q6_K.cuda.mwv.w4", "q6_K.cuda.warpx4_f32"},
    {"q6_K.cuda.warp_row_f32", "q6_K.cuda.warp_f32"},
    {"q8_0.cpu.avx2_4row_q8_1", "q8_0.cpu.avx2_x4_q8_1"},
    {"q8_0.cpu.avx512_vnni", "q8_0.cpu.avx512vnni_q8_1"},
    {"q8_0.cpu.avx512_vnni_4row", "q8_0.cpu.avx512vnni_x4_q8_1"},
    {"q8_0.cpu.avx512vnni_4row_q8_1", "q8_0.cpu.avx512vnni_x4_q8_1"},
    {"q8_0.cpu.scalar", "q8_0.cpu.scalar_f32"},
    {"q8_0.cuda.legacy", "q8_0.cuda.warp_f32"},
    {"q8_0.cuda.warp_row_dp4a_q8_1", "q8_0.cuda.warp_dp4a_q8_1"},
    {"q8_0.cuda.warp_row_f32", "q8_0.cuda.warp_f32"},
};

}  // namespace

std::span<const FormerName> former_kernel_names() { return kFormerNames; }

std::string_view current_kernel_name(std::string_view name) {
  const auto* it = std::lower_bound(std::begin(kFormerNames), std::end(kFormerNames), name,
                                    [](const FormerName& f, std::string_view n) { return f.former < n; });
  return it != std::end(kFormerNames) && it->former == name ? it->current : name;
}

void note_former_name(std::string_view former, std::string_view current) {
  static std::mutex mutex;
  static std::set<std::string, std::less<>> noted;
  const std::lock_guard lock(mutex);
  if (!noted.emplace(former).second) return;
  fmt::print(stderr, "qmvlab: note: kernel '{}' is now named '{}'; the old name still works but is deprecated\n",
             former, current);
}

}  // namespace qmv
