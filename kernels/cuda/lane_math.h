// Arithmetic the CUDA variants share with the CPU tests: rounding, fp16, __dp4a, byte
// selection and the integer-to-float conversions of the inner loops, as plain functions
// marked host+device, so a test compiled by g++ can replay a kernel's thread mapping lane
// by lane and check the indexing against the reference, without a GPU.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define QMV_HD __host__ __device__ __forceinline__
#else
#define QMV_HD inline
#endif

// #pragma unroll for nvcc; g++ would warn about a pragma it does not know.
#if defined(__CUDACC__)
#define QMV_UNROLL _Pragma("unroll")
#else
#define QMV_UNROLL
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

QMV_HD float float_from_bits(std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
#endif
}

// __byte_perm: result byte n is byte (s >> 4n) & 7 of the eight bytes y:x.
QMV_HD std::uint32_t byte_perm(std::uint32_t x, std::uint32_t y, std::uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const std::uint64_t bytes = (std::uint64_t(y) << 32) | x;
  std::uint32_t r = 0;
  for (int n = 0; n < 4; ++n)
    r |= static_cast<std::uint32_t>((bytes >> (8 * ((s >> (4 * n)) & 7u))) & 0xFFu) << (8 * n);
  return r;
#endif
}

QMV_HD std::uint32_t byte_of(std::uint32_t word, int i) { return (word >> (8 * i)) & 0xFFu; }

// Integers to float without an int-to-float conversion, which runs at a quarter of the
// float rate or less: the integer goes into the low mantissa bits of a power of two and
// one subtraction removes that. The host runs the same bit arithmetic, so the replay
// tests check it.

// Byte i (0..3) of `word`, as unsigned, minus `bias`: 2^23 + byte, less 2^23 + bias.
// Exact for bias 0 and 32.
QMV_HD float byte_to_float(std::uint32_t word, int i, float bias = 0.0f) {
  return float_from_bits(byte_perm(word, 0x4B000000u, 0x7540u | static_cast<std::uint32_t>(i))) - (8388608.0f + bias);
}

// Byte i (0..3) of `word` as a signed int8: the same with the sign bit flipped, which
// biases the byte by 128.
QMV_HD float int8_byte_to_float(std::uint32_t word, int i) {
  return float_from_bits(byte_perm(word, 0x4B000000u, 0x7540u | static_cast<std::uint32_t>(i)) ^ 0x80u) -
         8388736.0f;
}

// v < 2^23, exactly: 2^23 + v carries v in its mantissa.
QMV_HD float small_uint_to_float(std::uint32_t v) { return float_from_bits(0x4B000000u | v) - 8388608.0f; }

// |v| < 2^22, exactly: 1.5 * 2^23 + v carries v in its mantissa.
QMV_HD float small_int_to_float(int v) {
  return float_from_bits(0x4B400000u + static_cast<std::uint32_t>(v)) - 12582912.0f;
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

// A little-endian 32-bit word from its two 16-bit halves (a word only 2-aligned in
// memory is read as two 16-bit loads).
QMV_HD std::uint32_t join_u16(std::uint16_t lo, std::uint16_t hi) {
  return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
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
