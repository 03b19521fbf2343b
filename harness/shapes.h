// Shape lists for check, bench and sweeps: explicit "RxC" / "RxC:op" shapes and named
// presets, among them the matvecs of real models tagged with the op each one is.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kernel.h"

namespace qmv {

// A shape and the model ops that have it ("attn_k,attn_v"); ops is empty for a shape
// that stands for no particular op.
struct TaggedShape {
  Shape shape;
  std::string ops;
  friend bool operator==(const TaggedShape&, const TaggedShape&) = default;
};

struct ShapePreset {
  std::string name;
  std::string description;
  std::vector<TaggedShape> shapes;
};
const std::vector<ShapePreset>& shape_presets();

// The op tags a shape may carry, in forward-pass order.
const std::vector<std::string>& model_op_tags();

// The largest shape parse_tagged_shapes takes: 2^24 rows or columns, 2^32 elements
// (a vocabulary of 152064 x 8192 is 1.2 x 10^9).
inline constexpr std::int64_t kMaxShapeDim = std::int64_t{1} << 24;
inline constexpr std::int64_t kMaxShapeElements = std::int64_t{1} << 32;

// Parses a comma-separated list of "ROWSxCOLS", "ROWSxCOLS:OP" and preset names into
// unique shapes in first-seen order; a shape met again adds its op tags to the first.
// Throws std::invalid_argument naming the bad token.
std::vector<TaggedShape> parse_tagged_shapes(std::string_view spec);
// The same, without the tags.
std::vector<Shape> parse_shapes(std::string_view spec);

}  // namespace qmv
