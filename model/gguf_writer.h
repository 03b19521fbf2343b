// GGUF writer (version 3) that streams tensor data to a file.
//
// Everything that goes before the data is declared first: metadata, then each
// tensor's name, dimensions and ggml type. begin() computes every tensor's aligned
// offset and writes the header; the caller then hands over each tensor's bytes in the
// order the tensors were declared, whole or in parts, so a model of many gigabytes is
// never held in memory. finish() checks that every tensor was written and moves the
// file into place.
//
// The file is written to "<path>.partial" and renamed to <path> by finish(): a run
// that fails or is abandoned (the writer destroyed before finish) removes its partial
// file and never leaves something at <path> that looks like a model.
//
//   gguf::Writer w;
//   w.add_string("general.architecture", "llama");
//   w.add_tensor("token_embd.weight", {4096, 32000}, 12);  // ggml type id 12 = Q4_K
//   w.begin("model.gguf");
//   w.write_tensor("token_embd.weight", bytes);
//   w.finish();
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace qmv::gguf {

struct WriterError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Writer {
 public:
  // `alignment` (a power of two) is written as general.alignment and pads the header
  // and every tensor.
  explicit Writer(std::uint32_t alignment = 32);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Metadata, in the order they will appear in the file. Throws WriterError for a
  // duplicate or empty key, or after begin().
  void add_u32(std::string_view key, std::uint32_t v);
  void add_i32(std::string_view key, std::int32_t v);
  void add_u64(std::string_view key, std::uint64_t v);
  void add_f32(std::string_view key, float v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_string_array(std::string_view key, const std::vector<std::string>& v);
  void add_i32_array(std::string_view key, const std::vector<std::int32_t>& v);
  void add_f32_array(std::string_view key, const std::vector<float>& v);

  // Declares a tensor: dims in ggml order (dims[0] is the row length, 1 to 4 dims,
  // none zero), `ggml_type` a type id the reader knows. The row length must be a
  // multiple of the type's block. Returns the tensor's size in bytes.
  std::uint64_t add_tensor(std::string_view name, const std::vector<std::uint64_t>& dims,
                           std::uint32_t ggml_type);

  // Bytes before the data section (header, metadata, tensor infos, padding) and the
  // size of the whole file; known once everything is declared (valid before begin()).
  std::uint64_t data_offset() const;
  std::uint64_t file_size() const;

  // Creates "<path>.partial" and writes everything up to the data section.
  void begin(const std::string& path);
  // The next tensor's bytes: exactly its size, and its name must be the next declared.
  void write_tensor(std::string_view name, std::span<const std::uint8_t> bytes);
  // The next tensor's bytes in consecutive parts; the tensor is complete when its size
  // has been written. A part past the tensor's end, or a part of another tensor before
  // this one is complete, is refused.
  void write_tensor_part(std::string_view name, std::span<const std::uint8_t> bytes);
  // Checks every tensor is complete, flushes, closes and renames the file to `path`.
  void finish();

  std::uint64_t bytes_written() const { return written_; }

 private:
  struct TensorInfo {
    std::string name;
    std::vector<std::uint64_t> dims;
    std::uint32_t type;
    std::uint64_t bytes;
    std::uint64_t offset;  // within the data section
  };

  std::uint32_t alignment_;
  std::vector<std::uint8_t> meta_;  // serialized key/values
  std::uint64_t n_kv_ = 0;
  std::unordered_set<std::string> keys_;
  std::vector<TensorInfo> tensors_;
  std::unordered_set<std::string> tensor_names_;
  std::uint64_t data_bytes_ = 0;  // data section size, padding included
  std::uint64_t data_offset_ = 0;  // set by begin()

  std::string path_, partial_path_;
  int fd_ = -1;
  bool finished_ = false;
  std::size_t next_ = 0;              // index of the tensor being written
  std::uint64_t next_written_ = 0;    // bytes of it written so far
  std::uint64_t written_ = 0;         // bytes written to the file

  void start_key(std::string_view key, std::uint32_t type);
  std::vector<std::uint8_t> header() const;
  void write_raw(const void* data, std::size_t n);
  void pad_to(std::uint64_t file_offset);
  void abandon() noexcept;
  [[noreturn]] void io_fail(const char* what);
};

}  // namespace qmv::gguf
