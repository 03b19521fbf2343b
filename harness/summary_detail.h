// What the data half (summary.cpp) and the rendering half (summary_render.cpp) of the
// results summary share: the file names of a results folder and the small number and
// text helpers both use. Internal to the summary; harness/summary.h is its interface.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace qmv::summary_detail {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The files of a results folder the summary reads: the full main job's sweep, else the
// quick main job's (scripts/main.sh).
inline constexpr const char* kPeak = "peak.csv";
inline constexpr const char* kSweep = "default.csv";
inline constexpr const char* kQuickSweep = "quick.csv";
inline constexpr const char* kCheck = "check.csv";
inline constexpr const char* kPeerDecode = "decode-vs-llamacpp.csv";
inline constexpr const char* kDecode = "decode.csv";

inline bool usable(double v) { return std::isfinite(v) && v > 0; }

inline double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline std::string shape_text(std::int64_t rows, std::int64_t cols) { return fmt::format("{}x{}", rows, cols); }

inline std::string tok_s(double v) { return std::isfinite(v) && v > 0 ? fmt::format("{:.1f}", v) : "not measured"; }

inline std::string plural(long n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace qmv::summary_detail
