// How the K-quant lane code reads global memory: the loads of every width it uses,
// each with the L1 hint its caller picks, and GlobalLoads, the memory policy the
// kernels hand their lane code (the CPU replay tests hand it recording policies with
// the same interface). Host+device: on the host the loads are plain reads, so the lane
// templates compile for both sides.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/lane_math.h"

namespace qmv::cuda {

struct U32x2 {
  std::uint32_t x, y;
};
struct U32x4 {
  std::uint32_t x, y, z, w;
};
struct F32x4 {
  float x, y, z, w;
  // Element i (0..3): in an unrolled loop i is a constant and this is no code.
  QMV_HD float operator[](int i) const { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }
};

// What a load asks of L1 for the line it reads. Every load here takes the read-only
// (non-coherent) data path, ld.global.nc: nothing a matvec reads changes while it runs.
//   kNone        L1 keeps the line as it keeps any other
//   kNoAllocate  the line bypasses L1 (L1::no_allocate)
//   kEvictFirst  the line stays only until L1 needs room (L1::evict_first)
enum class L1Hint { kNone, kNoAllocate, kEvictFirst };

#if defined(__CUDA_ARCH__)
// Inline PTX takes its text as a literal: STATEMENT(qualifier) is written out once per
// hint and the one for kHint compiled.
#define QMV_FOR_L1_HINT(kHint, STATEMENT)                     \
  if constexpr ((kHint) == L1Hint::kNoAllocate) {             \
    STATEMENT(".L1::no_allocate");                            \
  } else if constexpr ((kHint) == L1Hint::kEvictFirst) {      \
    STATEMENT(".L1::evict_first");                            \
  } else {                                                    \
    STATEMENT("");                                            \
  }
#endif

template <class T>
inline constexpr bool kIsLoadable =
    std::is_same_v<T, std::uint8_t> || std::is_same_v<T, std::uint16_t> || std::is_same_v<T, std::uint32_t> ||
    std::is_same_v<T, float> || std::is_same_v<T, U32x2> || std::is_same_v<T, U32x4> || std::is_same_v<T, F32x4>;

// A T (u8, u16, u32, float, U32x2, U32x4, F32x4) from global memory at p, aligned to
// sizeof(T). Without a hint it is __ldg, which the compiler knows as a load; a hint
// needs inline PTX.
template <class T, L1Hint kHint = L1Hint::kNone>
QMV_HD T load_nc(const void* p) {
  static_assert(kIsLoadable<T>, "u8, u16, u32, float, U32x2, U32x4 or F32x4");
#if defined(__CUDA_ARCH__)
  if constexpr (kHint == L1Hint::kNone) {
    if constexpr (std::is_same_v<T, U32x2>) {
      const uint2 v = __ldg(static_cast<const uint2*>(p));
      return {v.x, v.y};
    } else if constexpr (std::is_same_v<T, U32x4>) {
      const uint4 v = __ldg(static_cast<const uint4*>(p));
      return {v.x, v.y, v.z, v.w};
    } else if constexpr (std::is_same_v<T, F32x4>) {
      const float4 v = __ldg(static_cast<const float4*>(p));
      return {v.x, v.y, v.z, v.w};
    } else {
      return __ldg(static_cast<const T*>(p));
    }
  } else {
    static_assert(!std::is_same_v<T, float> && !std::is_same_v<T, F32x4>, "hinted loads are of integers");
    const auto g = __cvta_generic_to_global(p);
    T v;
    if constexpr (std::is_same_v<T, std::uint8_t>) {
      unsigned r;
#define QMV_LOAD(hint) asm("ld.global.nc" hint ".u8 %0, [%1];" : "=r"(r) : "l"(g))
      QMV_FOR_L1_HINT(kHint, QMV_LOAD)
#undef QMV_LOAD
      v = static_cast<std::uint8_t>(r);
    } else if constexpr (std::is_same_v<T, std::uint16_t>) {
#define QMV_LOAD(hint) asm("ld.global.nc" hint ".u16 %0, [%1];" : "=h"(v) : "l"(g))
      QMV_FOR_L1_HINT(kHint, QMV_LOAD)
#undef QMV_LOAD
    } else if constexpr (std::is_same_v<T, std::uint32_t>) {
#define QMV_LOAD(hint) asm("ld.global.nc" hint ".u32 %0, [%1];" : "=r"(v) : "l"(g))
      QMV_FOR_L1_HINT(kHint, QMV_LOAD)
#undef QMV_LOAD
    } else if constexpr (std::is_same_v<T, U32x2>) {
#define QMV_LOAD(hint) asm("ld.global.nc" hint ".v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(g))
      QMV_FOR_L1_HINT(kHint, QMV_LOAD)
#undef QMV_LOAD
    } else {
#define QMV_LOAD(hint)                                                 \
  asm("ld.global.nc" hint ".v4.u32 {%0, %1, %2, %3}, [%4];"            \
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                     \
      : "l"(g))
      QMV_FOR_L1_HINT(kHint, QMV_LOAD)
#undef QMV_LOAD
    }
    return v;
  }
#else
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// load_nc where `pred` holds, zero elsewhere (u16, u32, F32x4). One predicated load
// instruction either way, so lanes that differ in pred still run the same code.
template <class T, L1Hint kHint = L1Hint::kNone>
QMV_HD T load_nc_if(bool pred, const void* p) {
  static_assert(std::is_same_v<T, std::uint16_t> || std::is_same_v<T, std::uint32_t> || std::is_same_v<T, F32x4>,
                "u16, u32 or F32x4");
#if defined(__CUDA_ARCH__)
  // The generic address as it is (ld.global takes it: a global address is its generic
  // one): with cvta.to.global, ptxas schedules the Q6_K __dp4a kernels differently.
  const void* g = p;
  const unsigned on = pred;
  T v;
  if constexpr (std::is_same_v<T, std::uint16_t>) {
#define QMV_LOAD(hint)                                                                        \
  asm("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\tmov.u16 %0, 0;\n\t"                     \
      "@q ld.global.nc" hint ".u16 %0, [%1];\n\t}"                                            \
      : "=&h"(v)                                                                              \
      : "l"(g), "r"(on))
    QMV_FOR_L1_HINT(kHint, QMV_LOAD)
#undef QMV_LOAD
  } else if constexpr (std::is_same_v<T, std::uint32_t>) {
#define QMV_LOAD(hint)                                                                        \
  asm("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\tmov.u32 %0, 0;\n\t"                     \
      "@q ld.global.nc" hint ".u32 %0, [%1];\n\t}"                                            \
      : "=&r"(v)                                                                              \
      : "l"(g), "r"(on))
    QMV_FOR_L1_HINT(kHint, QMV_LOAD)
#undef QMV_LOAD
  } else {
#define QMV_LOAD(hint)                                                                        \
  asm("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %5, 0;\n\t"                                       \
      "mov.f32 %0, 0f00000000;\n\tmov.f32 %1, 0f00000000;\n\t"                                \
      "mov.f32 %2, 0f00000000;\n\tmov.f32 %3, 0f00000000;\n\t"                                \
      "@q ld.global.nc" hint ".v4.f32 {%0, %1, %2, %3}, [%4];\n\t}"                           \
      : "=&f"(v.x), "=&f"(v.y), "=&f"(v.z), "=&f"(v.w)                                        \
      : "l"(g), "r"(on))
    QMV_FOR_L1_HINT(kHint, QMV_LOAD)
#undef QMV_LOAD
  }
  return v;
#else
  T v{};
  if (pred) std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// The memory policy of the K-quant kernels' lane code. Weights are read once per call,
// so their loads carry kWeightHint, which keeps them from pushing the activation
// vector, which every row reads again, out of L1. Activations take the default path.
// The *_if forms load only where `pred` holds (zero elsewhere). Weight and activation
// loads are separate calls so the replay tests can tell which bytes each one fetches.
template <L1Hint kWeightHint>
struct GlobalLoads {
  QMV_HD std::uint8_t weight_u8(const void* p) const { return load_nc<std::uint8_t, kWeightHint>(p); }
  QMV_HD std::uint16_t weight_u16(const void* p) const { return load_nc<std::uint16_t, kWeightHint>(p); }
  QMV_HD std::uint32_t weight_u32(const void* p) const { return load_nc<std::uint32_t, kWeightHint>(p); }
  QMV_HD U32x2 weight_u32x2(const void* p) const { return load_nc<U32x2, kWeightHint>(p); }
  QMV_HD U32x4 weight_u32x4(const void* p) const { return load_nc<U32x4, kWeightHint>(p); }
  QMV_HD std::uint16_t weight_u16_if(bool pred, const void* p) const {
    return load_nc_if<std::uint16_t, kWeightHint>(pred, p);
  }
  QMV_HD std::uint32_t weight_u32_if(bool pred, const void* p) const {
    return load_nc_if<std::uint32_t, kWeightHint>(pred, p);
  }

  QMV_HD float act_f32(const float* p) const { return load_nc<float>(p); }
  QMV_HD F32x4 act_f32x4(const float* p) const { return load_nc<F32x4>(p); }
  QMV_HD F32x4 act_f32x4_if(bool pred, const float* p) const { return load_nc_if<F32x4>(pred, p); }
  // Q8_1 activation bytes: 4-aligned words of quants, 2-aligned fp16 scales.
  QMV_HD std::uint32_t act_u32(const void* p) const { return load_nc<std::uint32_t>(p); }
  QMV_HD std::uint32_t act_u32_if(bool pred, const void* p) const { return load_nc_if<std::uint32_t>(pred, p); }
  QMV_HD std::uint16_t act_u16_if(bool pred, const void* p) const { return load_nc_if<std::uint16_t>(pred, p); }
};

}  // namespace qmv::cuda

#if defined(__CUDA_ARCH__)
#undef QMV_FOR_L1_HINT
#endif
