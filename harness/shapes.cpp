#include "harness/shapes.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include "model/ops.h"

namespace qmv {

const std::vector<std::string>& model_op_tags() {
  // The model's matrices: every matvec op but the fused one, which reads two of them.
  static const std::vector<std::string> tags = [] {
    std::vector<std::string> v;
    for (Op op : matvec_ops())
      if (op != Op::FfnUpGate) v.emplace_back(to_string(op));
    return v;
  }();
  return tags;
}

namespace {

// Adds `op` to the tags of an existing equal shape, or appends the shape.
void add_tagged(std::vector<TaggedShape>& out, Shape s, const std::string& op) {
  auto it = std::find_if(out.begin(), out.end(), [&](const TaggedShape& t) { return t.shape == s; });
  if (it == out.end()) {
    out.push_back({s, op});
    return;
  }
  if (op.empty()) return;
  std::string_view have = it->ops;
  std::size_t start = 0;
  while (start <= have.size()) {
    std::size_t end = have.find(',', start);
    if (end == std::string_view::npos) end = have.size();
    if (have.substr(start, end - start) == op) return;
    start = end + 1;
  }
  it->ops += (it->ops.empty() ? "" : ",") + op;
}

struct ModelDims {
  std::int64_t width, ffn, heads, kv_heads, head_dim, vocab;
};

// One decoder layer's matvecs plus the output head, as rows x cols = output x input;
// shapes shared by several ops are listed once with all their tags.
std::vector<TaggedShape> model_shapes(const ModelDims& d) {
  const ModelWidths widths{d.width, d.heads * d.head_dim, d.kv_heads * d.head_dim, d.ffn, d.vocab};
  std::vector<TaggedShape> out;
  for (const WeightMatvec& m : kWeightMatvecs) add_tagged(out, m.shape(widths), std::string(to_string(m.op)));
  return out;
}

std::vector<TaggedShape> untagged(std::initializer_list<Shape> shapes) {
  std::vector<TaggedShape> out;
  for (Shape s : shapes) out.push_back({s, ""});
  return out;
}

}  // namespace

const std::vector<ShapePreset>& shape_presets() {
  static const std::vector<ShapePreset> presets = [] {
    std::vector<ShapePreset> p;
    // Hyperparameters from each model's config.json (hidden_size, intermediate_size,
    // attention heads, key/value heads, head_dim, vocab_size).
    const auto llama2_7b = model_shapes({4096, 11008, 32, 32, 128, 32000});
    // Awkward rows (1, 3, a prime not a multiple of any tile, a full tile count) against
    // the smallest, a small, a typical and the largest FFN input length.
    ShapePreset check{"default",
                      "check default: rows {1,3,67,4096} x cols {256,512,4096,14336}, "
                      "plus llama-2-7b",
                      {}};
    for (std::int64_t r : {1, 3, 67, 4096})
      for (std::int64_t c : {256, 512, 4096, 14336}) check.shapes.push_back({{r, c}, ""});
    for (const TaggedShape& s : llama2_7b) add_tagged(check.shapes, s.shape, "");
    p.push_back(std::move(check));
    p.push_back({"tinyllama-1.1b", "TinyLlama-1.1B: width 2048, FFN 5632, 32/4 heads of 64, vocab 32000",
                 model_shapes({2048, 5632, 32, 4, 64, 32000})});
    p.push_back({"llama-2-7b", "Llama-2-7B: width 4096, FFN 11008, 32/32 heads of 128, vocab 32000",
                 llama2_7b});
    p.push_back({"llama-3-8b", "Llama-3-8B: width 4096, FFN 14336, 32/8 heads of 128, vocab 128256",
                 model_shapes({4096, 14336, 32, 8, 128, 128256})});
    p.push_back({"qwen2.5-7b", "Qwen2.5-7B: width 3584, FFN 18944, 28/4 heads of 128, vocab 152064",
                 model_shapes({3584, 18944, 28, 4, 128, 152064})});
    p.push_back({"qwen3-0.6b", "Qwen3-0.6B: width 1024, FFN 3072, 16/8 heads of 128, vocab 151936",
                 model_shapes({1024, 3072, 16, 8, 128, 151936})});
    // The shapes the CPU bandwidth targets are stated on.
    p.push_back({"llama-3-8b-ffn", "Llama-3-8B FFN: up/gate 14336x4096, down 4096x14336",
                 {{{14336, 4096}, "ffn_gate,ffn_up"}, {{4096, 14336}, "ffn_down"}}});
    p.push_back({"small", "fast set for tests and CI: awkward rows, small cols",
                 untagged({{1, 256}, {3, 512}, {67, 256}, {67, 4096}, {130, 1024}, {257, 2048}})});
    // Row lengths the K-quants cannot take: whole blocks of 32 that are not whole
    // super-blocks (Q4_K_M files store such tensors as Q5_0/Q8_0), and float-type
    // lengths with a tail shorter than a SIMD vector.
    ShapePreset odd{"odd-cols",
                    "cols not a multiple of 256: rows {1,3,67,130} x cols {32,96,4128} for the "
                    "legacy quants, plus 1x1, 3x7, 67x100, 130x1001 for the float types",
                    {}};
    for (std::int64_t r : {1, 3, 67, 130})
      for (std::int64_t c : {32, 96, 4128}) odd.shapes.push_back({{r, c}, ""});
    for (Shape s : {Shape{1, 1}, Shape{3, 7}, Shape{67, 100}, Shape{130, 1001}}) odd.shapes.push_back({s, ""});
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

std::vector<TaggedShape> parse_tagged_shapes(std::string_view spec) {
  std::vector<TaggedShape> out;
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
      for (const TaggedShape& s : preset->shapes) {
        if (s.ops.empty()) add_tagged(out, s.shape, "");
        // Tags are added one by one so that a shape two models share keeps both sets.
        for (std::size_t a = 0; a <= s.ops.size();) {
          std::size_t b = s.ops.find(',', a);
          if (b == std::string::npos) b = s.ops.size();
          if (b > a) add_tagged(out, s.shape, s.ops.substr(a, b - a));
          a = b + 1;
        }
      }
      continue;
    }
    const std::size_t colon = token.find(':');
    const std::string_view dims = token.substr(0, colon);
    const std::string op = colon == std::string_view::npos ? "" : std::string(token.substr(colon + 1));
    const std::size_t x = dims.find('x');
    Shape s;
    if (x == std::string_view::npos || !parse_int(dims.substr(0, x), s.rows) ||
        !parse_int(dims.substr(x + 1), s.cols) || s.rows <= 0 || s.cols <= 0) {
      std::string names;
      for (const auto& p : shape_presets()) names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
      throw std::invalid_argument(fmt::format(
          "bad shape '{}': expected ROWSxCOLS with positive integers (e.g. 4096x11008), "
          "ROWSxCOLS:OP or a preset ({})",
          token, names));
    }
    // Every byte count of a shape (f32 weights: 4 bytes an element, rotations of copies)
    // must be computable without overflow and allocatable at all.
    if (s.rows > kMaxShapeDim || s.cols > kMaxShapeDim || s.rows * s.cols > kMaxShapeElements)
      throw std::invalid_argument(fmt::format(
          "bad shape '{}': at most {} rows, {} columns and {} elements (2^32)", token, kMaxShapeDim, kMaxShapeDim,
          kMaxShapeElements));
    if (colon != std::string_view::npos &&
        std::find(model_op_tags().begin(), model_op_tags().end(), op) == model_op_tags().end()) {
      std::string ops;
      for (const auto& t : model_op_tags()) ops += (ops.empty() ? "" : ", ") + t;
      throw std::invalid_argument(
          fmt::format("bad shape '{}': unknown op '{}' (known: {})", token, op, ops));
    }
    add_tagged(out, s, op);
  }
  if (out.empty()) throw std::invalid_argument("no shapes given");
  return out;
}

std::vector<Shape> parse_shapes(std::string_view spec) {
  std::vector<Shape> out;
  for (const TaggedShape& t : parse_tagged_shapes(spec)) out.push_back(t.shape);
  return out;
}

}  // namespace qmv
