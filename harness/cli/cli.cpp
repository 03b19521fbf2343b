#include "harness/cli/cli.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/csv.h"
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

// The ISA mask, from the environment or --cpu-features (which wins), applied (with
// `apply`) before anything reads the machine: its name and every kernel's availability
// depend on it. Returns the error to report, or "".
std::string apply_cpu_feature_mask(int argc, char** argv, bool apply) {
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
    const std::uint32_t mask = parse_cpu_features(list);
    if (apply) set_cpu_feature_mask(mask);
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
  // CLI11's PositiveNumber and NonNegativeNumber are ranges up to the largest double,
  // which their message spells out in 309 digits: the same checks, said plainly.
  const auto sign_check = [](bool zero_allowed) {
    return CLI::Validator(
        [zero_allowed](std::string& text) -> std::string {
          char* end = nullptr;
          const double v = std::strtod(text.c_str(), &end);
          if (end == text.c_str() || *end != '\0') return "'" + text + "' is not a number";
          if (!std::isfinite(v)) return "'" + text + "' is not a finite number";
          if (zero_allowed ? v >= 0 : v > 0) return {};
          return "'" + text + (zero_allowed ? "' is negative" : "' is not positive");
        },
        zero_allowed ? "NONNEGATIVE" : "POSITIVE", zero_allowed ? "NONNEGATIVE" : "POSITIVE");
  };
  // CLI11 reads an unsigned option with strtoull, which takes "-1" as the largest value
  // and a number past 2^64 as 2^64 - 1: a seed of -1 would run as 18446744073709551615.
  const CLI::Validator unsigned_whole(
      [](std::string& text) -> std::string {
        if (text.find('-') != std::string::npos) return "'" + text + "' is negative";
        errno = 0;
        char* end = nullptr;
        (void)std::strtoull(text.c_str(), &end, 0);
        if (end != text.c_str() && errno == ERANGE) return "'" + text + "' is out of range";
        return {};
      },
      "", "unsigned");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    check_numbers_where_they_enter(*sub, max_threads);
    for (CLI::Option* o : sub->get_options()) {
      for (int i = 0;; ++i) {
        CLI::Validator* v = nullptr;
        try {
          v = o->get_validator(i);
        } catch (const CLI::OptionNotFound&) {
          break;  // past the last one
        }
        const std::string kind = v->get_description();
        if (kind == "POSITIVE" || kind == "NONNEGATIVE") *v = sign_check(kind == "NONNEGATIVE");
      }
      const std::string type = o->get_type_name();
      if (type.rfind("FLOAT", 0) == 0) o->check(finite);
      if (type.rfind("UINT", 0) == 0) o->check(unsigned_whole);
      if (o->check_lname("threads") && type.rfind("INT", 0) == 0) o->check(thread_bound);
    }
  }
}

// The one line a refused command line gets: the subcommand, CLI11's message, where help is.
std::string parse_error_message(const CLI::App& app, const CLI::Error& e) {
  std::string where = "qmvlab";
  for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
  // With no subcommand chosen, CLI11 says one is required even when a word was given for
  // it: name that word.
  const std::vector<std::string> left = app.remaining();
  if (where == "qmvlab" && dynamic_cast<const CLI::RequiredError*>(&e) && !left.empty() && !left.front().empty()) {
    if (left.front().front() == '-')
      return fmt::format("qmvlab: unknown option '{}' (see `qmvlab --help`)", one_line(left.front()));
    std::string known;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App* a) { return !a->get_group().empty(); }))
      known += (known.empty() ? "" : ", ") + sub->get_name();
    return fmt::format("qmvlab: unknown subcommand '{}' (known: {})", one_line(left.front()), known);
  }
  return fmt::format("{}: {} (see `{} --help`)", where, one_line(e.what()), where);
}

// The parser of every subcommand, each Command beside the options it fills.
struct Cli {
  CLI::App app{
      "qmvlab: which quantized GEMV kernel is fastest and accurate enough, on this machine.\n"
      "Kernels are GGUF K-quant matvec plugins; every subcommand reads the registry."};
  std::string cpu_features;
  std::vector<std::unique_ptr<Command>> commands;

  Cli() {
    app.require_subcommand(1);
    // Read before parsing (apply_cpu_feature_mask); declared here for --help and so that
    // it is accepted before or after the subcommand.
    app.add_option("--cpu-features", cpu_features,
                   "Behave as on a CPU with only these features, e.g. avx2,fma,f16c (also the environment "
                   "variable QMV_CPU_FEATURES); results go to results/<machine>-isa-<features>/");
    app.fallthrough();
    app.set_version_flag("--version", std::string("qmvlab ") + machine_info().git_commit);
    // CLI11's own adds a second line; every refusal here is one.
    app.failure_message([](const CLI::App* a, const CLI::Error& e) { return parse_error_message(*a, e) + "\n"; });
    for (CommandFactory make : kCommands) commands.push_back(make(app));
    check_numbers_where_they_enter(app, 8 * std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  }
};

}  // namespace

int run_cli(int argc, char** argv) {
  for (const std::string& error : {apply_cpu_feature_mask(argc, argv, true), huge_pages_setting_error()})
    if (!error.empty()) {
      fmt::print(stderr, "qmvlab: {}\n", error);
      return 2;
    }
  Cli cli;
  try {
    cli.app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.app.exit(e) == 0 ? 0 : 2;
  }
  try {
    for (const auto& c : cli.commands)
      if (c->chosen()) return c->run(command_line(argc, argv));
  } catch (const std::exception& e) {
    // Every error below the command line is bad input or an unusable machine, with a
    // message that says which: one line, exit 2.
    fmt::print(stderr, "qmvlab: {}\n", e.what());
    return 2;
  }
  return 0;
}

int parse_cli_only(int argc, char** argv, std::string* error) {
  if (std::string e = apply_cpu_feature_mask(argc, argv, false); !e.empty()) {
    if (error) *error = "qmvlab: " + e;
    return 2;
  }
  Cli cli;
  try {
    cli.app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return 0;  // --help, --version, list --shapes
    if (error) *error = parse_error_message(cli.app, e);
    return 2;
  }
  return 0;
}

}  // namespace qmv
