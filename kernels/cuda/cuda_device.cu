#include "cuda_device.h"

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

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

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

Status error_of(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::Error(what + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

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
  fill_nan<<<blocks, threads, 0, as_stream(stream)>>>(device_ptr, n);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? std::string() : std::string("fill_nan: ") + cudaGetErrorString(err);
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
  if (const cudaError_t err = cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)); err != cudaSuccess)
    return Status::Error(kernel + ": failed on the device while timed: " + cudaGetErrorName(err) + ": " +
                         cudaGetErrorString(err));
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

}  // namespace qmv::cuda
