// qmv_dump_tensors: every tensor of a GGUF file, read by qmvlab's reader and
// dequantized by qmvlab's dequantizers, written as raw float32 (native byte order) to
// OUTDIR/<tensor name>.f32, for tests/synthetic_model_test.py to compare with the
// gguf Python package's reading of the same file.
//
//   qmv_dump_tensors FILE OUTDIR
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/formats/formats.h"
#include "model/gguf.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: qmv_dump_tensors FILE OUTDIR\n");
    return 2;
  }
  try {
    const qmv::gguf::File f = qmv::gguf::File::open(argv[1]);
    for (const qmv::gguf::Tensor& t : f.tensors()) {
      qmv::WeightType type{};
      if (!qmv::parse_weight_type(t.type->name, type)) {
        std::fprintf(stderr, "qmv_dump_tensors: %s: type %s has no dequantizer\n", t.name.c_str(), t.type->name);
        return 1;
      }
      std::vector<float> values(t.elements);
      qmv::dequantize_row(type, t.data, values.data(), static_cast<std::int64_t>(t.elements));
      const std::string path = std::string(argv[2]) + "/" + t.name + ".f32";
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
      if (!out) {
        std::fprintf(stderr, "qmv_dump_tensors: cannot write %s\n", path.c_str());
        return 1;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qmv_dump_tensors: %s\n", e.what());
    return 1;
  }
  return 0;
}
