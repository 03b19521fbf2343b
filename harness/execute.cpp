#include "harness/execute.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include "harness/machine.h"
#include "kernels/availability.h"
#ifdef QMV_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

namespace qmv {

namespace {

MatVecArgs args_for(const HostCall& c) {
  MatVecArgs a;
  a.shape = c.shape;
  a.w = c.w;
  a.w_bytes = c.w_bytes;
  a.x = c.x;
  a.x_bytes = c.x_bytes;
  a.y = c.y;
  a.n = c.n;
  a.y_len = c.y ? static_cast<std::size_t>(c.shape.rows) * static_cast<std::size_t>(std::max(c.n, 1)) : 0;
  if (c.w2) {
    a.w2 = c.w2;
    a.w2_bytes = c.w2_bytes;
    a.y2 = c.y2;
    a.y2_len = c.y2 ? static_cast<std::size_t>(c.shape.rows) : 0;
  }
  a.threads = c.threads;
  return a;
}

#ifdef QMV_HAVE_CUDA

// A 64-bit fingerprint of a host buffer (four interleaved multiply-xor chains, so it
// runs near memory speed; OpenMP over chunks for the big matrices).
std::uint64_t fingerprint(const void* data, std::size_t bytes) {
  constexpr std::size_t kChunk = std::size_t(1) << 22;
  const auto* p = static_cast<const unsigned char*>(data);
  const std::int64_t chunks = static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk);
  std::uint64_t total = bytes * 0x9e3779b97f4a7c15ull;
#pragma omp parallel for schedule(static) reduction(^ : total) if (chunks > 4)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * kChunk, end = std::min(bytes, begin + kChunk);
    std::uint64_t h[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull, 0x082efa98ec4e6c89ull};
    std::size_t i = begin;
    for (; i + 32 <= end; i += 32)
      for (int k = 0; k < 4; ++k) {
        std::uint64_t w;
        std::memcpy(&w, p + i + 8 * k, 8);
        h[k] = (h[k] ^ w) * 0x100000001b3ull + (h[k] >> 29);
      }
    for (; i < end; ++i) h[0] = (h[0] ^ p[i]) * 0x100000001b3ull;
    std::uint64_t chunk_hash = static_cast<std::uint64_t>(c) + 1;
    for (std::uint64_t v : h) chunk_hash = (chunk_hash ^ v) * 0xff51afd7ed558ccdull;
    total ^= chunk_hash ^ (chunk_hash >> 31);
  }
  return total;
}

// Weights uploaded once and reused while the same host bytes come back: the check runs
// every kernel of a weight type on one matrix, with two activation cases each. A host
// pointer and size alone would not do: a freed matrix's address can come back holding
// another matrix of the same size, so the contents' fingerprint is part of the key.
// Two entries: the two matrices of a fused call.
class WeightCache {
 public:
  struct Found {
    const void* device = nullptr;
    std::size_t bytes = 0;
  };

  Status fetch(const void* host, std::size_t bytes, void* stream, const std::string& kernel, Found& out,
               const void* keep = nullptr) {
    const std::uint64_t print = fingerprint(host, bytes);
    ++clock_;
    for (Entry& e : entries_)
      if (e.host == host && e.buffer.size() == bytes && e.print == print && e.buffer.get()) {
        e.last_use = clock_;
        out = {e.buffer.get(), e.buffer.size()};
        return Status::Ok();
      }
    // Replace the entry used longest ago, but never the one this call already holds
    // (`keep` is null for the first matrix of a call, when nothing is held: an entry
    // with no buffer yet is then as free as any other).
    Entry* victim = nullptr;
    for (Entry& e : entries_) {
      if (keep && e.buffer.get() == keep) continue;
      if (!victim || e.last_use < victim->last_use) victim = &e;
    }
    victim->host = nullptr;
    if (auto st = victim->buffer.resize(bytes, kernel + " weights"); !st.ok()) return st;
    if (auto st = cuda::copy_to_device(victim->buffer.get(), host, bytes, stream, kernel + " weights"); !st.ok())
      return st;
    victim->host = host;
    victim->print = print;
    victim->last_use = clock_;
    out = {victim->buffer.get(), victim->buffer.size()};
    return Status::Ok();
  }

 private:
  struct Entry {
    const void* host = nullptr;
    std::uint64_t print = 0;
    std::uint64_t last_use = 0;
    cuda::DeviceBuffer buffer;
  };
  std::array<Entry, 2> entries_;
  std::uint64_t clock_ = 0;
};

// The process's device state for host-buffer calls. Never destroyed: at exit the CUDA
// runtime may be torn down before static destructors would run.
struct DeviceCallState {
  cuda::Stream stream;
  WeightCache weights;
  cuda::DeviceBuffer x, y, y2;
};

// Set once a kernel's fault has made the CUDA context unusable: later calls are
// refused naming that kernel rather than failing under their own names.
std::string& context_lost_after() {
  static std::string* lost = new std::string;
  return *lost;
}

DeviceCallState& device_state() {
  static DeviceCallState* state = new DeviceCallState;
  return *state;
}

Status run_on_device(const KernelSpec& spec, const HostCall& call) {
  if (!context_lost_after().empty())
    return Status::Error(spec.name + ": not run: the CUDA context was lost after " + context_lost_after());
  DeviceCallState& dev = device_state();
  if (!dev.stream.status().ok()) return Status::Error(spec.name + ": " + dev.stream.status().error);
  void* stream = dev.stream.get();
  const bool fused = spec.op == OpKind::FusedUpGate;
  // A batch call's outputs: n vectors of rows floats, back to back.
  const std::size_t rows = static_cast<std::size_t>(call.shape.rows) * static_cast<std::size_t>(call.n);

  WeightCache::Found w, w2;
  if (auto st = dev.weights.fetch(call.w, call.w_bytes, stream, spec.name, w); !st.ok()) return st;
  if (fused)
    if (auto st = dev.weights.fetch(call.w2, call.w2_bytes, stream, spec.name, w2, w.device); !st.ok()) return st;
  if (auto st = dev.x.resize(call.x_bytes, spec.name + " activation"); !st.ok()) return st;
  if (auto st = cuda::copy_to_device(dev.x.get(), call.x, call.x_bytes, stream, spec.name + " activation"); !st.ok())
    return st;
  if (auto st = dev.y.resize(rows * sizeof(float), spec.name + " output"); !st.ok()) return st;
  if (fused)
    if (auto st = dev.y2.resize(rows * sizeof(float), spec.name + " second output"); !st.ok()) return st;
  for (cuda::DeviceBuffer* out : {&dev.y, &dev.y2}) {
    if (out == &dev.y2 && !fused) continue;
    if (const std::string err = cuda::poison_device_floats(static_cast<float*>(out->get()), rows, stream);
        !err.empty())
      return Status::Error(spec.name + ": poisoning the output: " + err);
  }

  // The device buffers' own sizes, so check_args judges what the kernel will touch.
  MatVecArgs a;
  a.shape = call.shape;
  a.w = w.device;
  a.w_bytes = w.bytes;
  a.x = dev.x.get();
  a.x_bytes = dev.x.size();
  a.y = static_cast<float*>(dev.y.get());
  a.y_len = dev.y.size() / sizeof(float);
  if (fused) {
    a.w2 = w2.device;
    a.w2_bytes = w2.bytes;
    a.y2 = static_cast<float*>(dev.y2.get());
    a.y2_len = dev.y2.size() / sizeof(float);
  }
  a.threads = call.threads;
  a.n = call.n;
  a.stream = stream;
  if (auto st = invoke(spec, a); !st.ok()) return st;
  if (auto st = cuda::synchronize(stream, spec.name); !st.ok()) {
    if (!cuda::device_status().ok()) context_lost_after() = spec.name + "'s fault";
    return st;
  }
  if (auto st = cuda::copy_to_host(call.y, dev.y.get(), rows * sizeof(float), stream, spec.name + " output"); !st.ok())
    return st;
  if (fused)
    if (auto st = cuda::copy_to_host(call.y2, dev.y2.get(), rows * sizeof(float), stream, spec.name + " second output");
        !st.ok())
      return st;
  return Status::Ok();
}

#endif  // QMV_HAVE_CUDA

}  // namespace

std::string cuda_context_lost_after() {
#ifdef QMV_HAVE_CUDA
  return context_lost_after();
#else
  return {};
#endif
}

Status run_on_host_buffers(const KernelSpec& spec, const HostCall& call) {
  // The host buffers are checked first, whatever the backend: a bad call is refused
  // before anything is copied or launched.
  MatVecArgs host_args = args_for(call);
  // A kernel with a weight transform gets its prepared matrix, made only once the
  // buffers are known to be good.
  MatVecArgs checked = host_args;
  if (spec.prepare) checked.prepared = &host_args;
  if (auto st = check_args(spec, checked); !st.ok()) return st;
  PreparedMatrix prepared;
  if (spec.prepare) {
    if (auto st = prepared.prepare(spec, host_args); !st.ok()) return st;
    host_args.prepared = prepared.handle();
  }
  if (spec.backend == Backend::CPU) return spec.run(host_args);
  const Availability av = availability(spec);
  if (!av.available) return Status::Error(spec.name + ": " + av.reason);
#ifdef QMV_HAVE_CUDA
  return run_on_device(spec, call);
#else
  return Status::Error(spec.name + ": this build has no CUDA");
#endif
}

}  // namespace qmv
