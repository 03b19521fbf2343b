// Option parsing shared by the subcommands: kernel globs, shapes, thread lists and
// the CPU tiling options. Each throws UsageError with a one-line message.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "harness/shapes.h"
#include "kernels/cpu_tiling.h"
#include "kernels/registry.h"

namespace qmv {

// The kernels `globs` selects; none is an error naming the known kernels.
std::vector<const KernelSpec*> select_kernels(const std::string& globs);

// parse_shapes, its errors as UsageError.
std::vector<Shape> shapes_or_throw(const std::string& spec);

// A shape no selected kernel can take is a mistake worth stopping for; a shape some
// kernels skip (an f32-only shape rule, say) is not.
void require_supported(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes);

// "1,2", "all" or "1,all": distinct positive thread counts in the order given.
std::vector<int> parse_threads(const std::string& spec);

// --tile-rows and --min-parallel-rows, parsed into `tiling` (which starts as the
// current tiling); the command applies it with set_cpu_tiling before it runs.
void add_tiling_options(CLI::App* sub, CpuTiling& tiling);

}  // namespace qmv
