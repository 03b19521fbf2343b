// A small GGUF writer for tests: synthetic models and files built in memory, read back
// by the reader under test. Test-only; it writes version 3 with 32-byte alignment.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace qmv::testing {

class GgufWriter {
 public:
  void add_u32(const std::string& key, std::uint32_t v) { kv(key, 4, &v, 4); }
  void add_f32(const std::string& key, float v) { kv(key, 6, &v, 4); }
  void add_bool(const std::string& key, bool v) {
    const std::uint8_t b = v ? 1 : 0;
    kv(key, 7, &b, 1);
  }
  void add_string(const std::string& key, const std::string& v) {
    key_header(key, 8);
    str(meta_, v);
    ++n_kv_;
  }
  void add_string_array(const std::string& key, const std::vector<std::string>& v) {
    key_header(key, 9);
    pod(meta_, std::uint32_t{8});
    pod(meta_, static_cast<std::uint64_t>(v.size()));
    for (const auto& s : v) str(meta_, s);
    ++n_kv_;
  }
  void add_i32_array(const std::string& key, const std::vector<std::int32_t>& v) {
    key_header(key, 9);
    pod(meta_, std::uint32_t{5});
    pod(meta_, static_cast<std::uint64_t>(v.size()));
    for (auto x : v) pod(meta_, x);
    ++n_kv_;
  }
  void add_f32_array(const std::string& key, const std::vector<float>& v) {
    key_header(key, 9);
    pod(meta_, std::uint32_t{6});
    pod(meta_, static_cast<std::uint64_t>(v.size()));
    for (auto x : v) pod(meta_, x);
    ++n_kv_;
  }
  // `data` must hold exactly the tensor's bytes.
  void add_tensor(const std::string& name, const std::vector<std::uint64_t>& dims, std::uint32_t type,
                  const std::vector<std::uint8_t>& data) {
    str(infos_, name);
    pod(infos_, static_cast<std::uint32_t>(dims.size()));
    for (auto d : dims) pod(infos_, d);
    pod(infos_, type);
    pod(infos_, static_cast<std::uint64_t>(data_.size()));
    data_.insert(data_.end(), data.begin(), data.end());
    data_.resize((data_.size() + 31) / 32 * 32);
    ++n_tensors_;
  }
  // An F32 tensor of the given dims filled with `value`.
  void add_f32_tensor(const std::string& name, const std::vector<std::uint64_t>& dims, float value = 0.5f) {
    std::uint64_t n = 1;
    for (auto d : dims) n *= d;
    std::vector<std::uint8_t> bytes(n * 4);
    for (std::uint64_t i = 0; i < n; ++i) std::memcpy(bytes.data() + 4 * i, &value, 4);
    add_tensor(name, dims, 0, bytes);
  }

  std::vector<std::uint8_t> bytes() const {
    std::vector<std::uint8_t> out = {'G', 'G', 'U', 'F'};
    pod(out, std::uint32_t{3});
    pod(out, n_tensors_);
    pod(out, n_kv_);
    out.insert(out.end(), meta_.begin(), meta_.end());
    out.insert(out.end(), infos_.begin(), infos_.end());
    out.resize((out.size() + 31) / 32 * 32);
    out.insert(out.end(), data_.begin(), data_.end());
    return out;
  }

 private:
  template <class T>
  static void pod(std::vector<std::uint8_t>& b, T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  static void str(std::vector<std::uint8_t>& b, const std::string& s) {
    pod(b, static_cast<std::uint64_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }
  void key_header(const std::string& key, std::uint32_t type) {
    str(meta_, key);
    pod(meta_, type);
  }
  void kv(const std::string& key, std::uint32_t type, const void* v, std::size_t n) {
    key_header(key, type);
    const auto* p = static_cast<const std::uint8_t*>(v);
    meta_.insert(meta_.end(), p, p + n);
    ++n_kv_;
  }

  std::vector<std::uint8_t> meta_, infos_, data_;
  std::uint64_t n_kv_ = 0, n_tensors_ = 0;
};

}  // namespace qmv::testing
