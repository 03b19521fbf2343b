// Arithmetic the CUDA variants share with the CPU tests: plain functions marked
// host+device, so a test compiled by g++ can replay a kernel's thread mapping lane by
// lane and check the indexing against the reference, without a GPU.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define QMV_HD __host__ __device__ __forceinline__
#else
#define QMV_HD inline
#endif

namespace qmv::cuda {

// Single IEEE operations rounded to nearest, whatever nvcc's flags: never contracted
// into a fused multiply-add, so host and device round the same way.
QMV_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

QMV_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

QMV_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// IEEE binary16 bits to float, identical on host and device.
QMV_HD float half_bits_to_float(std::uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const std::uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      std::uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// Four signed bytes of a and b multiplied pairwise and added to c: __dp4a on the
// device, the same integer arithmetic on the host.
QMV_HD int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i)
    c += static_cast<int>(static_cast<std::int8_t>(a >> (8 * i))) * static_cast<int>(static_cast<std::int8_t>(b >> (8 * i)));
  return c;
#endif
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block, from
// its 12 packed bytes.
QMV_HD void k_scale_min(int j, const std::uint8_t* packed, int& scale, int& min) {
  if (j < 4) {
    scale = packed[j] & 63;
    min = packed[j + 4] & 63;
  } else {
    scale = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
    min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

}  // namespace qmv::cuda
