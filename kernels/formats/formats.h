// GGUF block layouts and the scalar conversions around them: the K-quants, the
// legacy 32-weight quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and the float types.
//
// The structs are byte-for-byte what a GGUF file stores for each block (little
// endian, no padding), so a tensor in a memory-mapped file can be read as an array
// of them. Everything here is scalar and written to be obviously right: it is the
// ground truth the fast kernels are checked against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace qmv {

inline constexpr int kSuperBlock = 256;  // weights per K-quant super-block (QK_K)
inline constexpr int kQ8_1Block = 32;    // values per Q8_1 block
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales+mins of Q4_K / Q5_K
inline constexpr int kLegacyBlock = 32;  // weights per block of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0

using fp16_bits = std::uint16_t;  // IEEE binary16, stored as its bit pattern
using bf16_bits = std::uint16_t;  // bfloat16: the upper 16 bits of an IEEE binary32

// 8 sub-blocks of 32 weights; w = d*scale[j]*q - dmin*min[j], q in [0,15].
struct BlockQ4K {
  fp16_bits d;                      // super-block scale for the 6-bit scales
  fp16_bits dmin;                   // super-block scale for the 6-bit mins
  std::uint8_t scales[kKScaleBytes];  // 8 scales + 8 mins, 6 bits each, packed
  std::uint8_t qs[kSuperBlock / 2];   // 4-bit quants, two per byte
};

// As Q4_K with a fifth bit per weight in qh; q in [0,31].
struct BlockQ5K {
  fp16_bits d;
  fp16_bits dmin;
  std::uint8_t scales[kKScaleBytes];
  std::uint8_t qh[kSuperBlock / 8];  // high bit of each quant
  std::uint8_t qs[kSuperBlock / 2];  // low 4 bits, two per byte
};

// 16 sub-blocks of 16 weights; w = d*scale[j]*(q-32), q in [0,63].
struct BlockQ6K {
  std::uint8_t ql[kSuperBlock / 2];  // low 4 bits of each quant
  std::uint8_t qh[kSuperBlock / 4];  // high 2 bits of each quant
  std::int8_t scales[kSuperBlock / 16];
  fp16_bits d;
};

// Activation format of the K-quant dot products on the CPU: x ~= d*q.
struct BlockQ8K {
  float d;
  std::int8_t qs[kSuperBlock];
  std::int16_t bsums[kSuperBlock / 16];  // sum of each group of 16 quants (for the min term)
};

// Activation format of the GPU DP4A kernels: x ~= d*q, s = d*sum(q).
struct BlockQ8_1 {
  fp16_bits d;
  fp16_bits s;
  std::int8_t qs[kQ8_1Block];
};

// The legacy quants: one fp16 scale (and for the _1 types an fp16 offset m) per 32
// weights. The 4 low bits of weight i < 16 are the low nibble of qs[i], those of
// weight i + 16 its high nibble. The fifth bit of weight i (Q5_*) is bit i of the
// 32-bit little-endian word qh.

// w = d*(q-8), q in [0,15].
struct BlockQ4_0 {
  fp16_bits d;
  std::uint8_t qs[kLegacyBlock / 2];
};

// w = d*q + m, q in [0,15].
struct BlockQ4_1 {
  fp16_bits d;
  fp16_bits m;
  std::uint8_t qs[kLegacyBlock / 2];
};

// w = d*(q-16), q in [0,31].
struct BlockQ5_0 {
  fp16_bits d;
  std::uint8_t qh[4];  // fifth bits, bit i for weight i
  std::uint8_t qs[kLegacyBlock / 2];
};

// w = d*q + m, q in [0,31].
struct BlockQ5_1 {
  fp16_bits d;
  fp16_bits m;
  std::uint8_t qh[4];
  std::uint8_t qs[kLegacyBlock / 2];
};

// w = d*q, q in [-128,127] (our quantizer uses [-127,127]).
struct BlockQ8_0 {
  fp16_bits d;
  std::int8_t qs[kLegacyBlock];
};

static_assert(sizeof(BlockQ4K) == 144, "Q4_K block must be 144 bytes as in GGUF");
static_assert(sizeof(BlockQ5K) == 176, "Q5_K block must be 176 bytes as in GGUF");
static_assert(sizeof(BlockQ6K) == 210, "Q6_K block must be 210 bytes as in GGUF");
static_assert(sizeof(BlockQ8K) == 292, "Q8_K block must be 292 bytes as in ggml");
static_assert(sizeof(BlockQ8_1) == 36, "Q8_1 block must be 36 bytes as in GGUF");
static_assert(alignof(BlockQ4K) == 2 && alignof(BlockQ5K) == 2 && alignof(BlockQ6K) == 2);
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes as in GGUF");
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block must be 20 bytes as in GGUF");
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block must be 22 bytes as in GGUF");
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block must be 24 bytes as in GGUF");
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes as in GGUF");
static_assert(alignof(BlockQ4_0) == 2 && alignof(BlockQ4_1) == 2 && alignof(BlockQ5_0) == 2 &&
              alignof(BlockQ5_1) == 2 && alignof(BlockQ8_0) == 2);

// Values per block of each block struct, for code generic over the block type (e.g.
// run_rows in kernel.h). The float types' "blocks" are single values: fp16_bits and
// bf16_bits (both std::uint16_t) and float.
template <class Block> inline constexpr int kValuesPerBlock = 0;  // unknown: refused
template <> inline constexpr int kValuesPerBlock<BlockQ4K> = kSuperBlock;
template <> inline constexpr int kValuesPerBlock<BlockQ5K> = kSuperBlock;
template <> inline constexpr int kValuesPerBlock<BlockQ6K> = kSuperBlock;
template <> inline constexpr int kValuesPerBlock<BlockQ4_0> = kLegacyBlock;
template <> inline constexpr int kValuesPerBlock<BlockQ4_1> = kLegacyBlock;
template <> inline constexpr int kValuesPerBlock<BlockQ5_0> = kLegacyBlock;
template <> inline constexpr int kValuesPerBlock<BlockQ5_1> = kLegacyBlock;
template <> inline constexpr int kValuesPerBlock<BlockQ8_0> = kLegacyBlock;
template <> inline constexpr int kValuesPerBlock<std::uint16_t> = 1;
template <> inline constexpr int kValuesPerBlock<float> = 1;

// Weight types. F16, BF16 and F32 are plain arrays of values: a "block" is one value.
// New types go at the end: a type's number seeds the check's random data.
enum class WeightType { Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16, BF16, F32 };
inline constexpr WeightType kAllWeightTypes[] = {
    WeightType::Q4_K, WeightType::Q5_K, WeightType::Q6_K, WeightType::Q4_0,
    WeightType::Q4_1, WeightType::Q5_0, WeightType::Q5_1, WeightType::Q8_0,
    WeightType::F16,  WeightType::BF16, WeightType::F32};
enum class ActFormat { F32, Q8_K, Q8_1 };

std::string_view to_string(WeightType t);
std::string_view to_string(ActFormat f);
// GGUF's names, lower case: "q4_K", "q4_0", "f16", "bf16", ... Parsing ignores case
// ("Q4_K", "BF16"); it returns false for an unknown name.
bool parse_weight_type(std::string_view s, WeightType& out);
bool parse_act_format(std::string_view s, ActFormat& out);

// Bytes of one block and values per block of each format.
std::size_t block_bytes(WeightType t);  // 2 for F16/BF16, 4 for F32
std::size_t block_bytes(ActFormat f);   // 4 per value for F32
int block_values(WeightType t);         // 256 for K-quants, 32 legacy, 1 float types
int block_values(ActFormat f);          // 1 for F32

// Bytes of one row of `cols` values; cols must be a multiple of the block size.
std::size_t row_bytes(WeightType t, std::int64_t cols);
std::size_t row_bytes(ActFormat f, std::int64_t cols);

float fp16_to_fp32(fp16_bits h);
fp16_bits fp32_to_fp16(float f);  // round to nearest even, saturating to inf like a cast
inline constexpr float kLargestFp16 = 65504.0f;  // the largest finite fp16
float bf16_to_fp32(bf16_bits h);  // exact: the bits move up by 16
bf16_bits fp32_to_bf16(float f);  // round to nearest even; NaN stays a (quiet) NaN

// 6-bit scale and min of sub-block j (0..7) from the packed Q4_K/Q5_K scale bytes.
void unpack_scale_min_k4(int j, const std::uint8_t* packed, std::uint8_t& scale,
                         std::uint8_t& min);
// Inverse of unpack_scale_min_k4 for all eight sub-blocks (values must be < 64).
void pack_scales_mins_k4(const std::uint8_t scales[8], const std::uint8_t mins[8],
                         std::uint8_t packed[kKScaleBytes]);

// The 256 quants of a Q6_K block, centred (q - 32), in weight order: each half of
// 128 weights takes 64 bytes of ql and 32 of qh; byte l feeds weights l, l+32, l+64
// and l+96 of the half (ql low nibbles, then high nibbles; qh two bits each).
void unpack_q6_K_quants(const BlockQ6K& block, std::int8_t q[kSuperBlock]);

// Dequantize n values (n a multiple of 256) of consecutive blocks.
void dequantize_row_q4_K(const BlockQ4K* x, float* y, std::int64_t n);
void dequantize_row_q5_K(const BlockQ5K* x, float* y, std::int64_t n);
void dequantize_row_q6_K(const BlockQ6K* x, float* y, std::int64_t n);
// n a multiple of 32 for the legacy quants, any n for the float types.
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, std::int64_t n);
void dequantize_row_q4_1(const BlockQ4_1* x, float* y, std::int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, std::int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, std::int64_t n);
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, std::int64_t n);
void dequantize_row_f16(const fp16_bits* x, float* y, std::int64_t n);
void dequantize_row_bf16(const bf16_bits* x, float* y, std::int64_t n);
// Any weight type; n a multiple of block_values(t).
void dequantize_row(WeightType t, const void* blocks, float* y, std::int64_t n);

// Quantize n floats (n a multiple of 256) into blocks. Our own quantizer: for each
// sub-block it searches the scale (and min) that minimise the squared error of the
// rounded values, then quantizes the per-sub-block scales with a super-block scale.
void quantize_row_q4_K(const float* x, BlockQ4K* y, std::int64_t n);
void quantize_row_q5_K(const float* x, BlockQ5K* y, std::int64_t n);
void quantize_row_q6_K(const float* x, BlockQ6K* y, std::int64_t n);
// The legacy quants: the plain range-based quantizer of the format's definition (the
// symmetric types map the value of largest magnitude, with its sign, to the most
// negative quant; the _1 types span [min, max]), with the quants rounded against the
// scale and offset as stored in fp16. n a multiple of 32.
void quantize_row_q4_0(const float* x, BlockQ4_0* y, std::int64_t n);
void quantize_row_q4_1(const float* x, BlockQ4_1* y, std::int64_t n);
void quantize_row_q5_0(const float* x, BlockQ5_0* y, std::int64_t n);
void quantize_row_q5_1(const float* x, BlockQ5_1* y, std::int64_t n);
void quantize_row_q8_0(const float* x, BlockQ8_0* y, std::int64_t n);
// Round to nearest even, any n.
void quantize_row_f16(const float* x, fp16_bits* y, std::int64_t n);
void quantize_row_bf16(const float* x, bf16_bits* y, std::int64_t n);
// Any weight type; n a multiple of block_values(t).
void quantize_row(WeightType t, const float* x, void* blocks, std::int64_t n);

// The activation formats' definitions (Q8_K: n a multiple of 256; Q8_1: n a multiple
// of 32), plain C++. Callers run kernels/activation_quantizers.h, whose vectorized
// versions write these bytes.
void quantize_row_q8_K_scalar(const float* x, BlockQ8K* y, std::int64_t n);
void quantize_row_q8_1_scalar(const float* x, BlockQ8_1* y, std::int64_t n);
void dequantize_row_q8_K(const BlockQ8K* x, float* y, std::int64_t n);
void dequantize_row_q8_1(const BlockQ8_1* x, float* y, std::int64_t n);

// The values a kernel sees of an activation vector prepared in format f (a plain copy
// for F32; quantize_activation in kernels/activation_quantizers.h prepares it).
void dequantize_activation(ActFormat f, const void* in, float* y, std::int64_t n);

}  // namespace qmv
