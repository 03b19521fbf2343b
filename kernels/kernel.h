// The plugin interface: a kernel variant describes itself in one KernelSpec and
// registers it with QMV_REGISTER_KERNEL, once, in its own source file. The check,
// the benchmarks and the model runner find it through the registry.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/formats.h"

namespace qmv {

enum class Backend { CPU, CUDA };
// MatVec: y = W x. FusedUpGate: y = W x and y2 = W2 x from one read of x (FFN up+gate).
// MatVecBatch: Y = W X for n activation vectors at once (MatVecArgs::n, 1..max_n of the
// kernel), the weights read once for all of them: x holds the n prepared vectors back
// to back, y the n output vectors back to back.
enum class OpKind { MatVec, FusedUpGate, MatVecBatch };

std::string_view to_string(Backend b);
std::string_view to_string(OpKind k);

// Written rows x cols: output length x input length.
struct Shape {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  friend bool operator==(const Shape&, const Shape&) = default;
};
std::string to_string(Shape s);

// CPU features a variant may need; detected at run time (libcpuinfo).
enum class CpuFeature : std::uint32_t {
  AVX2 = 1u << 0,
  FMA = 1u << 1,
  F16C = 1u << 2,
  AVX512F = 1u << 3,
  AVX512BW = 1u << 4,
  AVX512VL = 1u << 5,
  AVX512VNNI = 1u << 6,
};
constexpr std::uint32_t operator|(CpuFeature a, CpuFeature b) {
  return static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b);
}
constexpr std::uint32_t operator|(std::uint32_t a, CpuFeature b) {
  return a | static_cast<std::uint32_t>(b);
}

// Outcome of a kernel call: empty message means success.
struct Status {
  std::string error;
  bool ok() const { return error.empty(); }
  static Status Ok() { return {}; }
  static Status Error(std::string msg) { return {std::move(msg)}; }
};

// One call. Pointers are host pointers for CPU kernels, device pointers for CUDA
// kernels. Weights are row-major blocks (row_bytes(weight, cols) bytes per row); the
// activation is already prepared in the kernel's activation format.
struct MatVecArgs {
  Shape shape;
  const void* w = nullptr;
  std::size_t w_bytes = 0;
  const void* x = nullptr;
  std::size_t x_bytes = 0;
  float* y = nullptr;
  std::size_t y_len = 0;  // in floats
  // OpKind::MatVecBatch: the number of activation vectors in x and of output vectors in
  // y, each of its single-vector size (x_bytes >= n * row_bytes(act, cols), y_len >=
  // n * rows); vector j's output is y[j * rows .. (j + 1) * rows). 1 for the other ops.
  int n = 1;
  // Second matrix and output of a fused pair (OpKind::FusedUpGate), same shape.
  const void* w2 = nullptr;
  std::size_t w2_bytes = 0;
  float* y2 = nullptr;
  std::size_t y2_len = 0;
  int threads = 1;          // CPU: OpenMP threads for this call
  void* stream = nullptr;   // CUDA: cudaStream_t to launch on
  // CUDA, sm_90: the kernel may launch as a programmatic dependent of the kernel before
  // it on the stream and start streaming its weights while that one finishes; it waits
  // for that kernel before it reads x or writes y. Kernels without such a prologue
  // ignore the flag.
  bool overlap_previous = false;
  // Kernels with a weight transform (KernelSpec::prepare): their own copy of w.
  const void* prepared = nullptr;
};

// Weights a kernel keeps in a layout of its own (a repacked, row-interleaved copy),
// made once per matrix by KernelSpec::prepare and freed by KernelSpec::release.
// Opaque to all but the kernel; bytes is the memory it holds.
struct PreparedWeights {
  void* handle = nullptr;
  std::size_t bytes = 0;
};

// A model's matvec (or fused pair): outputs of shape.rows floats each.
inline MatVecArgs matvec_args(Shape s, const void* w, std::size_t w_bytes, const void* x, std::size_t x_bytes, float* y,
                              const void* w2 = nullptr, std::size_t w2_bytes = 0, float* y2 = nullptr) {
  MatVecArgs a;
  a.shape = s;
  a.w = w;
  a.w_bytes = w_bytes;
  a.x = x;
  a.x_bytes = x_bytes;
  a.y = y;
  a.y_len = static_cast<std::size_t>(s.rows);
  a.w2 = w2;
  a.w2_bytes = w2_bytes;
  a.y2 = y2;
  a.y2_len = y2 ? a.y_len : 0;
  return a;
}

struct KernelSpec {
  // weights.backend.technique[_activation] (kernels/README.md), e.g.
  // "q4_K.cpu.avx2_x4_q8k", "q4_K.cuda.warpx3_f32"; the activation is left out only
  // for float weights, whose activations are always f32.
  std::string name;
  OpKind op = OpKind::MatVec;
  WeightType weight = WeightType::Q4_K;
  ActFormat act = ActFormat::F32;
  Backend backend = Backend::CPU;
  std::uint32_t cpu_features = 0;  // CpuFeature bits that must all be present
  int min_sm = 0;                  // CUDA: minimum compute capability x10 (e.g. 61)
  std::string shape_rule;          // human-readable form of supports(), e.g. "cols % 256 == 0"
  bool (*supports)(Shape) = nullptr;
  Status (*run)(const MatVecArgs&) = nullptr;
  // Bytes that must move per call; nullptr means weights + activation + output.
  std::size_t (*bytes_moved)(Shape) = nullptr;
  // OpKind::MatVecBatch: the kernel takes every n in 1..max_n vectors per call; 1 for
  // the other ops.
  int max_n = 1;
  std::string description;  // one line, shown by `qmvlab list`
  // Optional weight transform, done once per matrix and never inside a timed call:
  // prepare() makes the kernel's own copy of args.w (args.shape; a fused kernel's
  // covers args.w2 too), release() frees it, and run() finds it in
  // MatVecArgs::prepared. CPU kernels only.
  Status (*prepare)(const MatVecArgs&, PreparedWeights*) = nullptr;
  void (*release)(PreparedWeights) = nullptr;
  // A kernel that takes f32 activations and converts them itself inside the call (as
  // ggml's do): the format it converts to, and that conversion followed by its inverse,
  // so the check compares with the product the kernel computes and bench rows say the
  // conversion is in the timed call.
  std::string act_converted_to;
  void (*act_round_trip)(const float* x, float* seen, std::int64_t n) = nullptr;
  // Another project's kernel, measured beside qmvlab's (e.g. "ggml"); empty for ours.
  std::string peer;
  // CPU: the kernel writes its outputs only from kernels/cpu_tiling.h's parallel loops,
  // so every thread of a call team (set_in_call_team) can run it and take its share
  // of the rows (the CPU forward's call groups run the matvecs that read one vector in
  // one parallel region so). Off for a peer's kernels, which run on threads of their
  // own.
  bool joins_call_teams = false;
  // The file that registered it, relative to the source tree ("kernels/cpu/...cpp"):
  // what its build is named by (kernels/build_id.h).
  std::string source;
};

// Owns the prepared weights of one matrix for one kernel (nothing for kernels without
// a weight transform) and frees them with the kernel's release().
class PreparedMatrix {
 public:
  PreparedMatrix() = default;
  PreparedMatrix(const PreparedMatrix&) = delete;
  PreparedMatrix& operator=(const PreparedMatrix&) = delete;
  PreparedMatrix(PreparedMatrix&& other) noexcept;
  PreparedMatrix& operator=(PreparedMatrix&& other) noexcept;
  ~PreparedMatrix();
  // spec.prepare on args.w (and args.w2 for a fused kernel); a no-op returning Ok
  // for kernels without one.
  Status prepare(const KernelSpec& spec, const MatVecArgs& args);
  const void* handle() const { return weights_.handle; }
  std::size_t bytes() const { return weights_.bytes; }

 private:
  void reset();
  PreparedWeights weights_;
  void (*release_)(PreparedWeights) = nullptr;
};

// Weights + prepared activation + output(s) of one call of `spec` on `s` with n
// activation vectors (a batch kernel reads the weights once, the activations and
// outputs n times; n is 1 for the other ops).
std::size_t bytes_moved(const KernelSpec& spec, Shape s, int n = 1);
// Multiply-adds counted as two flops, per output matrix and activation vector.
double flops(const KernelSpec& spec, Shape s, int n = 1);
// Validates the buffers in `a` against spec and shape (null pointers, sizes, rows,
// cols, supports(), the second matrix of a fused op, a batch's n against max_n).
Status check_args(const KernelSpec& spec, const MatVecArgs& a);
// The one way to call a kernel: check_args, then spec.run. Kernels may therefore
// assume their arguments are valid and keep their inner loops free of checks.
Status invoke(const KernelSpec& spec, const MatVecArgs& a);

// Shape rules shared by the kernels of a family, with their human-readable form.
// K-quants: whole super-blocks.
bool supports_superblock_cols(Shape s);
inline constexpr const char* kSuperBlockColsRule = "rows >= 1, cols % 256 == 0";
// Legacy quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): whole blocks of 32.
bool supports_block32_cols(Shape s);
inline constexpr const char* kBlock32ColsRule = "rows >= 1, cols % 32 == 0";
// Float weights (F16, BF16, F32): any length; SIMD kernels handle the tail.
bool supports_any_cols(Shape s);
inline constexpr const char* kAnyColsRule = "rows >= 1, cols >= 1";

// What a variant file registers: plain data. Files compiled with ISA flags
// (-mavx512f...) must not instantiate library code such as std::string or
// std::vector: the linker keeps one copy of each such inline function for the whole
// program, and if it keeps the AVX-512 one, the harness itself stops running on CPUs
// without AVX-512. The registry turns a record into a KernelSpec in a plain
// translation unit; tests/CMakeLists.txt checks the ISA objects define no such copies.
struct KernelRecord {
  const char* name = nullptr;
  OpKind op = OpKind::MatVec;
  WeightType weight = WeightType::Q4_K;
  ActFormat act = ActFormat::F32;
  Backend backend = Backend::CPU;
  std::uint32_t cpu_features = 0;
  int min_sm = 0;
  const char* shape_rule = nullptr;
  bool (*supports)(Shape) = nullptr;
  Status (*run)(const MatVecArgs&) = nullptr;
  std::size_t (*bytes_moved)(Shape) = nullptr;
  int max_n = 1;
  const char* description = nullptr;
  Status (*prepare)(const MatVecArgs&, PreparedWeights*) = nullptr;
  void (*release)(PreparedWeights) = nullptr;
  const char* act_converted_to = nullptr;
  void (*act_round_trip)(const float* x, float* seen, std::int64_t n) = nullptr;
  const char* peer = nullptr;
  bool joins_call_teams = false;
};

// The usual record of a CPU matvec: op MatVec, backend CPU, and the shape rule of
// its weight type's family (whole blocks of the type; any cols for float weights).
constexpr KernelRecord cpu_matvec_kernel(const char* name, WeightType weight, ActFormat act,
                                         Status (*run)(const MatVecArgs&), const char* description,
                                         std::uint32_t cpu_features = 0) {
  KernelRecord r;
  r.name = name;
  r.weight = weight;
  r.act = act;
  r.cpu_features = cpu_features;
  switch (weight) {
    case WeightType::Q4_K:
    case WeightType::Q5_K:
    case WeightType::Q6_K:
      r.shape_rule = kSuperBlockColsRule;
      r.supports = supports_superblock_cols;
      break;
    case WeightType::Q4_0:
    case WeightType::Q4_1:
    case WeightType::Q5_0:
    case WeightType::Q5_1:
    case WeightType::Q8_0:
      r.shape_rule = kBlock32ColsRule;
      r.supports = supports_block32_cols;
      break;
    case WeightType::F16:
    case WeightType::BF16:
    case WeightType::F32:
      r.shape_rule = kAnyColsRule;
      r.supports = supports_any_cols;
      break;
  }
  r.run = run;
  r.description = description;
  r.joins_call_teams = true;
  return r;
}

// The usual record of a CPU batch matvec (OpKind::MatVecBatch): as cpu_matvec_kernel,
// taking every n in 1..max_n activation vectors per call.
constexpr KernelRecord cpu_batch_kernel(const char* name, WeightType weight, ActFormat act,
                                        Status (*run)(const MatVecArgs&), int max_n, const char* description,
                                        std::uint32_t cpu_features = 0) {
  KernelRecord r = cpu_matvec_kernel(name, weight, act, run, description, cpu_features);
  r.op = OpKind::MatVecBatch;
  r.max_n = max_n;
  return r;
}

// The usual record of a CUDA matvec: as cpu_matvec_kernel, for the GPU. K-quants only
// (the GPU family), with the minimum compute capability (x10) the variant needs.
constexpr KernelRecord cuda_matvec_kernel(const char* name, WeightType weight, ActFormat act,
                                          Status (*run)(const MatVecArgs&), const char* description,
                                          int min_sm = 0) {
  KernelRecord r = cpu_matvec_kernel(name, weight, act, run, description);
  r.backend = Backend::CUDA;
  r.min_sm = min_sm;
  return r;
}

// Adds a kernel to the process-wide registry during static initialisation. Returns
// true; problems (a duplicate name, a record missing run/supports) are kept and
// reported by registry_startup_errors() so main() can refuse to start. `source_file`
// is the registering file's __FILE__.
bool register_kernel(const KernelRecord& record, const char* source_file);

}  // namespace qmv

#define QMV_CONCAT_INNER(a, b) a##b
#define QMV_CONCAT(a, b) QMV_CONCAT_INNER(a, b)
// Use once per variant file, at namespace scope, with a KernelRecord:
// QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel("q4_K.cpu.x", ...));
#define QMV_REGISTER_KERNEL(spec_expr)                                       \
  [[maybe_unused]] static const bool QMV_CONCAT(qmv_kernel_registered_, __LINE__) = \
      ::qmv::register_kernel(spec_expr, __FILE__)
