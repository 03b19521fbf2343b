// libFuzzer target: any byte string either parses as GGUF, with every tensor view
// inside the input, or is refused with a GgufError. Crashes, sanitizer reports,
// other exceptions and hangs are findings.
#include <cstdint>
#include <cstdlib>

#include "model/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto f = qmv::gguf::File::parse({data, size});
    for (const auto& t : f.tensors())
      if (t.data < data || t.data + t.bytes > data + size) std::abort();
    for (const auto& key : f.keys()) {
      const auto* v = f.find(key);
      if (v->type == qmv::gguf::ValueType::ARRAY && v->count > 0) {
        if (v->elem_type == qmv::gguf::ValueType::STRING)
          (void)f.array_string(*v, v->count - 1);
        else
          (void)f.array_number(*v, v->count - 1);
      }
    }
  } catch (const qmv::gguf::GgufError&) {
  }
  return 0;
}
