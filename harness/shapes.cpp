#include "harness/shapes.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace qmv {

const std::vector<ShapePreset>& shape_presets() {
  static const std::vector<ShapePreset> presets = [] {
    std::vector<ShapePreset> p;
    // Awkward rows (1, 3, a prime not a multiple of any tile, a full tile count) against
    // the smallest, a small, a typical and the largest FFN input length.
    ShapePreset check{"default",
                      "check default: rows {1,3,67,4096} x cols {256,512,4096,14336}, "
                      "plus llama-2-7b",
                      {}};
    for (std::int64_t r : {1, 3, 67, 4096})
      for (std::int64_t c : {256, 512, 4096, 14336}) check.shapes.push_back({r, c});
    // Llama-2-7B layer: q/k/v/o 4096x4096, up/gate 11008x4096, down 4096x11008,
    // lm_head 32000x4096.
    const std::vector<Shape> llama2_7b = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {32000, 4096}};
    for (Shape s : llama2_7b)
      if (std::find(check.shapes.begin(), check.shapes.end(), s) == check.shapes.end())
        check.shapes.push_back(s);
    p.push_back(std::move(check));
    p.push_back({"llama-2-7b", "Llama-2-7B matvecs: qkvo, up/gate, down, lm_head", llama2_7b});
    // Llama-3-8B FFN (the shapes the CPU bandwidth targets are stated on).
    p.push_back({"llama-3-8b-ffn", "Llama-3-8B FFN: up/gate 14336x4096, down 4096x14336",
                 {{14336, 4096}, {4096, 14336}}});
    p.push_back({"small", "fast set for tests and CI: awkward rows, small cols",
                 {{1, 256}, {3, 512}, {67, 256}, {67, 4096}, {130, 1024}, {257, 2048}}});
    // Row lengths the K-quants cannot take: whole blocks of 32 that are not whole
    // super-blocks (Q4_K_M files store such tensors as Q5_0/Q8_0), and float-type
    // lengths with a tail shorter than a SIMD vector.
    ShapePreset odd{"odd-cols",
                    "cols not a multiple of 256: rows {1,3,67,130} x cols {32,96,4128} for the "
                    "legacy quants, plus 1x1, 3x7, 67x100, 130x1001 for the float types",
                    {}};
    for (std::int64_t r : {1, 3, 67, 130})
      for (std::int64_t c : {32, 96, 4128}) odd.shapes.push_back({r, c});
    for (Shape s : {Shape{1, 1}, Shape{3, 7}, Shape{67, 100}, Shape{130, 1001}}) odd.shapes.push_back(s);
    p.push_back(std::move(odd));
    return p;
  }();
  return presets;
}

namespace {

bool parse_int(std::string_view s, std::int64_t& out) {
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

std::vector<Shape> parse_shapes(std::string_view spec) {
  std::vector<Shape> out;
  auto add = [&out](Shape s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  std::size_t start = 0;
  while (start <= spec.size()) {
    std::size_t end = spec.find(',', start);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view token = trim(spec.substr(start, end - start));
    start = end + 1;
    if (token.empty()) continue;
    const auto preset = std::find_if(shape_presets().begin(), shape_presets().end(),
                                     [&](const ShapePreset& p) { return token == p.name; });
    if (preset != shape_presets().end()) {
      for (Shape s : preset->shapes) add(s);
      continue;
    }
    const std::size_t x = token.find('x');
    Shape s;
    if (x == std::string_view::npos || !parse_int(token.substr(0, x), s.rows) ||
        !parse_int(token.substr(x + 1), s.cols) || s.rows <= 0 || s.cols <= 0) {
      std::string names;
      for (const auto& p : shape_presets()) names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
      throw std::invalid_argument(fmt::format(
          "bad shape '{}': expected ROWSxCOLS with positive integers (e.g. 4096x11008) or a "
          "preset ({})",
          token, names));
    }
    add(s);
  }
  if (out.empty()) throw std::invalid_argument("no shapes given");
  return out;
}

}  // namespace qmv
