#include "kernels/activation_quantizers.h"

#include <atomic>
#include <cassert>
#include <cstring>

#include "kernels/cpu/x86/activation_quantizers.h"

namespace qmv {

namespace {

// Each version runs only where the CPU has every instruction set its folder is
// compiled for (CMakeLists.txt).
bool cpu_has(QuantizerIsa isa) {
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl");
  switch (isa) {
    case QuantizerIsa::Scalar:
      return true;
    case QuantizerIsa::AVX2:
      return avx2;
    case QuantizerIsa::AVX512:
      return avx512;
  }
  return false;
}

std::atomic<QuantizerIsa> g_isa_limit{QuantizerIsa::AVX512};

// One activation format's quantizer at each instruction-set level.
template <class Block>
struct QuantizerVersions {
  using Fn = void (*)(const float*, Block*, std::int64_t);
  Fn scalar, avx2, avx512;
  bool run(QuantizerIsa isa, const float* x, Block* y, std::int64_t n) const {
    if (!cpu_has(isa)) return false;
    (isa == QuantizerIsa::AVX512 ? avx512 : isa == QuantizerIsa::AVX2 ? avx2 : scalar)(x, y, n);
    return true;
  }
};

constexpr QuantizerVersions<BlockQ8K> kQ8K{quantize_row_q8_K_scalar, quantize_row_q8_K_avx2, quantize_row_q8_K_avx512};
constexpr QuantizerVersions<BlockQ8_1> kQ8_1{quantize_row_q8_1_scalar, quantize_row_q8_1_avx2,
                                             quantize_row_q8_1_avx512};

}  // namespace

void set_quantizer_isa_limit(QuantizerIsa widest) { g_isa_limit.store(widest); }

QuantizerIsa active_quantizer_isa() {
  for (QuantizerIsa isa : {QuantizerIsa::AVX512, QuantizerIsa::AVX2})
    if (isa <= g_isa_limit.load() && cpu_has(isa)) return isa;
  return QuantizerIsa::Scalar;
}

const char* to_string(QuantizerIsa isa) {
  switch (isa) {
    case QuantizerIsa::Scalar:
      return "scalar";
    case QuantizerIsa::AVX2:
      return "avx2";
    case QuantizerIsa::AVX512:
      return "avx512";
  }
  return "?";
}

bool quantize_row_q8_K_with(QuantizerIsa isa, const float* x, BlockQ8K* y, std::int64_t n) {
  assert(n % kSuperBlock == 0);
  return kQ8K.run(isa, x, y, n);
}

bool quantize_row_q8_1_with(QuantizerIsa isa, const float* x, BlockQ8_1* y, std::int64_t n) {
  assert(n % kQ8_1Block == 0);
  return kQ8_1.run(isa, x, y, n);
}

void quantize_row_q8_K(const float* x, BlockQ8K* y, std::int64_t n) {
  quantize_row_q8_K_with(active_quantizer_isa(), x, y, n);
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, std::int64_t n) {
  quantize_row_q8_1_with(active_quantizer_isa(), x, y, n);
}

void quantize_activation(ActFormat f, const float* x, void* out, std::int64_t n) {
  switch (f) {
    case ActFormat::F32:
      std::memcpy(out, x, static_cast<std::size_t>(n) * sizeof(float));
      return;
    case ActFormat::Q8_K:
      quantize_row_q8_K(x, static_cast<BlockQ8K*>(out), n);
      return;
    case ActFormat::Q8_1:
      quantize_row_q8_1(x, static_cast<BlockQ8_1*>(out), n);
      return;
  }
}

}  // namespace qmv
