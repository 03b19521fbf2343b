// Shape lists for check and bench: explicit "RxC" shapes and named presets.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/kernel.h"

namespace qmv {

struct ShapePreset {
  const char* name;
  const char* description;
  std::vector<Shape> shapes;
};
const std::vector<ShapePreset>& shape_presets();

// Parses a comma-separated list of "ROWSxCOLS" and preset names into unique shapes
// in first-seen order. Throws std::invalid_argument naming the bad token.
std::vector<Shape> parse_shapes(std::string_view spec);

}  // namespace qmv
