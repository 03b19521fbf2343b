#include "model/gguf_writer.h"

#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "model/gguf.h"

namespace qmv::gguf {
namespace {

template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream s;
  s << "GGUF writer: ";
  (s << ... << parts);
  throw WriterError(s.str());
}

template <class T>
void put(std::vector<std::uint8_t>& b, T v) {
  const std::size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}

void put_string(std::vector<std::uint8_t>& b, std::string_view s) {
  put(b, static_cast<std::uint64_t>(s.size()));
  const std::size_t at = b.size();
  b.resize(at + s.size());
  if (!s.empty()) std::memcpy(b.data() + at, s.data(), s.size());
}

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

constexpr const char* kAlignmentKey = "general.alignment";

}  // namespace

Writer::Writer(std::uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) fail("alignment ", alignment, " is not a power of two");
  keys_.insert(kAlignmentKey);  // written by the writer itself
}

Writer::~Writer() {
  if (!finished_) abandon();
}

void Writer::start_key(std::string_view key, std::uint32_t type) {
  if (fd_ >= 0 || finished_) fail("metadata key '", key, "' added after begin(): declare everything first");
  if (key.empty()) fail("empty metadata key");
  if (key == kAlignmentKey) fail("'", key, "' is set by the writer (its constructor's alignment argument)");
  if (!keys_.emplace(key).second) fail("duplicate metadata key '", key, "'");
  put_string(meta_, key);
  put(meta_, type);
  ++n_kv_;
}

void Writer::add_u32(std::string_view key, std::uint32_t v) {
  start_key(key, static_cast<std::uint32_t>(ValueType::UINT32));
  put(meta_, v);
}
void Writer::add_i32(std::string_view key, std::int32_t v) {
  start_key(key, static_cast<std::uint32_t>(ValueType::INT32));
  put(meta_, v);
}
void Writer::add_u64(std::string_view key, std::uint64_t v) {
  start_key(key, static_cast<std::uint32_t>(ValueType::UINT64));
  put(meta_, v);
}
void Writer::add_f32(std::string_view key, float v) {
  start_key(key, static_cast<std::uint32_t>(ValueType::FLOAT32));
  put(meta_, v);
}
void Writer::add_bool(std::string_view key, bool v) {
  start_key(key, static_cast<std::uint32_t>(ValueType::BOOL));
  put(meta_, static_cast<std::uint8_t>(v ? 1 : 0));
}
void Writer::add_string(std::string_view key, std::string_view v) {
  start_key(key, static_cast<std::uint32_t>(ValueType::STRING));
  put_string(meta_, v);
}
void Writer::add_string_array(std::string_view key, const std::vector<std::string>& v) {
  start_key(key, static_cast<std::uint32_t>(ValueType::ARRAY));
  put(meta_, static_cast<std::uint32_t>(ValueType::STRING));
  put(meta_, static_cast<std::uint64_t>(v.size()));
  for (const auto& s : v) put_string(meta_, s);
}
void Writer::add_i32_array(std::string_view key, const std::vector<std::int32_t>& v) {
  start_key(key, static_cast<std::uint32_t>(ValueType::ARRAY));
  put(meta_, static_cast<std::uint32_t>(ValueType::INT32));
  put(meta_, static_cast<std::uint64_t>(v.size()));
  for (auto x : v) put(meta_, x);
}
void Writer::add_f32_array(std::string_view key, const std::vector<float>& v) {
  start_key(key, static_cast<std::uint32_t>(ValueType::ARRAY));
  put(meta_, static_cast<std::uint32_t>(ValueType::FLOAT32));
  put(meta_, static_cast<std::uint64_t>(v.size()));
  for (auto x : v) put(meta_, x);
}

std::uint64_t Writer::add_tensor(std::string_view name, const std::vector<std::uint64_t>& dims,
                                 std::uint32_t ggml_type) {
  if (fd_ >= 0 || finished_) fail("tensor '", name, "' declared after begin(): declare everything first");
  if (name.empty()) fail("empty tensor name");
  if (tensor_names_.count(std::string(name))) fail("duplicate tensor name '", name, "'");
  if (dims.empty() || dims.size() > 4) fail("tensor '", name, "' has ", dims.size(), " dimensions (1 to 4 allowed)");
  const TypeInfo* type = type_info(ggml_type);
  if (!type) fail("tensor '", name, "' has unknown ggml type id ", ggml_type);
  std::uint64_t elements = 1;
  for (auto d : dims) {
    if (d == 0) fail("tensor '", name, "' has a zero dimension");
    if (__builtin_mul_overflow(elements, d, &elements)) fail("tensor '", name, "' dimensions overflow 64 bits");
  }
  if (dims[0] % type->block_elems != 0)
    fail("tensor '", name, "' row length ", dims[0], " is not a multiple of ", type->name, "'s block of ",
         type->block_elems);
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(elements / type->block_elems, std::uint64_t{type->block_bytes}, &bytes))
    fail("tensor '", name, "' size overflows 64 bits");
  tensors_.push_back({std::string(name), dims, ggml_type, bytes, data_bytes_});
  tensor_names_.emplace(name);
  data_bytes_ = align_up(data_bytes_ + bytes, alignment_);
  return bytes;
}

std::vector<std::uint8_t> Writer::header() const {
  std::vector<std::uint8_t> h;
  put(h, std::array<char, 4>{'G', 'G', 'U', 'F'});
  put(h, std::uint32_t{3});
  put(h, static_cast<std::uint64_t>(tensors_.size()));
  put(h, n_kv_ + 1);  // + general.alignment
  h.insert(h.end(), meta_.begin(), meta_.end());
  put_string(h, kAlignmentKey);
  put(h, static_cast<std::uint32_t>(ValueType::UINT32));
  put(h, alignment_);
  for (const TensorInfo& t : tensors_) {
    put_string(h, t.name);
    put(h, static_cast<std::uint32_t>(t.dims.size()));
    for (auto d : t.dims) put(h, d);
    put(h, t.type);
    put(h, t.offset);
  }
  h.resize(align_up(h.size(), alignment_), 0);
  return h;
}

std::uint64_t Writer::data_offset() const { return header().size(); }
std::uint64_t Writer::file_size() const { return data_offset() + data_bytes_; }

void Writer::begin(const std::string& path) {
  if (fd_ >= 0 || finished_) fail("begin() called twice");
  if (path.empty()) fail("empty output path");
  // The finished file is renamed over the path: only a regular file may be replaced.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(path, S_ISDIR(st.st_mode) ? ": is a directory" : ": is not a regular file", "; give a file path to write");
  path_ = path;
  partial_path_ = path + ".partial";
  fd_ = ::open(partial_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    fail(path, ": cannot create ", partial_path_, ": ", std::strerror(err));
  }
  const std::vector<std::uint8_t> h = header();
  data_offset_ = h.size();
  write_raw(h.data(), h.size());
}

void Writer::io_fail(const char* what) {
  const int err = errno;
  fail(path_, ": ", what, " failed after ", written_, " bytes: ", std::strerror(err));
}

void Writer::write_raw(const void* data, std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd_, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      io_fail("write");
    }
    if (k == 0) {
      errno = EIO;
      io_fail("write");
    }
    p += k;
    n -= static_cast<std::size_t>(k);
    written_ += static_cast<std::uint64_t>(k);
  }
}

void Writer::pad_to(std::uint64_t file_offset) {
  static const std::uint8_t zeros[256] = {};
  while (written_ < file_offset)
    write_raw(zeros, static_cast<std::size_t>(std::min<std::uint64_t>(file_offset - written_, sizeof zeros)));
}

void Writer::write_tensor(std::string_view name, std::span<const std::uint8_t> bytes) {
  if (next_ < tensors_.size() && tensors_[next_].name == name && next_written_ == 0 &&
      bytes.size() != tensors_[next_].bytes) {
    const TensorInfo& t = tensors_[next_];
    fail("tensor '", name, "' is ", t.bytes, " bytes (", type_info(t.type)->name, "), got ", bytes.size());
  }
  write_tensor_part(name, bytes);
}

void Writer::write_tensor_part(std::string_view name, std::span<const std::uint8_t> bytes) {
  if (fd_ < 0) fail("tensor '", name, finished_ ? "' written after finish()" : "' written before begin()");
  if (next_ >= tensors_.size()) {
    if (tensor_names_.count(std::string(name))) fail("tensor '", name, "' written twice");
    fail("tensor '", name, "' was not declared");
  }
  const TensorInfo& t = tensors_[next_];
  if (name != t.name) {
    if (next_written_ > 0)
      fail("tensor '", t.name, "' is incomplete (", next_written_, " of ", t.bytes, " bytes written) when '", name,
           "' was written");
    if (!tensor_names_.count(std::string(name))) fail("tensor '", name, "' was not declared");
    for (std::size_t k = 0; k < next_; ++k)
      if (tensors_[k].name == name) fail("tensor '", name, "' written twice");
    fail("tensor '", name, "' written out of order: '", t.name, "' comes next");
  }
  if (bytes.size() > t.bytes - next_written_)
    fail("tensor '", name, "' is ", t.bytes, " bytes (", type_info(t.type)->name, "); ", next_written_,
         " written and ", bytes.size(), " more given");
  write_raw(bytes.data(), bytes.size());
  next_written_ += bytes.size();
  if (next_written_ == t.bytes) {
    const std::uint64_t end = data_offset_ + align_up(t.offset + t.bytes, alignment_);
    pad_to(end);
    ++next_;
    next_written_ = 0;
  }
}

void Writer::finish() {
  if (finished_) fail("finish() called twice");
  if (fd_ < 0) fail("finish() before begin()");
  if (next_ < tensors_.size())
    fail(path_, ": only ", next_, " of ", tensors_.size(), " tensors written; '", tensors_[next_].name, "' is next");
  if (::close(fd_) != 0) {
    fd_ = -1;
    io_fail("close");
  }
  fd_ = -1;
  if (std::rename(partial_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    fail(path_, ": cannot rename ", partial_path_, " into place: ", std::strerror(err));
  }
  finished_ = true;
}

void Writer::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!partial_path_.empty()) ::unlink(partial_path_.c_str());
}

}  // namespace qmv::gguf
