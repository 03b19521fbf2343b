#include "harness/instructions.h"

#include <fmt/format.h>
#include <unistd.h>
#include <valgrind/callgrind.h>
#include <valgrind/valgrind.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "harness/child_process.h"
#include "harness/csv.h"
#include "harness/data.h"
#include "harness/fccp.h"
#include "harness/machine.h"
#include "harness/shapes.h"
#include "kernels/activation_quantizers.h"
#include "kernels/registry.h"

namespace qmv {

namespace {

namespace fs = std::filesystem;

std::string point_label(std::size_t i) { return fmt::format("qmv-point-{}", i); }

std::string tail_of_file(const fs::path& path, std::size_t max_bytes = 2000) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  return s.size() > max_bytes ? "..." + s.substr(s.size() - max_bytes) : s;
}

// Runs argv with stdout and stderr to `log`; returns the exit status (-1: not started).
int run_logged(const std::vector<std::string>& argv, const fs::path& log) try {
  const ChildEnd end = run_child(argv, 0, log.string());
  return end.how == ChildEnd::How::Signalled ? 128 + end.code : end.code;
} catch (const std::runtime_error&) {
  return -1;
}

double weight_bytes_of(const KernelSpec& k, Shape s) {
  const double one = static_cast<double>(row_bytes(k.weight, s.cols)) * static_cast<double>(s.rows);
  return k.op == OpKind::FusedUpGate ? 2 * one : one;
}

}  // namespace

bool running_under_valgrind() { return RUNNING_ON_VALGRIND != 0; }

void run_instrumented_calls(const std::vector<InstructionPoint>& points) {
  for (std::size_t i = 0; i < points.size(); ++i) {
    const KernelSpec& k = *points[i].first;
    const Shape s = points[i].second;
    const int matrices = k.op == OpKind::FusedUpGate ? 2 : 1;
    std::vector<std::vector<std::uint8_t>> w;
    for (int m = 0; m < matrices; ++m) w.push_back(random_quantized_matrix(k.weight, s, 17u + 31u * m));
    const std::vector<float> xf = gaussian_vector(s.cols, 5);
    std::vector<std::uint8_t> x(row_bytes(k.act, s.cols));
    quantize_activation(k.act, xf.data(), x.data(), s.cols);
    std::vector<float> y(static_cast<std::size_t>(s.rows)), y2(static_cast<std::size_t>(s.rows));
    MatVecArgs a;
    a.shape = s;
    a.w = w[0].data();
    a.w_bytes = w[0].size();
    a.x = x.data();
    a.x_bytes = x.size();
    a.y = y.data();
    a.y_len = y.size();
    if (matrices == 2) {
      a.w2 = w[1].data();
      a.w2_bytes = w[1].size();
      a.y2 = y2.data();
      a.y2_len = y2.size();
    }
    a.threads = 1;
    // A kernel with its own weight layout: the repack is made here, outside the count.
    PreparedMatrix prepared;
    if (Status st = prepared.prepare(k, a); !st.ok()) throw std::runtime_error(k.name + ": " + st.error);
    a.prepared = prepared.handle();
    Status st = invoke(k, a);  // warm-up: lazy binding, first touch, the thread team
    if (!st.ok()) throw std::runtime_error(k.name + ": " + st.error);
    const std::string label = point_label(i);
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_ZERO_STATS;
    st = invoke(k, a);
    CALLGRIND_DUMP_STATS_AT(label.c_str());
    CALLGRIND_STOP_INSTRUMENTATION;
    if (!st.ok()) throw std::runtime_error(k.name + ": " + st.error);
  }
}

std::string format_points(const std::vector<InstructionPoint>& points) {
  std::string out;
  for (const auto& [k, s] : points) out += fmt::format("{}{}@{}", out.empty() ? "" : ",", k->name, to_string(s));
  return out;
}

std::vector<InstructionPoint> parse_points(const std::string& text) {
  std::vector<InstructionPoint> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto at = item.find('@');
    if (at == std::string::npos) throw std::runtime_error("point '" + item + "' is not kernel@RxC");
    const KernelSpec* k = global_registry().find(item.substr(0, at));
    if (!k) throw std::runtime_error("unknown kernel '" + item.substr(0, at) + "'");
    const std::vector<Shape> shapes = parse_shapes(item.substr(at + 1));
    if (shapes.size() != 1) throw std::runtime_error("point '" + item + "' needs one shape");
    out.emplace_back(k, shapes[0]);
  }
  return out;
}

std::string valgrind_version() {
  const fs::path log = fs::temp_directory_path() / fmt::format("qmvlab-valgrind-version-{}.txt", getpid());
  const int rc = run_logged({"valgrind", "--version"}, log);
  std::string version;
  if (rc == 0) {
    std::ifstream in(log);
    std::getline(in, version);
  }
  fs::remove(log);
  return version;
}

std::vector<InstructionCount> count_instructions(const std::vector<std::string>& child_argv,
                                                 const std::vector<InstructionPoint>& points,
                                                 const std::string& work_dir) {
  const fs::path dir(work_dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("callgrind.out", 0) == 0) fs::remove(e.path());
  // One OpenMP thread that never spins: a spinning idle thread's instructions would be
  // counted too, and they vary from run to run.
  std::vector<std::string> argv = {"env", "OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive",
                                   "valgrind", "--tool=callgrind", "--instr-atstart=no",
                                   "--callgrind-out-file=" + (dir / "callgrind.out").string()};
  argv.insert(argv.end(), child_argv.begin(), child_argv.end());
  const fs::path log = dir / "valgrind.log";
  const int rc = run_logged(argv, log);
  if (rc != 0)
    throw std::runtime_error(fmt::format("valgrind --tool=callgrind exited with {} ({}):\n{}", rc,
                                         rc < 0 ? "could not start valgrind" : "see the log", tail_of_file(log)));
  // Each client-request dump is a file callgrind.out.N: its trigger names the point,
  // its totals line holds the instructions (Ir, the only event collected).
  std::map<std::string, double> by_label;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("callgrind.out", 0) != 0) continue;
    std::ifstream in(e.path());
    std::string line, label;
    double total = -1;
    const std::string trigger = "desc: Trigger: Client Request: ";
    while (std::getline(in, line)) {
      if (line.rfind(trigger, 0) == 0) label = line.substr(trigger.size());
      if (line.rfind("totals: ", 0) == 0) total = std::stod(line.substr(8));
    }
    if (!label.empty() && total >= 0) by_label[label] = total;
  }
  std::vector<InstructionCount> out;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto it = by_label.find(point_label(i));
    if (it == by_label.end())
      throw std::runtime_error(fmt::format("callgrind left no count for {} {}; valgrind's log:\n{}",
                                           points[i].first->name, to_string(points[i].second), tail_of_file(log)));
    out.push_back({points[i].first->name, points[i].second, it->second,
                   weight_bytes_of(*points[i].first, points[i].second)});
  }
  return out;
}

std::vector<std::string> instruction_regressions(const std::vector<InstructionCount>& measured,
                                                 const std::vector<InstructionCount>& baseline, double tolerance,
                                                 std::vector<std::string>* missing) {
  std::vector<std::string> failures;
  for (const InstructionCount& m : measured) {
    const auto b = std::find_if(baseline.begin(), baseline.end(),
                                [&](const InstructionCount& x) { return x.kernel == m.kernel && x.shape == m.shape; });
    if (b == baseline.end()) {
      if (missing) missing->push_back(m.kernel);
      continue;
    }
    const double allowed = b->per_weight_byte() * (1.0 + tolerance);
    if (m.per_weight_byte() > allowed)
      failures.push_back(fmt::format("{} {}: {:.3f} instructions per weight byte now, baseline {:.3f} "
                                     "(allowed up to {:.3f})",
                                     m.kernel, to_string(m.shape), m.per_weight_byte(), b->per_weight_byte(),
                                     allowed));
  }
  return failures;
}

std::vector<InstructionCount> read_instruction_baseline(const std::string& path) {
  std::vector<InstructionCount> out;
  try {
    io::CSVReader<5, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>> in(path);
    in.read_header(io::ignore_extra_column, "kernel", "rows", "cols", "instructions", "weight_bytes");
    InstructionCount c;
    while (in.read_row(c.kernel, c.shape.rows, c.shape.cols, c.instructions, c.weight_bytes)) out.push_back(c);
  } catch (const io::error::base& e) {
    throw std::runtime_error(fmt::format("instruction baseline {}: {}", path, e.what()));
  }
  return out;
}

void write_instruction_baseline(const std::string& path, const std::vector<InstructionCount>& counts,
                                const std::string& valgrind) {
  const MachineInfo& m = machine_info();
  CsvWriter csv(path,
                {"kernel", "rows", "cols", "instructions", "weight_bytes", "instructions_per_weight_byte", "compiler",
                 "valgrind", "git_commit"},
                false);
  for (const InstructionCount& c : counts)
    csv.write({c.kernel, std::to_string(c.shape.rows), std::to_string(c.shape.cols),
               fmt::format("{:.0f}", c.instructions), fmt::format("{:.0f}", c.weight_bytes),
               fmt::format("{:.4f}", c.per_weight_byte()), m.compiler, valgrind, m.git_commit});
}

}  // namespace qmv
