#include "model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <sstream>

#include "kernels/weight_memory.h"

namespace qmv::gguf {

std::string_view to_string(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "uint8";
    case ValueType::INT8: return "int8";
    case ValueType::UINT16: return "uint16";
    case ValueType::INT16: return "int16";
    case ValueType::UINT32: return "uint32";
    case ValueType::INT32: return "int32";
    case ValueType::FLOAT32: return "float32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "uint64";
    case ValueType::INT64: return "int64";
    case ValueType::FLOAT64: return "float64";
  }
  return "?";
}

const TypeInfo* type_info(std::uint32_t id) {
  // Block sizes as ggml defines them (the PyPI gguf package's GGML_QUANT_SIZES agree).
  static const TypeInfo kTypes[] = {
      {0, "F32", 1, 4},          {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
      {3, "Q4_1", 32, 20},       {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
      {8, "Q8_0", 32, 34},       {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
      {11, "Q3_K", 256, 110},    {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
      {14, "Q6_K", 256, 210},    {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
      {17, "IQ2_XS", 256, 74},   {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
      {20, "IQ4_NL", 32, 18},    {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
      {23, "IQ4_XS", 256, 136},  {24, "I8", 1, 1},         {25, "I16", 1, 2},
      {26, "I32", 1, 4},         {27, "I64", 1, 8},        {28, "F64", 1, 8},
      {29, "IQ1_M", 256, 56},    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
      {35, "TQ2_0", 256, 66},
  };
  for (const auto& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

namespace {

template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream s;
  s << "GGUF: ";
  (s << ... << parts);
  throw GgufError(s.str());
}

std::size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: case ValueType::ARRAY: return 0;
  }
  return 0;
}

bool valid_value_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(ValueType::FLOAT64); }

// Reads little-endian values, refusing to step past the end.
class Cursor {
 public:
  explicit Cursor(std::span<const std::uint8_t> b) : b_(b) {}
  std::size_t pos() const { return pos_; }
  std::size_t left() const { return b_.size() - pos_; }

  void need(std::uint64_t n, const char* what) const {
    if (n > left()) fail("truncated ", what, " at byte ", pos_, ": needs ", n, " bytes, ", left(), " left");
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view read_string(const char* what) {
    const std::size_t at = pos_;
    const auto len = read<std::uint64_t>(what);
    if (len > left())
      fail(what, " at byte ", at, " claims ", len, " bytes, only ", left(), " left in the file");
    std::string_view s(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<std::size_t>(len));
    pos_ += static_cast<std::size_t>(len);
    return s;
  }
  void skip(std::uint64_t n, const char* what) {
    need(n, what);
    pos_ += static_cast<std::size_t>(n);
  }

 private:
  std::span<const std::uint8_t> b_;
  std::size_t pos_ = 0;
};

Value read_scalar(Cursor& c, ValueType t, const char* what) {
  Value v;
  v.type = t;
  switch (t) {
    case ValueType::UINT8: v.u = c.read<std::uint8_t>(what); break;
    case ValueType::INT8: v.i = c.read<std::int8_t>(what); break;
    case ValueType::UINT16: v.u = c.read<std::uint16_t>(what); break;
    case ValueType::INT16: v.i = c.read<std::int16_t>(what); break;
    case ValueType::UINT32: v.u = c.read<std::uint32_t>(what); break;
    case ValueType::INT32: v.i = c.read<std::int32_t>(what); break;
    case ValueType::FLOAT32: v.f = c.read<float>(what); break;
    case ValueType::UINT64: v.u = c.read<std::uint64_t>(what); break;
    case ValueType::INT64: v.i = c.read<std::int64_t>(what); break;
    case ValueType::FLOAT64: v.f = c.read<double>(what); break;
    case ValueType::BOOL: {
      const std::size_t at = c.pos();
      v.u = c.read<std::uint8_t>(what);
      if (v.u > 1) fail(what, " at byte ", at, ": bool must be 0 or 1, found ", v.u);
      break;
    }
    case ValueType::STRING: v.str = c.read_string(what); break;
    case ValueType::ARRAY: fail("internal: read_scalar on an array");
  }
  return v;
}

}  // namespace

namespace {

// An open file descriptor, closed on every way out of File::open.
struct OpenFd {
  int fd;
  ~OpenFd() {
    if (fd >= 0) ::close(fd);
  }
};

// The whole of `fd` (`size` bytes) read into weight memory.
std::shared_ptr<WeightMemory> read_into_weight_memory(int fd, std::size_t size, const std::string& path) {
  std::shared_ptr<WeightMemory> copy;
  try {
    copy = std::make_shared<WeightMemory>(size);
  } catch (const std::bad_alloc&) {
    throw GgufError(path + ": not enough memory to load its " + std::to_string(size) + " bytes");
  }
  auto* out = static_cast<std::uint8_t*>(copy->data());
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw GgufError(path + ": cannot read: " + std::strerror(errno));
    if (n == 0)
      throw GgufError(path + ": the file ended at byte " + std::to_string(done) + " of " + std::to_string(size) +
                      " while it was read");
    done += static_cast<std::size_t>(n);
  }
  return copy;
}

}  // namespace

File File::open(const std::string& path, Residence residence) {
  // O_NONBLOCK: opening a FIFO no one writes to would wait for a writer; a regular
  // file's reads ignore the flag.
  const OpenFd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (file.fd < 0) throw GgufError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(file.fd, &st) != 0) throw GgufError(path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw GgufError(path + (S_ISDIR(st.st_mode)    ? ": is a directory"
                            : S_ISFIFO(st.st_mode) ? ": is a FIFO, not a regular file"
                                                   : ": is not a regular file"));
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) throw GgufError(path + ": empty file");
  File f;
  f.residence_ = residence;
  if (residence == Residence::Loaded) {
    std::shared_ptr<WeightMemory> copy = read_into_weight_memory(file.fd, size, path);
    f.bytes_ = {static_cast<const std::uint8_t*>(copy->data()), size};
    f.mapping_ = std::move(copy);
  } else {
    void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd, 0);
    if (map == MAP_FAILED) throw GgufError(path + ": cannot map: " + std::strerror(errno));
    f.mapping_ = std::shared_ptr<void>(map, [size](void* p) { munmap(p, size); });
    f.bytes_ = {static_cast<const std::uint8_t*>(map), size};
  }
  try {
    f.parse_all();
  } catch (const GgufError& e) {
    throw GgufError(path + ": " + e.what());
  }
  return f;
}

std::size_t File::release_pages(const void* p, std::size_t bytes) const {
  if (residence_ != Residence::Mapped || !mapping_ || bytes == 0) return 0;
  const auto base = reinterpret_cast<std::uintptr_t>(bytes_.data()), at = reinterpret_cast<std::uintptr_t>(p);
  if (at < base || at - base > bytes_.size() || bytes > bytes_.size() - (at - base)) return 0;
  // The mapping starts on a page and spans whole pages: the range rounded out to pages
  // stays inside it.
  static const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::uintptr_t first = at / page * page, end = (at + bytes + page - 1) / page * page;
  if (madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED) != 0) return 0;
  return end - first;
}

File File::parse(std::span<const std::uint8_t> bytes) {
  File f;
  f.bytes_ = bytes;
  f.parse_all();
  return f;
}

void File::parse_all() {
  Cursor c(bytes_);
  c.need(4, "magic");
  if (std::memcmp(bytes_.data(), "GGUF", 4) != 0) {
    std::string magic;
    for (int k = 0; k < 4; ++k) {
      const char ch = static_cast<char>(bytes_[static_cast<std::size_t>(k)]);
      magic += (ch >= 32 && ch < 127) ? ch : '.';
    }
    fail("not a GGUF file: magic is '", magic, "', expected 'GGUF'");
  }
  c.skip(4, "magic");
  version_ = c.read<std::uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    fail("unsupported version ", version_, " (this reader takes versions 2 and 3",
         version_ > 0xFFFF ? "; a big-endian file?" : "", ")");
  const auto n_tensors = c.read<std::uint64_t>("tensor count");
  const auto n_kv = c.read<std::uint64_t>("metadata count");
  // Smallest possible entries: a key/value is 8 (key length) + 4 (type) + 1 byte; a
  // tensor info is 8 (name length) + 4 (dims) + 8 (one dim) + 4 (type) + 8 (offset).
  if (n_kv > c.left() / 13)
    fail("metadata count ", n_kv, " cannot fit in the ", c.left(), " bytes after the header");
  if (n_tensors > c.left() / 32)
    fail("tensor count ", n_tensors, " cannot fit in the ", c.left(), " bytes after the header");

  for (std::uint64_t k = 0; k < n_kv; ++k) {
    const std::size_t key_at = c.pos();
    const std::string_view key = c.read_string("metadata key");
    if (key.empty()) fail("empty metadata key at byte ", key_at);
    if (values_.count(key)) fail("duplicate metadata key '", key, "' at byte ", key_at);
    const std::size_t type_at = c.pos();
    const auto type = c.read<std::uint32_t>("metadata value type");
    if (!valid_value_type(type)) fail("unknown value type ", type, " for key '", key, "' at byte ", type_at);
    Value v;
    if (static_cast<ValueType>(type) == ValueType::ARRAY) {
      v.type = ValueType::ARRAY;
      const std::size_t elem_at = c.pos();
      const auto elem = c.read<std::uint32_t>("array element type");
      if (!valid_value_type(elem)) fail("unknown array element type ", elem, " for key '", key, "' at byte ", elem_at);
      v.elem_type = static_cast<ValueType>(elem);
      if (v.elem_type == ValueType::ARRAY) fail("nested arrays are not supported (key '", key, "')");
      const std::size_t count_at = c.pos();
      v.count = c.read<std::uint64_t>("array length");
      v.elem_offset = c.pos();
      if (v.elem_type == ValueType::STRING) {
        if (v.count > c.left() / 8)
          fail("array '", key, "' at byte ", count_at, " claims ", v.count, " strings, more than the ",
               c.left(), " bytes left can hold");
        auto& offsets = string_elems_[v.elem_offset];
        offsets.reserve(static_cast<std::size_t>(v.count));
        for (std::uint64_t e = 0; e < v.count; ++e) {
          offsets.push_back(c.pos());
          c.read_string("array string");
        }
      } else {
        const std::size_t size = scalar_size(v.elem_type);
        if (v.count > c.left() / size)
          fail("array '", key, "' at byte ", count_at, " claims ", v.count, " elements of ", size,
               " bytes, only ", c.left(), " bytes left");
        if (v.elem_type == ValueType::BOOL) {
          for (std::uint64_t e = 0; e < v.count; ++e) read_scalar(c, ValueType::BOOL, "array bool");
        } else {
          c.skip(v.count * size, "array data");
        }
      }
    } else {
      v = read_scalar(c, static_cast<ValueType>(type), "metadata value");
    }
    key_order_.emplace_back(key);
    values_.emplace(std::string(key), v);
  }

  if (const Value* a = find("general.alignment")) {
    if (a->type != ValueType::UINT32)
      fail("general.alignment must be uint32, found ", to_string(a->type));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0) fail("general.alignment ", a->u, " is not a power of two");
    alignment_ = static_cast<std::uint32_t>(a->u);
  }

  tensors_.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t t = 0; t < n_tensors; ++t) {
    Tensor tensor;
    const std::size_t name_at = c.pos();
    tensor.name = std::string(c.read_string("tensor name"));
    if (tensor.name.empty()) fail("empty tensor name at byte ", name_at);
    if (tensor_index_.count(tensor.name)) fail("duplicate tensor name '", tensor.name, "' at byte ", name_at);
    const auto n_dims = c.read<std::uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > 4)
      fail("tensor '", tensor.name, "' has ", n_dims, " dimensions (1 to 4 allowed)");
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = c.read<std::uint64_t>("tensor dimension");
      if (dim == 0) fail("tensor '", tensor.name, "' has a zero dimension");
      if (__builtin_mul_overflow(elements, dim, &elements) ||
          elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail("tensor '", tensor.name, "' dimensions overflow 64 bits");
      tensor.dims.push_back(dim);
    }
    tensor.elements = elements;
    const std::size_t type_at = c.pos();
    const auto type_id = c.read<std::uint32_t>("tensor type");
    tensor.type = type_info(type_id);
    if (!tensor.type) fail("tensor '", tensor.name, "' has unknown type id ", type_id, " at byte ", type_at);
    if (tensor.dims[0] % tensor.type->block_elems != 0)
      fail("tensor '", tensor.name, "' row length ", tensor.dims[0], " is not a multiple of ",
           tensor.type->name, "'s block of ", tensor.type->block_elems);
    if (__builtin_mul_overflow(elements / tensor.type->block_elems, std::uint64_t{tensor.type->block_bytes},
                               &tensor.bytes))
      fail("tensor '", tensor.name, "' size overflows 64 bits");
    tensor.offset = c.read<std::uint64_t>("tensor data offset");
    if (tensor.offset % alignment_ != 0)
      fail("tensor '", tensor.name, "' offset ", tensor.offset, " is not a multiple of the alignment ", alignment_);
    tensor_index_.emplace(tensor.name, tensors_.size());
    tensors_.push_back(std::move(tensor));
  }

  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > bytes_.size())
    fail("data section would start at byte ", data_offset_, ", past the end of the ", bytes_.size(), "-byte file");
  const std::uint64_t data_size = tensors_.empty() ? 0 : bytes_.size() - data_offset_;
  for (Tensor& t : tensors_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      fail("tensor '", t.name, "' data [", t.offset, ", +", t.bytes, ") lies outside the ", data_size,
           "-byte data section (file truncated?)");
    t.data = bytes_.data() + data_offset_ + t.offset;
  }
  std::vector<const Tensor*> by_offset;
  for (const Tensor& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const Tensor* a, const Tensor* b) { return a->offset < b->offset; });
  for (std::size_t k = 1; k < by_offset.size(); ++k)
    if (by_offset[k - 1]->offset + by_offset[k - 1]->bytes > by_offset[k]->offset)
      fail("tensors '", by_offset[k - 1]->name, "' and '", by_offset[k]->name, "' overlap");
}

const Tensor* File::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const Value* File::find(std::string_view key) const {
  const auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::STRING) fail("key '", key, "' is ", to_string(v->type), ", expected string");
  return std::string(v->str);
}

std::optional<std::uint64_t> File::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  switch (v->type) {
    case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32: case ValueType::UINT64:
      return v->u;
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      if (v->i >= 0) return static_cast<std::uint64_t>(v->i);
      fail("key '", key, "' is negative (", v->i, "), expected a count");
    default: fail("key '", key, "' is ", to_string(v->type), ", expected an integer");
  }
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::FLOAT32 && v->type != ValueType::FLOAT64)
    fail("key '", key, "' is ", to_string(v->type), ", expected a float");
  return v->f;
}

std::string_view File::array_string(const Value& a, std::uint64_t index) const {
  if (a.type != ValueType::ARRAY || a.elem_type != ValueType::STRING) fail("not a string array");
  if (index >= a.count) fail("array index ", index, " out of range (", a.count, " elements)");
  const auto& offsets = string_elems_.at(a.elem_offset);
  Cursor c(bytes_);
  c.skip(offsets[static_cast<std::size_t>(index)], "array string");
  return c.read_string("array string");
}

double File::array_number(const Value& a, std::uint64_t index) const {
  if (a.type != ValueType::ARRAY || a.elem_type == ValueType::STRING) fail("not a numeric array");
  if (index >= a.count) fail("array index ", index, " out of range (", a.count, " elements)");
  Cursor c(bytes_);
  c.skip(a.elem_offset + index * scalar_size(a.elem_type), "array element");
  const Value v = read_scalar(c, a.elem_type, "array element");
  switch (v.type) {
    case ValueType::FLOAT32: case ValueType::FLOAT64: return v.f;
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      return static_cast<double>(v.i);
    default: return static_cast<double>(v.u);
  }
}

}  // namespace qmv::gguf
