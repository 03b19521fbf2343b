#include "harness/cli/options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <iostream>
#include <fstream>
#include <filesystem>
#include <cstdio>
#include <stdexcept>

#include "harness/cli/command.h"
#include "harness/csv.h"
#include "harness/experiment.h"
#include "harness/machine.h"
#include "harness/output_file.h"

namespace qmv {

std::vector<const KernelSpec*> select_kernels(const std::string& globs) {
  if (const auto unmatched = global_registry().unmatched_exclusions(globs); !unmatched.empty())
    throw UsageError(fmt::format("'{}' excludes no kernel (see `qmvlab list`)", fmt::join(unmatched, ",")));
  const auto selected = global_registry().select(globs);
  if (!selected.empty()) return selected;
  if (const std::string why = exclusions_removed_all(globs); !why.empty()) throw UsageError(why);
  const bool has_wildcard = globs.find_first_of("*?[") != std::string::npos;
  std::string known;
  for (const auto& k : global_registry().all()) known += (known.empty() ? "" : ", ") + k.name;
  if (!has_wildcard && globs.find(',') == std::string::npos)
    throw UsageError(fmt::format("unknown kernel '{}' (known: {})", globs, known));
  throw UsageError(fmt::format("no kernel matches '{}' (known: {})", globs, known));
}

std::vector<Shape> shapes_or_throw(const std::string& spec) {
  try {
    return parse_shapes(spec);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

void require_supported(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes) {
  for (Shape s : shapes) {
    const bool any = std::any_of(kernels.begin(), kernels.end(),
                                 [&](const KernelSpec* k) { return k->supports(s); });
    if (!any)
      throw UsageError(fmt::format("shape {} is not supported by any selected kernel ({} needs {})",
                                   to_string(s), kernels.front()->name, kernels.front()->shape_rule));
  }
}

std::vector<int> parse_threads(const std::string& spec) {
  if (spec == "all") return {machine_info().cores};
  std::vector<int> out;
  std::size_t start = 0;
  while (start <= spec.size()) {
    std::size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    const std::string tok = spec.substr(start, end - start);
    start = end + 1;
    if (tok == "all") {
      out.push_back(machine_info().cores);
      continue;
    }
    std::size_t used = 0;
    int t = 0;
    try {
      t = std::stoi(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tok.size() || t < 1 || t > 4096)
      throw UsageError(fmt::format("bad thread count '{}': expected positive integers or 'all', "
                                   "e.g. --threads 1,2",
                                   tok));
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

void add_tiling_options(CLI::App* sub, CpuTiling& tiling) {
  sub->add_option("--tile-rows", tiling.tile_rows, "CPU kernels: rows per OpenMP work item")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  sub->add_option("--min-parallel-rows", tiling.min_parallel_rows,
                  "CPU kernels: calls with fewer rows run on one thread")
      ->check(CLI::Range(0, 1 << 30))->capture_default_str();
}

void add_auto_plan_options(CLI::App* sub, AutoPlanChoice& choice) {
  auto* csv = sub->add_option("--bench-csv", choice.bench_csv,
                              "Bench results for `auto` to pick the fastest kernel from, instead of the tuning store");
  sub->add_flag("--no-tune", choice.no_tune,
                "`auto` uses the tuning store's figures only, timing nothing; a matvec it has none for takes the "
                "static order (the store: $QMV_TUNING_STORE, else results/<machine>/tuning.csv)")
      ->excludes(csv);
  const AutoPlanOptions defaults;
  sub->add_option("--tune-time", choice.tune_time_s,
                  fmt::format("Seconds per timed repetition when `auto` times kernels (the screening pass takes "
                              "{:g} of it): shorter is quicker and noisier, and what it measures is kept in the "
                              "tuning store",
                              defaults.screen_min_time_s / defaults.final_min_time_s))
      ->check(CLI::Range(1e-4, 10.0))
      ->capture_default_str()
      ->excludes(csv);
  sub->add_flag("--rank-all-speeds", choice.rank_all_speeds,
                "Where the store has rows of a matvec at two or more read speeds of the memory, `auto` ranks its "
                "kernels by their geometric mean over all of them, instead of at the speed the memory reads at now "
                "(one short read before planning)")
      ->excludes(csv);
}

std::string read_prompt_file(const std::string& path) {
  constexpr std::size_t kMaxBytes = std::size_t{64} << 20;
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    if (const std::string problem = input_file_problem(path); !problem.empty())
      throw std::invalid_argument(fmt::format("--prompt-file {}: {}", path, problem));
    std::error_code ec;
    if (std::filesystem::file_size(path, ec) > kMaxBytes)
      throw std::invalid_argument(fmt::format("--prompt-file {}: more than 64 MiB", path));
    std::ifstream in(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) throw std::invalid_argument(fmt::format("--prompt-file {}: cannot read", path));
  }
  if (text.size() > kMaxBytes) throw std::invalid_argument(fmt::format("--prompt-file {}: more than 64 MiB", path));
  return text;
}

void check_utf8(std::string_view text, const std::string& what) {
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (lead < 0x80) n = 1, cp = lead;
    else if ((lead & 0xE0) == 0xC0) n = 2, cp = lead & 0x1F;
    else if ((lead & 0xF0) == 0xE0) n = 3, cp = lead & 0x0F;
    else if ((lead & 0xF8) == 0xF0) n = 4, cp = lead & 0x07;
    bool ok = n > 0 && i + n <= text.size();
    for (std::size_t k = 1; ok && k < n; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      ok = (c & 0xC0) == 0x80;
      cp = cp << 6 | (c & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either.
    static constexpr std::uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (ok && n > 1) ok = cp >= kMin[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) throw std::invalid_argument(fmt::format("{}: invalid UTF-8 at byte {} (0x{:02X})", what, i, lead));
    i += n;
  }
}

std::vector<KernelSpeed> auto_plan_speeds(const AutoPlanChoice& choice, const KernelPlan& plan,
                                          const ModelWeights& weights, int threads, Backend backend,
                                          AutoPlanEvidence* evidence, int n, double spent_s) {
  if (!choice.bench_csv.empty()) return kernel_speeds(read_bench_csv(choice.bench_csv));
  // A plan that names a kernel it cannot use is refused before a minute of timing.
  (void)resolve_plan(plan, weights, threads, {}, backend);
  AutoPlanOptions options;
  options.threads = threads;
  options.backend = backend;
  options.n = n;
  options.spent_s = spent_s;
  options.measure = !choice.no_tune;
  options.read_gbps_now = choice.rank_all_speeds ? 0 : -1;
  options.screen_min_time_s *= choice.tune_time_s / options.final_min_time_s;
  options.final_min_time_s = choice.tune_time_s;
  options.progress = [](const std::string& line) {
    fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
  };
  AutoPlanEvidence ev = auto_plan_evidence(plan, weights, options);
  std::vector<KernelSpeed> speeds = ev.speeds;
  if (evidence) *evidence = std::move(ev);
  return speeds;
}

}  // namespace qmv
