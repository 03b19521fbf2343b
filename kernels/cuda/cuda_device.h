// What the harness needs from the CUDA runtime, behind a plain C++ header so host code
// compiled by g++ (the check, the bench, the peak) can use it: the device's
// description, device memory, copies, streams, event timing, NVTX ranges and the
// device-to-device copy that is the GPU's measured bandwidth peak. Every call that can
// fail returns a Status (or a message) that says what failed; none throws.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace qmv::cuda {

struct DeviceInfo {
  bool present = false;
  std::string why_absent;  // set when !present; starts with "no CUDA device"
  std::string name;
  int sm = 0;  // compute capability x10, e.g. 90
  int sm_count = 0;
  std::size_t memory_bytes = 0;
  std::size_t l2_bytes = 0;
  int driver_version = 0;   // as cudaDriverGetVersion: 13000 = 13.0
  int runtime_version = 0;  // as cudaRuntimeGetVersion
  int sm_clock_khz = 0;      // the SM's peak clock (cudaDevAttrClockRate)
  int memory_clock_khz = 0;  // the memory's peak clock (cudaDevAttrMemoryClockRate)
  int memory_bus_bits = 0;

  // The datasheet bandwidth: two transfers per memory clock over the whole bus, GB/s.
  double datasheet_gbps() const { return 2.0 * memory_clock_khz * 1e3 * (memory_bus_bits / 8.0) / 1e9; }
};

DeviceInfo query_device(int index = 0);
// Device 0, queried once per process.
const DeviceInfo& current_device();

// "13.0" from cudaDriverGetVersion's 13000.
std::string version_text(int cuda_version);

// Fills n floats of device memory with NaN, on `stream` (a cudaStream_t; nullptr: the
// default stream). Outputs are poisoned before a kernel runs, so an element the kernel
// forgets to write fails the check. Returns an empty string or the CUDA error.
std::string poison_device_floats(float* device_ptr, std::size_t n, void* stream = nullptr);

// Device memory of an exact size, freed with its owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  // Makes the buffer exactly `bytes` long (reallocating only when the size changes;
  // contents are then undefined). `what` names the buffer in the error.
  Status resize(std::size_t bytes, const std::string& what);
  void release();
  void* get() const { return ptr_; }
  std::size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Copies on `stream` (host memory may be pageable: host-to-device returns once the
// source may be reused, device-to-host once the data has arrived). `what` names the
// copy in the error.
Status copy_to_device(void* device_dst, const void* host_src, std::size_t bytes, void* stream,
                      const std::string& what);
Status copy_to_host(void* host_dst, const void* device_src, std::size_t bytes, void* stream,
                    const std::string& what);
Status copy_on_device(void* device_dst, const void* device_src, std::size_t bytes, void* stream,
                      const std::string& what);
// Fills `bytes` of device memory with back-to-back copies of a host pattern (the
// last one cut short): one upload, then device copies doubling the filled part.
Status fill_repeating(void* device_dst, std::size_t bytes, const void* host_pattern, std::size_t pattern_bytes,
                      const std::string& what);

// A CUDA stream that orders with the legacy default stream, so a kernel that launched
// on the default stream by mistake is still waited for.
class Stream {
 public:
  Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  void* get() const { return stream_; }
  const Status& status() const { return status_; }  // why creating it failed

 private:
  void* stream_ = nullptr;
  Status status_;
};

// Waits for everything queued on `stream`. An error here is an asynchronous fault of
// work launched before it: the message names `kernel` as the culprit.
Status synchronize(void* stream, const std::string& kernel);

// Whether the CUDA context still works (waits for the device). A fault in a kernel
// (an illegal address, say) sticks: every later call fails with it, under whatever
// name. A bad launch configuration does not linger.
Status device_status();

// CUDA events around a stretch of work on one stream: the device's own clock, so the
// host's launch overhead only counts where it leaves the GPU idle.
class EventTimer {
 public:
  EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  ~EventTimer();
  Status start(void* stream);
  Status stop(void* stream);
  // Waits for the stop event; milliseconds between the two. A fault of the work in
  // between is reported naming `kernel`.
  Status elapsed_ms(double& ms, const std::string& kernel);

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
  Status status_;
};

// An NVTX range for Nsight Systems / Compute to filter on, open for the object's life.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
  ~NvtxRange();
};

// The measured bandwidth peak: cudaMemcpy device to device of `buffer_bytes` (several
// copies per repetition, timed by events), counting the bytes read and the bytes
// written. `gbps` holds one figure per repetition; `error` is set when it could not run.
struct CopyBandwidth {
  std::size_t buffer_bytes = 0;
  int copies_per_repetition = 0;
  std::vector<double> gbps;
  std::string error;
};
CopyBandwidth measure_copy_bandwidth(std::size_t buffer_bytes, int repetitions);

// The read-only peak: a streaming read of `buffer_bytes` with no writes, the traffic of
// a GEMV (which reads its weights once and writes almost nothing). A small family of
// read loops (16-byte loads, 4 to 16 of them in flight per thread, 2 to 8 blocks per
// SM) each runs `repetitions` times; `gbps` holds the winning loop's figures and
// `loop` names it. Bytes read only.
struct ReadBandwidth {
  std::size_t buffer_bytes = 0;
  std::string loop;
  std::vector<double> gbps;
  std::string error;
};
ReadBandwidth measure_read_bandwidth(std::size_t buffer_bytes, int repetitions);

// The read peak's loops on a stand-alone read the size of one matrix: back-to-back
// launches, each reading `window_bytes`, each the window after the previous launch's in
// an arena of `arena_bytes` (several times the L2, so every read is cold), launched on
// a stream or replayed from a CUDA graph. A kernel that reads a matrix of that size once
// per launch can do no better than this: the launch gap, the ramp to full bandwidth and
// the last wave's tail are in it. `gbps` holds the winning loop's figures (bytes read
// per second, one per repetition).
struct WindowReadBandwidth {
  std::size_t window_bytes = 0, arena_bytes = 0;
  bool graph = false;
  int launches_per_repetition = 0;
  std::string loop;
  std::vector<double> gbps;
  std::string error;
};
WindowReadBandwidth measure_window_read_bandwidth(std::size_t window_bytes, std::size_t arena_bytes, bool graph,
                                                  int repetitions);

// Launches recorded once from a stream into a CUDA graph, then replayed: kernels back
// to back without the host's launch cost between them, as the GPU decode runs them.
class CapturedLaunches {
 public:
  CapturedLaunches() = default;
  CapturedLaunches(const CapturedLaunches&) = delete;
  CapturedLaunches& operator=(const CapturedLaunches&) = delete;
  ~CapturedLaunches();
  // Records what `record` launches on `stream` (it may only launch: no copies to the
  // host, no synchronization); replaces an earlier recording. `what` names it in errors.
  Status capture(void* stream, const std::function<Status()>& record, const std::string& what);
  // Queues one replay of the recording on `stream`.
  Status replay(void* stream);

 private:
  void release();
  void* graph_ = nullptr;
  void* exec_ = nullptr;
  std::string what_;
};

// Free device memory now (0 when it cannot be read).
std::size_t free_device_memory();

}  // namespace qmv::cuda
