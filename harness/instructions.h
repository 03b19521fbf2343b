// The deterministic half of the performance gate: a CPU kernel's executed
// instructions per weight byte, counted by valgrind's callgrind. Unlike a time, the
// count does not move with the load of a shared machine, so a small tolerance holds.
// Valgrind cannot decode 512-bit AVX instructions: under it the CPU reports none and those
// kernels are unavailable, which leaves them to the timed half of the gate.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/kernel.h"

namespace qmv {

struct InstructionCount {
  std::string kernel;
  Shape shape;
  double instructions = 0;  // executed by one call
  double weight_bytes = 0;  // read by one call (both matrices of a fused op)
  double per_weight_byte() const { return weight_bytes > 0 ? instructions / weight_bytes : 0; }
};

using InstructionPoint = std::pair<const KernelSpec*, Shape>;

// True when this process runs under valgrind.
bool running_under_valgrind();

// In the child process (under callgrind, started with --instr-atstart=no): for each
// point, one uninstrumented call to warm up, then one call with instrumentation on,
// dumped as a profile named after the point. One thread; fixed seeds.
void run_instrumented_calls(const std::vector<InstructionPoint>& points);

// "kernel@RxC,kernel@RxC": the points a child runs. Throws on an unknown kernel or
// a bad shape.
std::string format_points(const std::vector<InstructionPoint>& points);
std::vector<InstructionPoint> parse_points(const std::string& text);

// The valgrind on PATH (its version line), or empty when there is none.
std::string valgrind_version();

// Runs `child_argv` (a program that calls run_instrumented_calls for `points`) under
// callgrind in `work_dir` and reads one count per point from its dumps. Throws with
// the end of valgrind's log when it fails or a point has no dump.
std::vector<InstructionCount> count_instructions(const std::vector<std::string>& child_argv,
                                                 const std::vector<InstructionPoint>& points,
                                                 const std::string& work_dir);

// One line per kernel whose instructions per weight byte grew by more than
// `tolerance` (0.03: above 103% of the baseline), naming the kernel, both figures and
// the shape. Kernels without a baseline row are listed in `missing`.
std::vector<std::string> instruction_regressions(const std::vector<InstructionCount>& measured,
                                                 const std::vector<InstructionCount>& baseline, double tolerance,
                                                 std::vector<std::string>* missing = nullptr);

std::vector<InstructionCount> read_instruction_baseline(const std::string& path);
void write_instruction_baseline(const std::string& path, const std::vector<InstructionCount>& counts,
                                const std::string& valgrind);

}  // namespace qmv
