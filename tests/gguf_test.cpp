#include "model/gguf.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>

#include "tests/test_seed.h"

namespace qmv::gguf {
namespace {

const std::string kCorpus = std::string(QMV_SOURCE_DIR) + "/tests/gguf_corpus";

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Gguf, ValidFileReadsBack) {
  const File f = File::open(kCorpus + "/valid.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("llama.block_count"), 1u);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.get_float("llama.rope.freq_base")), 10000.0f);
  EXPECT_FALSE(f.get_string("no.such.key").has_value());
  EXPECT_THROW(f.get_string("llama.block_count"), GgufError);  // wrong type is an error, not a guess
  const Value* tokens = f.find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->count, 3u);
  EXPECT_EQ(f.array_string(*tokens, 0), "<s>");
  EXPECT_EQ(f.array_string(*tokens, 2), "b");
  EXPECT_THROW(f.array_string(*tokens, 3), GgufError);
  const Value* scores = f.find("tokenizer.ggml.scores");
  ASSERT_NE(scores, nullptr);
  EXPECT_EQ(f.array_number(*scores, 1), -1.0);
  EXPECT_EQ(f.keys().front(), "general.architecture");  // file order kept

  ASSERT_EQ(f.tensors().size(), 2u);
  const Tensor* w = f.find_tensor("w.f32");
  ASSERT_NE(w, nullptr);
  EXPECT_STREQ(w->type->name, "F32");
  EXPECT_EQ(w->dims, (std::vector<std::uint64_t>{32, 2}));
  EXPECT_EQ(w->bytes, 256u);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(w->data[i], i);  // the view is the file's data section
  const Tensor* q = f.find_tensor("w.q8_0");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->bytes, 34u);
  EXPECT_EQ(q->data, w->data + 256);
}

TEST(Gguf, EveryMalformedCorpusFileIsRefusedWithItsReason) {
  // File name -> a phrase the error must contain.
  const std::map<std::string, std::string> expected = {
      {"bad_magic", "not a GGUF file"},
      {"bad_version1", "unsupported version 1"},
      {"bad_version_bigendian", "big-endian"},
      {"bad_truncated_header", "truncated tensor count"},
      {"bad_truncated_metadata", "metadata count 7 cannot fit"},
      {"bad_truncated_data", "lies outside"},
      {"bad_kv_count_huge", "metadata count"},
      {"bad_tensor_count_huge", "tensor count"},
      {"bad_string_length_huge", "claims 1099511627776 bytes"},
      {"bad_array_length_huge", "elements of 4 bytes"},
      {"bad_string_array_huge", "strings, more than"},
      {"bad_nested_array", "nested arrays"},
      {"bad_value_type", "unknown value type 13"},
      {"bad_bool", "bool must be 0 or 1"},
      {"bad_duplicate_key", "duplicate metadata key 'llama.block_count'"},
      {"bad_alignment_not_pow2", "not a power of two"},
      {"bad_alignment_type", "must be uint32"},
      {"bad_tensor_misaligned", "not a multiple of the alignment"},
      {"bad_tensor_out_of_range", "lies outside"},
      {"bad_tensor_offset_huge", "lies outside"},
      {"bad_tensor_duplicate", "duplicate tensor name 'w'"},
      {"bad_tensor_overlap", "overlap"},
      {"bad_tensor_type", "unknown type id 99"},
      {"bad_tensor_dims5", "5 dimensions"},
      {"bad_tensor_zero_dim", "zero dimension"},
      {"bad_tensor_dims_overflow", "overflow"},
      {"bad_tensor_block_multiple", "not a multiple of Q8_0's block"},
      {"bad_empty_key", "empty metadata key"},
  };
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpus)) {
    const std::string stem = entry.path().stem().string();
    if (stem.rfind("valid", 0) == 0) {
      EXPECT_NO_THROW(File::open(entry.path().string())) << stem;
      EXPECT_NO_THROW(File::open(entry.path().string(), Residence::Loaded)) << stem;
      continue;
    }
    ++seen;
    const auto want = expected.find(stem);
    ASSERT_NE(want, expected.end()) << "corpus file without an expected message: " << stem;
    for (const Residence residence : {Residence::Mapped, Residence::Loaded}) {
      try {
        File::open(entry.path().string(), residence);
        ADD_FAILURE() << stem << " was accepted";
      } catch (const GgufError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(want->second), std::string::npos) << stem << ": " << msg;
        EXPECT_NE(msg.find(stem), std::string::npos) << "the error names the file: " << msg;
      }
    }
  }
  EXPECT_EQ(seen, static_cast<int>(expected.size()));
}

// A file larger than a huge page, loaded: its bytes land in weight memory (2 MiB
// aligned), every tensor views the copy, and the copy is the file.
TEST(Gguf, ALoadedFileIsACopyInWeightMemory) {
  auto bytes = read_bytes(kCorpus + "/valid.gguf");
  ASSERT_FALSE(bytes.empty());
  std::mt19937 gen(qmv::testing::fresh_seed());
  const std::size_t padding = (std::size_t{5} << 20) + std::uniform_int_distribution<std::size_t>(0, 4095)(gen);
  for (std::size_t i = 0; i < padding; ++i) bytes.push_back(static_cast<std::uint8_t>(gen()));  // after the data
  const std::string path = (std::filesystem::temp_directory_path() / "qmv-gguf-loaded-test.gguf").string();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const File mapped = File::open(path), loaded = File::open(path, Residence::Loaded);
  std::filesystem::remove(path);
  EXPECT_EQ(loaded.residence(), Residence::Loaded);
  ASSERT_EQ(loaded.size(), bytes.size());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(loaded.data()) % (std::uintptr_t{2} << 20), 0u);
  EXPECT_EQ(std::memcmp(loaded.data(), bytes.data(), bytes.size()), 0);
  ASSERT_EQ(loaded.tensors().size(), mapped.tensors().size());
  for (std::size_t i = 0; i < loaded.tensors().size(); ++i) {
    const Tensor &l = loaded.tensors()[i], &m = mapped.tensors()[i];
    EXPECT_EQ(l.name, m.name);
    EXPECT_EQ(l.data - loaded.data(), m.data - mapped.data()) << l.name;
    EXPECT_EQ(std::memcmp(l.data, m.data, l.bytes), 0) << l.name;
  }
  EXPECT_EQ(loaded.get_string("general.architecture"), "llama");
}

TEST(Gguf, EveryTruncationIsAnErrorNeverACrash) {
  const auto bytes = read_bytes(kCorpus + "/valid.gguf");
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    try {
      File::parse({bytes.data(), n});
      ADD_FAILURE() << "a " << n << "-byte prefix of a " << bytes.size() << "-byte file was accepted";
    } catch (const GgufError&) {
    }
  }
}

TEST(Gguf, RandomByteMutationsParseOrFailCleanly) {
  // Not a fuzzer (tests/fuzz_gguf.cpp is), but every run tries fresh mutations: any
  // exception other than GgufError, or a crash, fails.
  const auto valid = read_bytes(kCorpus + "/valid.gguf");
  const auto seed = qmv::testing::fresh_seed("mutations");
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::size_t> pos(0, valid.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255), count(1, 4);
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    auto b = valid;
    for (int k = count(gen); k > 0; --k) b[pos(gen)] = static_cast<std::uint8_t>(byte(gen));
    try {
      const File f = File::parse(b);
      for (const Tensor& t : f.tensors())  // views must lie inside the buffer
        ASSERT_LE(t.data + t.bytes, b.data() + b.size());
      ++accepted;
    } catch (const GgufError&) {
    }
  }
  std::printf("%d of 20000 mutated files still valid\n", accepted);
}

TEST(Gguf, UnreadablePathsNameThemselves) {
  try {
    File::open("/nonexistent/model.gguf");
    FAIL();
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf: cannot open"), std::string::npos);
  }
  EXPECT_THROW(File::open("/tmp"), GgufError);
}

}  // namespace
}  // namespace qmv::gguf
