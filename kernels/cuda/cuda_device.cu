#include "cuda_device.h"

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include "kernels/cuda/cuda_common.cuh"

#include <algorithm>
#include <utility>

namespace qmv::cuda {
namespace {

__global__ void fill_nan(float* out, std::size_t n) {
  const float nan = __int_as_float(0x7fc00000);
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = nan;
}

// Reads n 16-byte words, kInFlight loads in flight per thread, through the same
// read-only, no-L1-allocate path the GEMV kernels stream their weights with. The XOR of
// everything read is compared with `never` (a value the fill pattern cannot give), so
// the loads stay and nothing is written.
template <int kInFlight>
__global__ void __launch_bounds__(256) read_stream(const uint4* __restrict__ p, std::size_t n, unsigned never,
                                                   unsigned* __restrict__ sink) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  unsigned acc = 0;
  const auto load = [](const uint4* q) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(__cvta_generic_to_global(q)));
    return v;
  };
  for (; i + (kInFlight - 1) * stride < n; i += kInFlight * stride) {
    uint4 v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) v[u] = load(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = load(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == never) *sink = acc;
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// A failed call's Status; the runtime's error state is cleared (where the error is not
// sticky), so the next launch's check does not report this failure again as its own.
Status error_of(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status::Error(what + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

// The read loops both read measurements try: loads in flight per thread, blocks of 256
// per SM.
struct ReadStreamLoop {
  int in_flight, blocks_per_sm;
  void (*kernel)(const uint4*, std::size_t, unsigned, unsigned*);
  std::string describe(const char* blocks_bound) const {
    return "16-byte loads, " + std::to_string(in_flight) + " in flight per thread, " + blocks_bound +
           std::to_string(blocks_per_sm) + " blocks of 256 per SM";
  }
};
const ReadStreamLoop kReadStreamLoops[] = {{4, 8, read_stream<4>}, {8, 4, read_stream<8>}, {8, 8, read_stream<8>},
                               {16, 4, read_stream<16>}};

}  // namespace

DeviceInfo query_device(int index) {
  DeviceInfo info;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    info.why_absent = err == cudaSuccess ? "no CUDA device"
                                         : std::string("no CUDA device (") + cudaGetErrorString(err) + ")";
    cudaGetLastError();  // clear the sticky error so later calls are not confused by it
    return info;
  }
  if (index >= count) {
    info.why_absent = "no CUDA device with index " + std::to_string(index);
    return info;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    info.why_absent = "no CUDA device (cudaGetDeviceProperties failed)";
    cudaGetLastError();
    return info;
  }
  info.present = true;
  info.name = prop.name;
  info.sm = prop.major * 10 + prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.memory_bytes = prop.totalGlobalMem;
  // CUDA 13's cudaDeviceProp has no clock fields: the attributes have them all.
  int l2 = 0;
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, index);
  info.l2_bytes = static_cast<std::size_t>(l2);
  cudaDeviceGetAttribute(&info.sm_clock_khz, cudaDevAttrClockRate, index);
  cudaDeviceGetAttribute(&info.memory_clock_khz, cudaDevAttrMemoryClockRate, index);
  cudaDeviceGetAttribute(&info.memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth, index);
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  return info;
}

const DeviceInfo& current_device() {
  static const DeviceInfo info = query_device(0);
  return info;
}

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::string poison_device_floats(float* device_ptr, std::size_t n, void* stream) {
  if (n == 0) return {};
  if (!device_ptr) return "poison_device_floats: null device pointer";
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<std::size_t>((n + threads - 1) / threads, 4096));
  const Status st = launch_checked("fill_nan", [&] { fill_nan<<<blocks, threads, 0, as_stream(stream)>>>(device_ptr, n); });
  return st.ok() ? std::string() : st.error;
}

// ---------------------------------------------------------------------------------
// Memory and copies

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() {
  // At process exit the runtime may be gone before us; its error then is no news.
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

Status DeviceBuffer::resize(std::size_t bytes, const std::string& what) {
  if (bytes == bytes_) return Status::Ok();  // bytes_ > 0 exactly when ptr_ is set
  release();
  if (bytes == 0) return Status::Ok();
  if (const cudaError_t err = cudaMalloc(&ptr_, bytes); err != cudaSuccess) {
    ptr_ = nullptr;
    cudaGetLastError();
    return error_of(err, "cudaMalloc of " + std::to_string(bytes) + " bytes for " + what);
  }
  bytes_ = bytes;
  return Status::Ok();
}

Status copy_to_device(void* device_dst, const void* host_src, std::size_t bytes, void* stream,
                      const std::string& what) {
  return error_of(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, as_stream(stream)),
                  "copy to device of " + what);
}

Status copy_to_host(void* host_dst, const void* device_src, std::size_t bytes, void* stream,
                    const std::string& what) {
  if (auto st = error_of(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)),
                         "copy to host of " + what);
      !st.ok())
    return st;
  return error_of(cudaStreamSynchronize(as_stream(stream)), "copy to host of " + what);
}

Status copy_on_device(void* device_dst, const void* device_src, std::size_t bytes, void* stream,
                      const std::string& what) {
  return error_of(cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream)),
                  "device copy of " + what);
}

Status fill_repeating(void* device_dst, std::size_t bytes, const void* host_pattern, std::size_t pattern_bytes,
                      const std::string& what) {
  if (bytes == 0) return Status::Ok();
  if (!device_dst || !host_pattern || pattern_bytes == 0) return Status::Error("fill of " + what + ": empty pattern");
  auto* dst = static_cast<unsigned char*>(device_dst);
  std::size_t filled = std::min(bytes, pattern_bytes);
  if (auto st = error_of(cudaMemcpy(dst, host_pattern, filled, cudaMemcpyHostToDevice), "fill of " + what); !st.ok())
    return st;
  // Doubling keeps every copy a whole number of patterns, so the contents stay the
  // pattern repeated from byte 0.
  while (filled < bytes) {
    const std::size_t n = std::min(filled, bytes - filled);
    if (auto st = error_of(cudaMemcpy(dst + filled, dst, n, cudaMemcpyDeviceToDevice), "fill of " + what); !st.ok())
      return st;
    filled += n;
  }
  return Status::Ok();
}

std::size_t free_device_memory() {
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free;
}

// ---------------------------------------------------------------------------------
// Streams, synchronization, events, NVTX

Stream::Stream() {
  cudaStream_t s = nullptr;
  status_ = error_of(cudaStreamCreate(&s), "cudaStreamCreate");
  stream_ = s;
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(as_stream(stream_));
}

Status synchronize(void* stream, const std::string& kernel) {
  const cudaError_t err = cudaStreamSynchronize(as_stream(stream));
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status::Error(kernel + ": failed on the device after its launch: " + cudaGetErrorName(err) + ": " +
                       cudaGetErrorString(err));
}

Status device_status() { return error_of(cudaDeviceSynchronize(), "the CUDA context"); }

EventTimer::EventTimer() {
  cudaEvent_t a = nullptr, b = nullptr;
  status_ = error_of(cudaEventCreate(&a), "cudaEventCreate");
  if (status_.ok()) status_ = error_of(cudaEventCreate(&b), "cudaEventCreate");
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

Status EventTimer::start(void* stream) {
  if (!status_.ok()) return status_;
  return error_of(cudaEventRecord(static_cast<cudaEvent_t>(start_), as_stream(stream)), "cudaEventRecord");
}

Status EventTimer::stop(void* stream) {
  if (!status_.ok()) return status_;
  return error_of(cudaEventRecord(static_cast<cudaEvent_t>(stop_), as_stream(stream)), "cudaEventRecord");
}

Status EventTimer::elapsed_ms(double& ms, const std::string& kernel) {
  if (!status_.ok()) return status_;
  if (const cudaError_t err = cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)); err != cudaSuccess) {
    cudaGetLastError();
    return Status::Error(kernel + ": failed on the device while timed: " + cudaGetErrorName(err) + ": " +
                         cudaGetErrorString(err));
  }
  float f = 0;
  if (auto st = error_of(cudaEventElapsedTime(&f, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)),
                         "cudaEventElapsedTime");
      !st.ok())
    return st;
  ms = f;
  return Status::Ok();
}

NvtxRange::NvtxRange(const char* name) { nvtxRangePushA(name); }
NvtxRange::~NvtxRange() { nvtxRangePop(); }

// ---------------------------------------------------------------------------------
// The measured peak

CopyBandwidth measure_copy_bandwidth(std::size_t buffer_bytes, int repetitions) {
  CopyBandwidth out;
  out.buffer_bytes = buffer_bytes;
  const std::string what = "cudaMemcpy device to device";
  DeviceBuffer src, dst;
  Stream stream;
  EventTimer timer;
  // Times `copies` back-to-back copies; milliseconds in `ms`.
  auto timed_copies = [&](int copies, double& ms) {
    Status st = timer.start(stream.get());
    for (int c = 0; st.ok() && c < copies; ++c) st = copy_on_device(dst.get(), src.get(), buffer_bytes, stream.get(), what);
    if (st.ok()) st = timer.stop(stream.get());
    if (st.ok()) st = timer.elapsed_ms(ms, what);
    return st;
  };
  Status st = src.resize(buffer_bytes, "the copy source");
  if (st.ok()) st = dst.resize(buffer_bytes, "the copy destination");
  if (st.ok()) st = error_of(cudaMemset(src.get(), 0x5a, buffer_bytes), "cudaMemset");
  if (st.ok()) st = stream.status();
  // One warm-up copy sizes the repetitions: ~20 ms of copying each, so the event
  // resolution (~0.5 us) and the gaps between copies are noise.
  double ms = 0;
  if (st.ok()) st = timed_copies(1, ms);
  if (st.ok()) out.copies_per_repetition = std::clamp(static_cast<int>(20.0 / std::max(ms, 1e-3)), 1, 1000);
  for (int r = 0; st.ok() && r < repetitions; ++r) {
    st = timed_copies(out.copies_per_repetition, ms);
    const double bytes_moved = 2.0 * static_cast<double>(buffer_bytes) * out.copies_per_repetition;
    if (st.ok()) out.gbps.push_back(bytes_moved / (ms * 1e-3) / 1e9);
  }
  if (!st.ok()) {
    out.error = st.error;
    out.gbps.clear();
  }
  return out;
}

namespace {

// What a read measurement needs: `bytes` of device memory with 0x5a in every byte (the
// XOR of the words read is then 0 or 0x5a5a5a5a, never the 1 read_stream compares
// with), a sink word, a stream and a timer.
struct ReadRig {
  DeviceBuffer buffer, sink;
  Stream stream;
  EventTimer timer;
  Status prepare(std::size_t bytes, const std::string& what) {
    Status st = buffer.resize(bytes, what);
    if (st.ok()) st = sink.resize(sizeof(unsigned), what + "'s sink");
    if (st.ok()) st = error_of(cudaMemset(buffer.get(), 0x5a, bytes), "cudaMemset");
    if (st.ok()) st = stream.status();
    return st;
  }
  const uint4* words() const { return static_cast<const uint4*>(buffer.get()); }
  unsigned* sink_word() const { return static_cast<unsigned*>(sink.get()); }
};

}  // namespace

ReadBandwidth measure_read_bandwidth(std::size_t buffer_bytes, int repetitions) {
  ReadBandwidth out;
  buffer_bytes = buffer_bytes / 16 * 16;
  out.buffer_bytes = buffer_bytes;
  const std::string what = "GPU read peak";
  const DeviceInfo& dev = current_device();
  ReadRig rig;
  Status st = rig.prepare(buffer_bytes, "the read peak's buffer");
  if (!st.ok()) {
    out.error = st.error;
    return out;
  }
  Stream& stream = rig.stream;
  EventTimer& timer = rig.timer;
  const uint4* words = rig.words();
  unsigned* sink_word = rig.sink_word();
  const std::size_t n = buffer_bytes / 16;
  auto timed_passes = [&](const ReadStreamLoop& l, int passes, double& ms) {
    const unsigned blocks = static_cast<unsigned>(std::max(1, dev.sm_count) * l.blocks_per_sm);
    Status s = timer.start(stream.get());
    for (int p = 0; s.ok() && p < passes; ++p) {
      s = launch_checked("read_stream",
                         [&] { l.kernel<<<blocks, 256, 0, as_stream(stream.get())>>>(words, n, 1u, sink_word); });
    }
    if (s.ok()) s = timer.stop(stream.get());
    if (s.ok()) s = timer.elapsed_ms(ms, what);
    return s;
  };
  double best = 0;
  for (const ReadStreamLoop& l : kReadStreamLoops) {
    // A warm-up pass sizes the repetitions: ~20 ms of reading each.
    double ms = 0;
    if (st = timed_passes(l, 1, ms); !st.ok()) break;
    const int passes = std::clamp(static_cast<int>(20.0 / std::max(ms, 1e-3)), 1, 1000);
    std::vector<double> gbps;
    for (int r = 0; st.ok() && r < repetitions; ++r) {
      st = timed_passes(l, passes, ms);
      if (st.ok()) gbps.push_back(static_cast<double>(buffer_bytes) * passes / (ms * 1e-3) / 1e9);
    }
    if (!st.ok()) break;
    const double loop_best = *std::max_element(gbps.begin(), gbps.end());
    if (loop_best > best) {
      best = loop_best;
      out.gbps = gbps;
      out.loop = l.describe("");
    }
  }
  if (!st.ok()) {
    out.error = st.error;
    out.gbps.clear();
    out.loop.clear();
  }
  return out;
}

// ---------------------------------------------------------------------------------
// Graphs

CapturedLaunches::~CapturedLaunches() { release(); }

void CapturedLaunches::release() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  exec_ = graph_ = nullptr;
}

Status CapturedLaunches::capture(void* stream, const std::function<Status()>& record, const std::string& what) {
  release();
  what_ = what;
  if (auto st = error_of(cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeThreadLocal),
                         "starting to capture " + what);
      !st.ok())
    return st;
  const Status recorded = record();
  cudaGraph_t graph = nullptr;
  // The capture ends whether or not the recording worked, so the stream is usable again.
  const Status ended = error_of(cudaStreamEndCapture(as_stream(stream), &graph), "capturing " + what);
  graph_ = graph;
  if (!recorded.ok()) return Status::Error("capturing " + what + ": " + recorded.error);
  if (!ended.ok()) return ended;
  cudaGraphExec_t exec = nullptr;
  if (auto st = error_of(cudaGraphInstantiate(&exec, graph, 0), "instantiating the graph of " + what); !st.ok())
    return st;
  exec_ = exec;
  return Status::Ok();
}

Status CapturedLaunches::replay(void* stream) {
  if (!exec_) return Status::Error("replaying " + (what_.empty() ? std::string("a graph") : what_) + ": nothing captured");
  return error_of(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), as_stream(stream)), "replaying " + what_);
}

WindowReadBandwidth measure_window_read_bandwidth(std::size_t window_bytes, std::size_t arena_bytes, bool graph,
                                                  int repetitions) {
  WindowReadBandwidth out;
  window_bytes = window_bytes / 16 * 16;
  out.graph = graph;
  out.window_bytes = window_bytes;
  if (window_bytes == 0) {
    out.error = "a window of under 16 bytes";
    return out;
  }
  const std::size_t windows = std::max<std::size_t>(2, arena_bytes / window_bytes);
  out.arena_bytes = windows * window_bytes;
  const std::string what = "GPU window read";
  const DeviceInfo& dev = current_device();
  ReadRig rig;
  Status st = rig.prepare(out.arena_bytes, "the window read's arena");
  if (!st.ok()) {
    out.error = st.error;
    return out;
  }
  Stream& stream = rig.stream;
  EventTimer& timer = rig.timer;
  const uint4* base = rig.words();
  unsigned* sink_word = rig.sink_word();
  const std::size_t n = window_bytes / 16;
  // One lap: a launch per window of the arena, in order.
  auto lap = [&](const ReadStreamLoop& l) {
    // No more blocks than the window has 16-byte words for (a small window is read by
    // fewer SMs, as a small matrix is).
    const std::size_t words_per_block = std::size_t(256) * l.in_flight;
    const unsigned blocks = static_cast<unsigned>(std::max<std::size_t>(
        1, std::min<std::size_t>(std::size_t(std::max(1, dev.sm_count)) * l.blocks_per_sm,
                                 (n + words_per_block - 1) / words_per_block)));
    Status s;
    for (std::size_t w = 0; s.ok() && w < windows; ++w) {
      const uint4* p = base + w * n;
      s = launch_checked("read_stream",
                         [&] { l.kernel<<<blocks, 256, 0, as_stream(stream.get())>>>(p, n, 1u, sink_word); });
    }
    return s;
  };
  double best_median = 0;
  for (const ReadStreamLoop& l : kReadStreamLoops) {
    CapturedLaunches captured;
    if (graph && (st = captured.capture(stream.get(), [&] { return lap(l); }, what), !st.ok())) break;
    auto timed_laps = [&](int laps, double& ms) {
      Status s = timer.start(stream.get());
      for (int i = 0; s.ok() && i < laps; ++i) s = graph ? captured.replay(stream.get()) : lap(l);
      if (s.ok()) s = timer.stop(stream.get());
      if (s.ok()) s = timer.elapsed_ms(ms, what);
      return s;
    };
    // A warm-up lap sizes the repetitions: ~20 ms of reading each.
    double ms = 0;
    if (st = timed_laps(1, ms); !st.ok()) break;
    const int laps = std::clamp(static_cast<int>(20.0 / std::max(ms, 1e-3)), 1, 1000);
    std::vector<double> gbps;
    for (int r = 0; st.ok() && r < repetitions; ++r) {
      st = timed_laps(laps, ms);
      if (st.ok()) gbps.push_back(static_cast<double>(out.arena_bytes) * laps / (ms * 1e-3) / 1e9);
    }
    if (!st.ok()) break;
    std::vector<double> sorted = gbps;
    std::sort(sorted.begin(), sorted.end());
    if (sorted[sorted.size() / 2] > best_median) {
      best_median = sorted[sorted.size() / 2];
      out.gbps = gbps;
      out.launches_per_repetition = static_cast<int>(windows) * laps;
      out.loop = l.describe("up to ");
    }
  }
  if (!st.ok()) {
    out.error = st.error;
    out.gbps.clear();
    out.loop.clear();
  }
  return out;
}

}  // namespace qmv::cuda
