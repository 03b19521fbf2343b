// `qmvlab peak`, and the peak measurement `qmvlab bench` starts with.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "harness/csv.h"
#include "harness/peak.h"

namespace qmv {

// CPU read peaks per thread count (printed, best GB/s returned per thread count);
// with `gpu`, also the GPU's copy and streaming-read peaks where there is a device.
// With `out` (and `ctx`), one CSV row per measurement. When the GPU was asked for and
// could not be measured, `gpu_not_measured` (if given) gets the reason. With
// `read_loop`, the CPU peak is that read loop's alone (measure_read_bandwidth); with
// `all_loops`, every loop's speed is printed. `finalist_loops`, if given, gets the CPU
// read loops timed beyond the screening per thread count, best first.
// `buffer_bytes`: the CPU buffer read (0: cold_buffer_bytes()). `results`, if given,
// gets each thread count's whole CPU measurement.
std::map<int, double> measure_peaks(const std::vector<int>& threads, int reps, const RunContext* ctx,
                                    const std::string& out, bool append, bool gpu = false,
                                    std::string* gpu_not_measured = nullptr, const std::string& read_loop = {},
                                    bool all_loops = false, std::map<int, std::vector<std::string>>* finalist_loops = nullptr,
                                    std::size_t buffer_bytes = 0, std::map<int, PeakResult>* results = nullptr);

}  // namespace qmv
