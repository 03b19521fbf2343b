// qmv_dump_blocks: quantizes random groups of 256 values with our quantizer and writes
// the raw block bytes and our dequantized values, for tests/gguf_crosscheck.py to
// compare with an independent GGUF implementation.
//
//   qmv_dump_blocks --type TYPE --blocks N --seed S
//                   --out-blocks FILE --out-values FILE [--out-inputs FILE]
//
// TYPE is any weight type (q4_K, q5_K, q6_K, q4_0, q4_1, q5_0, q5_1, q8_0, f16, bf16,
// f32). N groups of 256 values: N super-blocks of a K-quant, 8N blocks of a legacy
// quant, 256N values of a float type. FILE for blocks: row_bytes(type, 256N) bytes,
// exactly as a GGUF tensor stores them. FILE for values: 256N float32 (native byte
// order, little endian on every machine we run on); FILE for inputs: the 256N float32
// values that were quantized (to compare the float types' rounding too).
//
// The blocks are chosen to reach every corner of the layout: Gaussian blocks of very
// different magnitudes (1e-6 to 1e4, values up to the fp16 limit of 6e4, and values of
// ~1e7 whose fp16 super-block scales are in the thousands; so fp16 scales that are
// subnormal, normal and large), blocks with outliers, constant blocks (all equal, zero, negative),
// all-positive blocks (offset 0), heavy tails, and blocks whose sub-blocks differ in
// magnitude (small and zero 6-bit scales next to large ones). For the float types two
// more families: fp32 subnormals and tiny values, and values exactly halfway between
// two fp16 / bf16 neighbours (round to nearest even).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "formats/formats.h"

namespace {

using qmv::kSuperBlock;

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: qmv_dump_blocks --type TYPE --blocks N --seed S\n"
               "                       --out-blocks FILE --out-values FILE [--out-inputs FILE]\n"
               "Quantizes N random groups of 256 values to TYPE (any weight type: q4_K,\n"
               "q4_0, f16, ...) with qmvlab's quantizer; writes the raw block bytes, the\n"
               "dequantized float32 values and optionally the float32 inputs.\n");
}

struct Options {
  qmv::WeightType type{};
  long long blocks = 0;
  std::uint64_t seed = 0;
  std::string out_blocks, out_values, out_inputs;
};

bool parse_integer(const char* text, long long& out) {
  char* end = nullptr;
  out = std::strtoll(text, &end, 10);
  return end != text && *end == '\0';
}

// Returns false (after printing why) on any error.
bool parse_options(int argc, char** argv, Options& opt) {
  bool have_type = false, have_blocks = false, have_seed = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value (or is unknown)\n", argv[i]);
      return false;
    }
    const char* value = argv[++i];
    long long number = 0;
    if (arg == "--type") {
      if (!qmv::parse_weight_type(value, opt.type)) {
        std::fprintf(stderr, "error: unknown --type '%s'\n", value);
        return false;
      }
      have_type = true;
    } else if (arg == "--blocks") {
      if (!parse_integer(value, number) || number <= 0) {
        std::fprintf(stderr, "error: --blocks needs a positive integer, got '%s'\n", value);
        return false;
      }
      opt.blocks = number;
      have_blocks = true;
    } else if (arg == "--seed") {
      if (!parse_integer(value, number) || number < 0) {
        std::fprintf(stderr, "error: --seed needs a non-negative integer, got '%s'\n", value);
        return false;
      }
      opt.seed = static_cast<std::uint64_t>(number);
      have_seed = true;
    } else if (arg == "--out-blocks") {
      opt.out_blocks = value;
    } else if (arg == "--out-values") {
      opt.out_values = value;
    } else if (arg == "--out-inputs") {
      opt.out_inputs = value;
    } else {
      std::fprintf(stderr, "error: unknown option %s\n", argv[i - 1]);
      return false;
    }
  }
  if (!have_type || !have_blocks || !have_seed || opt.out_blocks.empty() ||
      opt.out_values.empty()) {
    std::fprintf(stderr, "error: --type, --blocks, --seed, --out-blocks and --out-values are all required\n");
    return false;
  }
  return true;
}

// One group of 256 test values; `kind` picks the family (cycled by group index so
// that every family appears in any run of a few dozen groups). The float types get
// two more families (kFloatKinds) that only matter to them.
constexpr int kKinds = 13;
constexpr int kFloatKinds = 15;

bool is_float_type(qmv::WeightType t) {
  return t == qmv::WeightType::F16 || t == qmv::WeightType::BF16 || t == qmv::WeightType::F32;
}

void generate_block(int kind, std::mt19937_64& rng, float* x) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  auto fill_gaussian = [&](float sigma) {
    for (int i = 0; i < kSuperBlock; ++i) x[i] = sigma * normal(rng);
  };
  switch (kind) {
    case 0: fill_gaussian(1e-6f); break;
    case 1: fill_gaussian(1e-3f); break;
    case 2: fill_gaussian(1.0f); break;
    case 3: fill_gaussian(100.0f); break;
    case 4: fill_gaussian(1e4f); break;
    case 5: {  // any magnitude from 1e-6 to 1e4, log-uniform
      fill_gaussian(std::pow(10.0f, -6.0f + 10.0f * uniform(rng)));
      break;
    }
    case 6: {  // a few outliers ten to fifty times the rest
      fill_gaussian(0.05f);
      for (int k = 0; k < 3; ++k) {
        const int at = static_cast<int>(uniform(rng) * kSuperBlock) % kSuperBlock;
        x[at] = (uniform(rng) < 0.5f ? -1.0f : 1.0f) * (0.5f + 2.0f * uniform(rng));
      }
      break;
    }
    case 7: {  // all equal: zero, a positive or a negative constant
      const float choice = uniform(rng);
      const float value = choice < 0.2f ? 0.0f : (choice < 0.6f ? 1.0f : -1.0f) * 3.0f * uniform(rng);
      for (int i = 0; i < kSuperBlock; ++i) x[i] = value;
      break;
    }
    case 8: {  // near the fp16 limit: largest magnitudes about 6e4
      fill_gaussian(1.5e4f);
      x[static_cast<int>(uniform(rng) * kSuperBlock) % kSuperBlock] = 6e4f;
      break;
    }
    case 9: {  // all positive, away from zero: the offsets are 0
      for (int i = 0; i < kSuperBlock; ++i) x[i] = 2.0f + std::fabs(normal(rng));
      break;
    }
    case 10: {  // heavy tails (Laplace)
      for (int i = 0; i < kSuperBlock; ++i) {
        const float u = uniform(rng) - 0.5f;
        x[i] = (u < 0 ? 1.0f : -1.0f) * std::log(1.0f - 2.0f * std::fabs(u) + 1e-12f);
      }
      break;
    }
    case 11: {  // values around 1e7: super-block scales of 1e3 to 3e4
      fill_gaussian(2e6f + 2e6f * uniform(rng));
      break;
    }
    case 13: {  // fp32 subnormals and values just above them
      for (int i = 0; i < kSuperBlock; ++i) x[i] = normal(rng) * (i % 2 == 0 ? 1e-39f : 1e-36f);
      break;
    }
    case 14: {  // exact ties of fp16 (bit 12 alone below the kept 10 mantissa bits) and
      // of bf16 (bit 15 alone below the kept 7): round to nearest even must pick the
      // even neighbour. Exponents 2^-7..2^8, normal in both formats; either sign.
      for (int i = 0; i < kSuperBlock; ++i) {
        const auto r = static_cast<std::uint32_t>(rng());
        const std::uint32_t sign = r & 0x80000000u;
        const std::uint32_t exponent = 120u + (r >> 27 & 15u);
        const std::uint32_t mantissa = i % 2 == 0 ? (r & 0x7fe000u) | 0x1000u : (r & 0x7f0000u) | 0x8000u;
        const std::uint32_t bits = sign | exponent << 23 | mantissa;
        std::memcpy(&x[i], &bits, sizeof(bits));
      }
      break;
    }
    default: {  // sub-blocks of very different magnitude, some all zero
      for (int j = 0; j < kSuperBlock / 16; ++j) {
        const float sigma = j % 5 == 4 ? 0.0f : std::pow(10.0f, -3.0f * uniform(rng));
        for (int i = 0; i < 16; ++i) x[16 * j + i] = sigma * normal(rng);
      }
      break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse_options(argc, argv, opt)) {
    print_usage(stderr);
    return 2;
  }

  std::mt19937_64 rng(opt.seed);
  const std::int64_t n = opt.blocks * kSuperBlock;
  std::vector<float> x(static_cast<std::size_t>(n));
  const int kinds = is_float_type(opt.type) ? kFloatKinds : kKinds;
  for (long long b = 0; b < opt.blocks; ++b) {
    generate_block(static_cast<int>(b % kinds), rng, x.data() + b * kSuperBlock);
  }

  std::vector<std::uint8_t> blocks(qmv::row_bytes(opt.type, n));
  qmv::quantize_row(opt.type, x.data(), blocks.data(), n);
  std::vector<float> values(static_cast<std::size_t>(n));
  qmv::dequantize_row(opt.type, blocks.data(), values.data(), n);

  std::ofstream block_file(opt.out_blocks, std::ios::binary);
  block_file.write(reinterpret_cast<const char*>(blocks.data()),
                   static_cast<std::streamsize>(blocks.size()));
  std::ofstream value_file(opt.out_values, std::ios::binary);
  value_file.write(reinterpret_cast<const char*>(values.data()),
                   static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!block_file || !value_file) {
    std::fprintf(stderr, "error: could not write %s or %s\n", opt.out_blocks.c_str(),
                 opt.out_values.c_str());
    return 1;
  }
  if (!opt.out_inputs.empty()) {
    std::ofstream input_file(opt.out_inputs, std::ios::binary);
    input_file.write(reinterpret_cast<const char*>(x.data()),
                     static_cast<std::streamsize>(x.size() * sizeof(float)));
    if (!input_file) {
      std::fprintf(stderr, "error: could not write %s\n", opt.out_inputs.c_str());
      return 1;
    }
  }
  std::printf("%s: %lld blocks (%zu bytes), seed %llu\n", qmv::to_string(opt.type).data(),
              opt.blocks, blocks.size(), static_cast<unsigned long long>(opt.seed));
  return 0;
}
