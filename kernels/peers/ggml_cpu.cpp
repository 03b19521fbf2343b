// The peer: ggml's own CPU matvecs, registered as kernels so that check and bench
// measure them exactly as they measure qmvlab's (same buffers, same cold rotation,
// same thread counts, interleaved in the same run).
//
// <type>.ggml.cpu: a one-node MUL_MAT graph (n = 1) over qmvlab's weight buffer,
// computed by ggml's CPU backend with args.threads threads. ggml takes the f32
// activation and converts it to its dot format (Q8_K, Q8_0, Q8_1, F16, BF16) inside
// the call, so that conversion is in the timed call; the spec says so
// (act_converted_to), and the check compares with the product of the converted vector.
//
// <type>.ggml.cpu_repack: the same graph with the weights in ggml's repacking buffer
// type (row-interleaved blocks), for the types ggml repacks on this CPU. The repack is
// the kernel's weight transform (prepare), done once per matrix outside any timed call.
//
// <type>.ggml.cpu_batch, <type>.ggml.cpu_repack_batch: the same graphs with an
// activation of 1 to 8 columns (OpKind::MatVecBatch), ggml's own path for a small batch
// (its mul_mat over several columns; on repacked weights its GEMM tiles of 4 columns
// and the matvec for the rest).
//
// The block layouts are the GGUF ones on both sides, so the weight buffer is handed to
// ggml as it is; a mismatch in block size is caught when the kernels register.
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "kernels/weight_memory.h"

namespace qmv {
namespace {

ggml_type ggml_type_of(WeightType w) {
  switch (w) {
    case WeightType::Q4_0: return GGML_TYPE_Q4_0;
    case WeightType::Q4_1: return GGML_TYPE_Q4_1;
    case WeightType::Q5_0: return GGML_TYPE_Q5_0;
    case WeightType::Q5_1: return GGML_TYPE_Q5_1;
    case WeightType::Q8_0: return GGML_TYPE_Q8_0;
    case WeightType::Q4_K: return GGML_TYPE_Q4_K;
    case WeightType::Q5_K: return GGML_TYPE_Q5_K;
    case WeightType::Q6_K: return GGML_TYPE_Q6_K;
    case WeightType::F16: return GGML_TYPE_F16;
    case WeightType::BF16: return GGML_TYPE_BF16;
    case WeightType::F32: return GGML_TYPE_F32;
  }
  return GGML_TYPE_COUNT;
}

// ggml logs its buffer allocations and repacks at info level; only its warnings and
// errors matter here.
void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

void init_ggml() {
  static std::once_flag once;
  std::call_once(once, [] {
    ggml_log_set(quiet_log, nullptr);
    ggml_cpu_init();
  });
}

// ggml's repacking buffer type, found through the CPU backend's registry as llama.cpp
// finds it; null when this ggml build has none.
ggml_backend_buffer_type_t repack_buffer_type() {
  static ggml_backend_buffer_type_t found = [] {
    init_ggml();
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    auto extra_bufts = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"));
    if (!extra_bufts) return ggml_backend_buffer_type_t{};
    for (ggml_backend_buffer_type_t* b = extra_bufts(ggml_backend_reg_dev_get(reg, 0)); b && *b; ++b)
      if (std::strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
    return ggml_backend_buffer_type_t{};
  }();
  return found;
}

// A repacked matrix: the tensor (in its own small context) and the buffer holding it.
struct RepackedMatrix {
  ggml_context* ctx = nullptr;
  ggml_backend_buffer_t buffer = nullptr;
  ggml_tensor* tensor = nullptr;
};

void free_repacked(RepackedMatrix* m) {
  if (!m) return;
  if (m->buffer) ggml_backend_buffer_free(m->buffer);
  if (m->ctx) ggml_free(m->ctx);
  delete m;
}

// Context memory for one call's graph: three tensors and a four-node graph. ggml
// places its objects in the buffer given, so a call allocates nothing but the work
// buffer, which is kept per thread and grows to the largest call.
struct CallMemory {
  std::vector<unsigned char> objects;
  std::vector<unsigned char> work;
  CallMemory() : objects(4 * ggml_tensor_overhead() + ggml_graph_overhead_custom(4, false) + 256) {}
};

Status mul_mat(WeightType weight, const MatVecArgs& a, const RepackedMatrix* repacked) {
  init_ggml();
  thread_local CallMemory mem;
  ggml_init_params params{mem.objects.size(), mem.objects.data(), /*no_alloc=*/true};
  ggml_context* ctx = ggml_init(params);
  if (!ctx) return Status::Error("ggml_init failed");
  ggml_tensor* w = repacked ? repacked->tensor : ggml_new_tensor_2d(ctx, ggml_type_of(weight), a.shape.cols, a.shape.rows);
  if (!repacked) w->data = const_cast<void*>(a.w);
  // n columns of cols floats, back to back: ggml's row-major 2-d tensor of n rows.
  ggml_tensor* x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, a.shape.cols, a.n);
  x->data = const_cast<void*>(a.x);
  ggml_tensor* y = ggml_mul_mat(ctx, w, x);
  y->data = a.y;
  ggml_cgraph* graph = ggml_new_graph_custom(ctx, 4, false);
  ggml_build_forward_expand(graph, y);
  ggml_cplan plan = ggml_graph_plan(graph, a.threads, nullptr);
  if (mem.work.size() < plan.work_size) mem.work.resize(plan.work_size);
  plan.work_data = mem.work.data();
  const ggml_status st = ggml_graph_compute(graph, &plan);
  ggml_free(ctx);
  if (st != GGML_STATUS_SUCCESS) return Status::Error(std::string("ggml_graph_compute: ") + ggml_status_to_string(st));
  return Status::Ok();
}

template <WeightType W>
Status run_plain(const MatVecArgs& a) {
  return mul_mat(W, a, nullptr);
}

template <WeightType W>
Status run_repacked(const MatVecArgs& a) {
  return mul_mat(W, a, static_cast<const RepackedMatrix*>(a.prepared));
}

template <WeightType W>
Status prepare_repacked(const MatVecArgs& a, PreparedWeights* out) {
  ggml_backend_buffer_type_t buft = repack_buffer_type();
  if (!buft) return Status::Error("this ggml build has no CPU_REPACK buffer type");
  auto* m = new (std::nothrow) RepackedMatrix;
  if (!m) return Status::Error("out of memory");
  ggml_init_params params{2 * ggml_tensor_overhead(), nullptr, /*no_alloc=*/true};
  m->ctx = ggml_init(params);
  if (!m->ctx) {
    free_repacked(m);
    return Status::Error("ggml_init failed");
  }
  m->tensor = ggml_new_tensor_2d(m->ctx, ggml_type_of(W), a.shape.cols, a.shape.rows);
  const std::size_t bytes = ggml_backend_buft_get_alloc_size(buft, m->tensor);
  m->buffer = ggml_backend_buft_alloc_buffer(buft, bytes);
  if (!m->buffer) {
    free_repacked(m);
    return Status::Error("cannot allocate the repacked weights");
  }
  if (ggml_backend_tensor_alloc(m->buffer, m->tensor, ggml_backend_buffer_get_base(m->buffer)) !=
          GGML_STATUS_SUCCESS ||
      !m->tensor->extra) {
    // No repacked layout for this type and shape on this CPU: ggml would quietly fall
    // back to its plain kernel, which is not what this kernel claims to measure.
    free_repacked(m);
    return Status::Error("ggml has no repacked layout for this type and shape on this CPU");
  }
  // ggml's buffer on the pages our weights get (kernels/weight_memory.h), advised before
  // the first write, so the comparison is of kernels and not of page sizes.
  advise_huge_pages(ggml_backend_buffer_get_base(m->buffer), bytes);
  ggml_backend_tensor_set(m->tensor, a.w, 0, ggml_nbytes(m->tensor));
  *out = {m, bytes};
  return Status::Ok();
}

void release_repacked(PreparedWeights p) { free_repacked(static_cast<RepackedMatrix*>(p.handle)); }

// What ggml converts the f32 activation to for weights of type W (its vec_dot_type),
// there and back, with ggml's own conversion routines.
template <WeightType W>
void act_round_trip(const float* x, float* seen, std::int64_t n) {
  init_ggml();
  const ggml_type dot = ggml_get_type_traits_cpu(ggml_type_of(W))->vec_dot_type;
  if (dot == GGML_TYPE_F32) {
    std::memcpy(seen, x, static_cast<std::size_t>(n) * sizeof(float));
    return;
  }
  std::vector<unsigned char> converted(ggml_row_size(dot, n));
  ggml_get_type_traits_cpu(dot)->from_float(x, converted.data(), n);
  // ggml has no dequantizer for its activation-only formats; their blocks are laid out
  // as qmvlab's Q8_K and Q8_1 (sizes checked at registration).
  if (dot == GGML_TYPE_Q8_K)
    dequantize_activation(ActFormat::Q8_K, converted.data(), seen, n);
  else if (dot == GGML_TYPE_Q8_1)
    dequantize_activation(ActFormat::Q8_1, converted.data(), seen, n);
  else
    ggml_get_type_traits(dot)->to_float(converted.data(), seen, n);
}

// The name of W's dot format, for the spec (static storage: records hold const char*).
const char* dot_format_name(WeightType w) {
  switch (w) {
    case WeightType::Q4_0:
    case WeightType::Q5_0:
    case WeightType::Q8_0: return "q8_0";
    case WeightType::Q4_1:
    case WeightType::Q5_1: return "q8_1";
    case WeightType::Q4_K:
    case WeightType::Q5_K:
    case WeightType::Q6_K: return "q8_K";
    case WeightType::F16: return "f16";
    case WeightType::BF16: return "bf16";
    case WeightType::F32: return "";
  }
  return "";
}

bool supports_repack_rows(Shape s) { return s.rows % 8 == 0 && supports_block32_cols(s); }
bool supports_repack_superblock(Shape s) { return s.rows % 8 == 0 && supports_superblock_cols(s); }

// The instruction sets this ggml build was compiled for (its ggml_cpu_has_* answer from
// the build's flags): the peer build is native to the machine that made it, so on
// another CPU its kernels are unavailable rather than an illegal instruction.
std::uint32_t ggml_build_features() {
  std::uint32_t f = 0;
  if (ggml_cpu_has_avx2()) f |= static_cast<std::uint32_t>(CpuFeature::AVX2);
  if (ggml_cpu_has_fma()) f |= static_cast<std::uint32_t>(CpuFeature::FMA);
  if (ggml_cpu_has_f16c()) f |= static_cast<std::uint32_t>(CpuFeature::F16C);
  if (ggml_cpu_has_avx512()) f |= static_cast<std::uint32_t>(CpuFeature::AVX512F);
  if (ggml_cpu_has_avx512_vnni()) f |= static_cast<std::uint32_t>(CpuFeature::AVX512VNNI);
  return f;
}

template <WeightType W>
KernelRecord plain_record(const char* name, const char* description) {
  KernelRecord r = cpu_matvec_kernel(name, W, ActFormat::F32, run_plain<W>, description, ggml_build_features());
  r.peer = "ggml";
  r.joins_call_teams = false;  // ggml's threads, not a call team's
  const char* dot = dot_format_name(W);
  if (*dot) {
    r.act_converted_to = dot;
    r.act_round_trip = act_round_trip<W>;
  }
  return r;
}

template <WeightType W>
KernelRecord repack_record(const char* name, const char* description) {
  KernelRecord r = plain_record<W>(name, description);
  r.run = run_repacked<W>;
  r.prepare = prepare_repacked<W>;
  r.release = release_repacked;
  r.cpu_features |= static_cast<std::uint32_t>(CpuFeature::AVX2);  // ggml repacks only where it has AVX2
  if (W == WeightType::Q4_K) {
    r.supports = supports_repack_superblock;
    r.shape_rule = "rows % 8 == 0, cols % 256 == 0";
  } else {
    r.supports = supports_repack_rows;
    r.shape_rule = "rows % 8 == 0, cols % 32 == 0";
  }
  return r;
}

// The batch forms: the same kernels for 1 to kMaxBatch activation vectors per call.
constexpr int kMaxBatch = 8;
KernelRecord batch_of(KernelRecord r) {
  r.op = OpKind::MatVecBatch;
  r.max_n = kMaxBatch;
  return r;
}

// Registers only when ggml's block sizes agree with qmvlab's for the type and for the
// activation formats both have.
bool register_if_layouts_agree(WeightType w, const KernelRecord& r) {
  const std::int64_t cols = 256;
  if (ggml_row_size(GGML_TYPE_Q8_K, cols) != row_bytes(ActFormat::Q8_K, cols) ||
      ggml_row_size(GGML_TYPE_Q8_1, cols) != row_bytes(ActFormat::Q8_1, cols)) {
    std::fprintf(stderr, "qmvlab: %s not registered: ggml's q8_K or q8_1 blocks differ from qmvlab's\n", r.name);
    return false;
  }
  if (ggml_row_size(ggml_type_of(w), cols) != row_bytes(w, cols)) {
    std::fprintf(stderr, "qmvlab: %s not registered: ggml's %s rows are %zu bytes per 256 values, qmvlab's %zu\n",
                 r.name, ggml_type_name(ggml_type_of(w)), ggml_row_size(ggml_type_of(w), cols), row_bytes(w, cols));
    return false;
  }
  return register_kernel(r, __FILE__);
}

#define QMV_GGML_PLAIN(T, type, conversion)                                                               \
  [[maybe_unused]] const bool registered_##type = register_if_layouts_agree(                              \
      WeightType::T, plain_record<WeightType::T>(#type ".ggml.cpu", "ggml's CPU mul_mat (the peer)" conversion)); \
  [[maybe_unused]] const bool registered_##type##_batch = register_if_layouts_agree(                      \
      WeightType::T, batch_of(plain_record<WeightType::T>(                                                \
                         #type ".ggml.cpu_batch", "ggml's CPU mul_mat (the peer), 1-8 columns" conversion)))

QMV_GGML_PLAIN(Q4_0, q4_0, "; f32 in, q8_0 in the call");
QMV_GGML_PLAIN(Q4_1, q4_1, "; f32 in, q8_1 in the call");
QMV_GGML_PLAIN(Q5_0, q5_0, "; f32 in, q8_0 in the call");
QMV_GGML_PLAIN(Q5_1, q5_1, "; f32 in, q8_1 in the call");
QMV_GGML_PLAIN(Q8_0, q8_0, "; f32 in, q8_0 in the call");
QMV_GGML_PLAIN(Q4_K, q4_K, "; f32 in, q8_K in the call");
QMV_GGML_PLAIN(Q5_K, q5_K, "; f32 in, q8_K in the call");
QMV_GGML_PLAIN(Q6_K, q6_K, "; f32 in, q8_K in the call");
QMV_GGML_PLAIN(F16, f16, "; f32 in, f16 in the call");
QMV_GGML_PLAIN(BF16, bf16, "; f32 in, bf16 in the call");
QMV_GGML_PLAIN(F32, f32, " on f32 activations");

#ifndef QMV_PEER_VERSION
#define QMV_PEER_VERSION "unknown version"
#endif
[[maybe_unused]] const bool registered_peer = register_peer("ggml", QMV_PEER_VERSION);

// The types ggml repacks on x86 (ggml-cpu/repack.cpp chooses by type and CPU).
[[maybe_unused]] const bool registered_q4_0_repack = register_if_layouts_agree(
    WeightType::Q4_0, repack_record<WeightType::Q4_0>(
                          "q4_0.ggml.cpu_repack", "ggml's CPU mul_mat (the peer), its 8-row interleaved Q4_0; q8_0 in the call"));
[[maybe_unused]] const bool registered_q4_K_repack = register_if_layouts_agree(
    WeightType::Q4_K, repack_record<WeightType::Q4_K>(
                          "q4_K.ggml.cpu_repack", "ggml's CPU mul_mat (the peer), its 8-row interleaved Q4_K; q8_K in the call"));
[[maybe_unused]] const bool registered_q4_0_repack_batch = register_if_layouts_agree(
    WeightType::Q4_0, batch_of(repack_record<WeightType::Q4_0>(
                          "q4_0.ggml.cpu_repack_batch",
                          "ggml's CPU mul_mat (the peer), its 8-row interleaved Q4_0, 1-8 columns; q8_0 in the call")));
[[maybe_unused]] const bool registered_q4_K_repack_batch = register_if_layouts_agree(
    WeightType::Q4_K, batch_of(repack_record<WeightType::Q4_K>(
                          "q4_K.ggml.cpu_repack_batch",
                          "ggml's CPU mul_mat (the peer), its 8-row interleaved Q4_K, 1-8 columns; q8_K in the call")));

}  // namespace
}  // namespace qmv
