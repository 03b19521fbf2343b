// GGUF reader: versions 2 and 3, memory-mapped, tensors as views into the map.
//
// Everything a file claims is validated before it is used: the header, every count
// against the bytes left, string and array lengths, value types, tensor dimensions
// (no overflow), tensor types, data offsets and sizes inside the data section, the
// alignment, and duplicate keys or tensor names. A truncated or hostile file gets one
// GgufError naming what is wrong and the byte offset where it was found; no count in
// the file can make the reader allocate more than the file could describe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace qmv::gguf {

struct GgufError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ValueType : std::uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view to_string(ValueType t);

// A metadata value. Scalars are held widened; strings as views into the file; arrays
// as their element type, count and the position of their first element, decoded on
// demand (a vocabulary of 150k strings is not copied to be read once).
struct Value {
  ValueType type = ValueType::UINT8;
  std::uint64_t u = 0;  // UINT*, BOOL
  std::int64_t i = 0;   // INT*
  double f = 0;         // FLOAT*
  std::string_view str;  // STRING
  ValueType elem_type = ValueType::UINT8;  // ARRAY
  std::uint64_t count = 0;                 // ARRAY
  std::size_t elem_offset = 0;             // ARRAY: byte offset of element 0 in the file
};

// ggml tensor types: the id stored in the file, elements per block, bytes per block.
struct TypeInfo {
  std::uint32_t id;
  const char* name;
  std::uint32_t block_elems;
  std::uint32_t block_bytes;
};
// nullptr for ids this reader does not know.
const TypeInfo* type_info(std::uint32_t id);

struct Tensor {
  std::string name;
  std::vector<std::uint64_t> dims;  // ggml order: dims[0] is the row length
  const TypeInfo* type = nullptr;
  std::uint64_t offset = 0;  // within the data section
  std::uint64_t bytes = 0;
  std::uint64_t elements = 0;
  const std::uint8_t* data = nullptr;  // view into the file
};

// Where an opened file's bytes live. Mapped: the file's mapping, read in place from
// the page cache (4 KiB pages), or copied from it by a forward that makes its weights
// resident (model/forward.h, WeightResidence), which gives each tensor's pages back
// once copied. Loaded: the whole file read once into weight memory
// (kernels/weight_memory.h: 2 MiB pages where granted), a copy beside the page cache's.
enum class Residence { Mapped, Loaded };

class File {
 public:
  // Opens and validates `path`. Throws GgufError (or a system error message for an
  // unreadable path).
  static File open(const std::string& path, Residence residence = Residence::Mapped);
  // Validates bytes already in memory; the caller keeps them alive (tests, fuzzing).
  static File parse(std::span<const std::uint8_t> bytes);

  std::uint32_t version() const { return version_; }
  std::uint32_t alignment() const { return alignment_; }
  std::size_t data_offset() const { return data_offset_; }
  std::size_t size() const { return bytes_.size(); }
  const std::uint8_t* data() const { return bytes_.data(); }
  Residence residence() const { return residence_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  // Gives back this process's pages of [p, p + bytes), bytes of a mapped file: every
  // page the range touches (a neighbouring tensor's share of its first and last page
  // too). The mapping is private and never written, so the pages are the file's, and a
  // later read faults them in again, unchanged, from the page cache. Returns the bytes
  // given back: 0 for a loaded or parsed file (its bytes are the only copy), a range
  // outside the file, or an OS that refuses.
  std::size_t release_pages(const void* p, std::size_t bytes) const;
  const Tensor* find_tensor(std::string_view name) const;
  // Keys in file order, and lookup.
  const std::vector<std::string>& keys() const { return key_order_; }
  const Value* find(std::string_view key) const;

  // Typed getters: nullopt when absent; GgufError when present with another type.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<std::uint64_t> get_uint(std::string_view key) const;  // any unsigned int type
  std::optional<double> get_float(std::string_view key) const;        // FLOAT32/64
  // Array elements (bounds-checked): string and numeric.
  std::string_view array_string(const Value& array, std::uint64_t index) const;
  double array_number(const Value& array, std::uint64_t index) const;

 private:
  std::shared_ptr<void> mapping_;  // keeps open()'s mapping or loaded copy alive
  Residence residence_ = Residence::Mapped;
  std::span<const std::uint8_t> bytes_;
  std::uint32_t version_ = 0;
  std::uint32_t alignment_ = 32;
  std::size_t data_offset_ = 0;
  std::vector<Tensor> tensors_;
  std::map<std::string, Value, std::less<>> values_;
  std::vector<std::string> key_order_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
  // Byte offset of each string array element (filled for string arrays on parse).
  std::map<std::size_t, std::vector<std::size_t>> string_elems_;

  void parse_all();
};

}  // namespace qmv::gguf
