#include "harness/cli/cli.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/machine.h"
#include "kernels/cpu_features.h"
#include "kernels/weight_memory.h"

namespace qmv {
namespace {

// The subcommands, in the order `qmvlab --help` lists them.
constexpr CommandFactory kCommands[] = {
    list_command,   check_command,  bench_command,    peak_command,    gguf_command,
    plan_command,   tokenize_command, decode_command, tune_command,    gate_command,
    accuracy_command, compare_command, sweep_command, report_command,  make_model_command,
};

// The command line as typed, quoted where a shell would need it (the CSVs record it).
std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    const std::string arg = argv[i];
    s += arg.find_first_of(" *?,'\"") == std::string::npos ? arg : "'" + arg + "'";
  }
  return s;
}

// The ISA mask, from the environment or --cpu-features (which wins), applied before
// anything reads the machine: its name and every kernel's availability depend on it.
// Returns the error to report, or "".
std::string apply_cpu_feature_mask(int argc, char** argv) {
  std::string list, source;
  if (const char* env = std::getenv(kCpuFeaturesEnv)) list = env, source = kCpuFeaturesEnv;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "--cpu-features" && i + 1 < argc) list = argv[i + 1], source = "--cpu-features";
    if (arg.rfind("--cpu-features=", 0) == 0) list = arg.substr(15), source = "--cpu-features";
  }
  if (source.empty()) return "";
  try {
    set_cpu_feature_mask(parse_cpu_features(list));
  } catch (const std::invalid_argument& e) {
    return source + ": " + e.what();
  }
  return "";
}

// Numbers are checked where they enter: every floating-point option of every
// subcommand refuses NaN and the infinities (a range check lets NaN through), and every
// integer --threads is bounded by a multiple of the hardware threads (more only
// oversubscribes; far more fails to create its threads).
void check_numbers_where_they_enter(CLI::App& app, int max_threads) {
  const CLI::Validator finite(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end != text.c_str() && !std::isfinite(v)) return "'" + text + "' is not a finite number";
        return {};
      },
      "", "finite");
  const CLI::Validator thread_bound(
      [max_threads](std::string& text) -> std::string {
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (end != text.c_str() && *end == '\0' && v > max_threads)
          return fmt::format("{} threads is more than {} (8x this machine's hardware threads)", text, max_threads);
        return {};
      },
      "", "thread bound");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    check_numbers_where_they_enter(*sub, max_threads);
    for (CLI::Option* o : sub->get_options()) {
      const std::string type = o->get_type_name();
      if (type.rfind("FLOAT", 0) == 0) o->check(finite);
      if (o->check_lname("threads") && type.rfind("INT", 0) == 0) o->check(thread_bound);
    }
  }
}

}  // namespace

int run_cli(int argc, char** argv) {
  for (const std::string& error : {apply_cpu_feature_mask(argc, argv), huge_pages_setting_error()})
    if (!error.empty()) {
      fmt::print(stderr, "qmvlab: {}\n", error);
      return 2;
    }
  CLI::App app{
      "qmvlab: which quantized GEMV kernel is fastest and accurate enough, on this machine.\n"
      "Kernels are GGUF K-quant matvec plugins; every subcommand reads the registry."};
  app.require_subcommand(1);
  // Read before parsing (apply_cpu_feature_mask); declared here for --help and so that
  // it is accepted before or after the subcommand.
  std::string cpu_features;
  app.add_option("--cpu-features", cpu_features,
                 "Behave as on a CPU with only these features, e.g. avx2,fma,f16c (also the environment "
                 "variable QMV_CPU_FEATURES); results go to results/<machine>-isa-<features>/");
  app.fallthrough();
  app.set_version_flag("--version", std::string("qmvlab ") + machine_info().git_commit);
  std::vector<std::unique_ptr<Command>> commands;
  for (CommandFactory make : kCommands) commands.push_back(make(app));
  check_numbers_where_they_enter(app, 8 * std::max(1, static_cast<int>(std::thread::hardware_concurrency())));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    for (const auto& c : commands)
      if (c->chosen()) return c->run(command_line(argc, argv));
  } catch (const std::exception& e) {
    // Every error below the command line is bad input or an unusable machine, with a
    // message that says which: one line, exit 2.
    fmt::print(stderr, "qmvlab: {}\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace qmv
