// GpuForward: the decode step of model/gpu_program.h run on a CUDA device.
// Host code (compiled by g++ against the CUDA runtime); the kernels are
// model/forward_ops_cuda.cu, the registered matvecs and the Q8_1 quantizer.
#include "model/forward_cuda.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nvtx3/nvToolsExt.h>

#include <chrono>
#include <cmath>
#include <unordered_map>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/dequantize_row.h"
#include "kernels/cuda/quantize_q8_1.h"
#include "model/forward_ops_cuda.h"
#include "model/gpu_program.h"

namespace qmv {
namespace {

// A CUDA runtime error as an exception that says what was being done.
void check(cudaError_t err, const std::string& what) {
  if (err != cudaSuccess) throw std::runtime_error(fmt::format("GPU: {}: {}", what, cudaGetErrorString(err)));
}

// The sampler is part of the GPU step but not a Op: its time is kept apart.
constexpr int kSampleOp = -1;

std::string op_label(int part) { return part == kSampleOp ? "sample" : std::string(to_string(static_cast<Op>(part))); }

}  // namespace

struct GpuForward::Impl {
  ModelConfig c;
  GpuForwardOptions opt;
  BoundModel bound;
  cuda::SampleParams sample_params;
  int context = 0, attn_splits = 1, pos = 0;
  std::string device_name;
  DeviceMemoryNeed need;
  double upload_s = 0;

  // Device resources; released by ~Impl whatever init() got to.
  void* weights_mem = nullptr;
  void* scratch_mem = nullptr;
  void* kv_mem = nullptr;
  cudaStream_t stream = nullptr;
  struct HostSlots {
    int token;
    int sampled;
  };
  HostSlots* pinned = nullptr;  // page-locked, so the graph's copies may read and write it
  int* pinned_verdicts = nullptr;  // the outlier tests' verdicts of the last step, page-locked
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graph_exec = nullptr;
  bool capturing = false;
  bool warmed_up = false;  // a step ran op by op: every kernel has launched once
  // The other way of running attention (set_fuse_attention): its graph and warm-up,
  // swapped with the fields above on a switch.
  struct StepGraph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    bool warmed_up = false;
  } other_attention;
  // The capture's last node is not a kernel (a routing if/else node): a launch after it
  // goes without the overlap, since a programmatic edge leaves only a kernel node.
  bool after_non_kernel_node = false;

  // Outlier routing. In a captured graph each routed matvec is an if/else node with a
  // conditional handle of its own (CUDA allows one node per handle): the test kernel
  // sets the handles its route table row lists, the node runs the f32 sibling or the
  // int8 kernel, with no trip to the host. Op by op, the host reads each verdict (one
  // synchronization per tested vector) and launches the kernel it picks.
  cudaStream_t branch_stream = nullptr;  // captures the if/else nodes' bodies
  // The bodies are captured after the step's capture ends (as CUDA's own examples
  // do), each with the activation vector its matvec reads.
  struct PendingBranch {
    cudaGraph_t body;
    const KernelSpec* kernel;
    MatvecOp m;
    float *y, *y2;
    const float* x;  // the activation vector (its Q8_1 form is in the buffer when the body runs)
    std::int64_t n;
  };
  std::vector<PendingBranch> pending_branches;
  cuda::RouteTable route_table;  // the captured nodes' handles per test, copied to program.route_table
  cuda::OutlierLedger ledger;  // this step's tests and their readers
  StepTimes routing;  // routable / routed per part, calls[OutlierTest]: tests made

  cuda::ScratchLayout layout;
  StepProgram program;

  // Op timing: an event before every op of the step and one after the last.
  bool op_timing = false;
  std::vector<cudaEvent_t> events;
  std::vector<int> event_parts;
  std::size_t events_used = 0;
  StepTimes times;
  double sample_s = 0;
  int timed_steps = 0;

  // The activation vector the next matvecs read (the executor's `set_activation`).
  struct ActivationVector {
    const float* x = nullptr;
    std::int64_t n = 0;
    bool q8_1_ready = false;
    int test_slot = -1;  // its outlier test's verdict slot, once tested
    double test_k = 0;
    int verdict = -1;  // op by op: the verdict read back (-1: not yet)
  } current;
  // The vector whose Q8_1 form program.act_q8_1 holds (null: none): the norm and
  // SwiGLU kernels quantize what they write when an int8 kernel may read it, and the
  // standalone quantizer then runs only for other vectors (the attention output).
  const float* q8_1_holds = nullptr;
  BlockQ8_1* q8_1_copy(int n) {
    if (!program.act_q8_1 || n % kQ8_1Block != 0) return nullptr;
    return static_cast<BlockQ8_1*>(program.act_q8_1);
  }

  std::vector<float> host_logits;

  ~Impl();
  void init(const ModelWeights& weights, const std::vector<PlannedMatvec>& plan);
  cuda::DecodeState* state() const { return static_cast<cuda::DecodeState*>(program.state); }
  bool graph_mode() const { return opt.cuda_graph && !op_timing && !opt.sync_each_op; }

  // One op of the step: its timing event, an NVTX range named after it, the launch,
  // and an error that names the op and the kernel.
  template <class Launch>
  void op(int part, const char* kernel, Launch&& launch) {
    if (op_timing) record_boundary(part);
    nvtxRangePushA(kernel);
    const Status st = launch();
    after_non_kernel_node = false;
    nvtxRangePop();
    if (!st.ok()) throw std::runtime_error(fmt::format("GPU {} ({}): {}", op_label(part), kernel, st.error));
    if (opt.sync_each_op && !capturing)
      check(cudaStreamSynchronize(stream), fmt::format("{} ({}) at position {}", op_label(part), kernel, pos));
  }
  void record_boundary(int part);
  void add_op_times();

  // The executor decode_step runs, in its order.
  void embed() {
    op(static_cast<int>(Op::Embed), cuda::kDequantizeRowName, [&] {
      return cuda::dequantize_row_at(program.embd_type, program.token_embd, c.vocab_size, &state()->token, program.x,
                                     c.n_embd,
                                     stream);
    });
    op(static_cast<int>(Op::Embed), "rope_table", [&] {
      return cuda::launch_rope_table(state(), program.rope_cos, program.rope_sin, c.rope_dim, c.rope_freq_base, stream);
    });
  }
  void rms_norm(float* x, const float* delta, const float* weight, float* y, int n) {
    BlockQ8_1* yq = q8_1_copy(n);
    op(static_cast<int>(Op::Norm), "rms_norm",
       [&] { return cuda::launch_rms_norm(x, delta, weight, y, yq, n, c.rms_eps, stream); });
    q8_1_holds = yq ? y : nullptr;
  }
  void set_activation(const float* x, std::int64_t n) {
    current = {};
    current.x = x;
    current.n = n;
    current.q8_1_ready = x == q8_1_holds;
  }
  const void* activation(ActFormat f, std::size_t& bytes) {
    bytes = row_bytes(f, current.n);
    if (f == ActFormat::F32) return current.x;
    // Q8_1: bind_gpu_plan let no other format through.
    if (!current.q8_1_ready) {
      op(static_cast<int>(Op::ActQuant), cuda::kQuantizeQ8_1Name, [&] {
        return cuda::quantize_q8_1(current.x, static_cast<BlockQ8_1*>(program.act_q8_1), current.n, stream);
      });
      current.q8_1_ready = true;
      q8_1_holds = current.x;
    }
    return program.act_q8_1;
  }
  void matvec(const MatvecOp& m, float* y, float* y2 = nullptr) {
    if (!m.outlier_kernel) {
      run_matvec(*m.kernel, m, y, y2, stream);
      return;
    }
    const int slot = outlier_test(m.outlier_k);
    ledger.read(slot, m.part);
    // Op by op, the verdict is read before anything else is queued, so with op timing
    // the trip to the host counts as the test's time, not the quantizer's.
    const bool trips = !capturing && host_verdict(slot);
    // Quantized outside the branches: the vector's other int8 readers share it.
    std::size_t unused = 0;
    activation(m.kernel->act, unused);
    if (capturing) {
      routed_in_graph(m, slot, y, y2);
      return;
    }
    // The op-by-op step before a capture launches every kernel the graph may run, so
    // none does its one-time setup inside the capture: the branch this vector did not
    // take runs first, and the one it took then overwrites its output.
    if (!warmed_up && graph_mode()) run_matvec(trips ? *m.kernel : *m.outlier_kernel, m, y, y2, stream);
    run_matvec(trips ? *m.outlier_kernel : *m.kernel, m, y, y2, stream);
  }
  // `kernel` on the matvec's weights, on stream `s`; a plain kernel standing in for a
  // fused op runs once per matrix.
  void run_matvec(const KernelSpec& kernel, const MatvecOp& m, float* y, float* y2, cudaStream_t s) {
    auto launch = [&](const void* w, std::size_t w_bytes, const void* w2, std::size_t w2_bytes, float* out,
                      float* out2) {
      std::size_t x_bytes = 0;
      const void* x = activation(kernel.act, x_bytes);
      MatVecArgs a = matvec_args(m.shape, w, w_bytes, x, x_bytes, out, w2, w2_bytes, out2);
      a.stream = s;
      a.overlap_previous = opt.overlap_weights && !after_non_kernel_node;
      op(static_cast<int>(m.part), kernel.name.c_str(), [&] { return invoke(kernel, a); });
    };
    for_each_invocation(kernel, m, y, y2, launch);
  }
  // The current vector's outlier test at k, launched once per vector; its slot.
  int outlier_test(double k) {
    if (current.test_slot >= 0 && current.test_k == k) return current.test_slot;
    const int slot = ledger.open(program.outlier_slots);
    // The row is filled as the nodes that read this vector are captured, and copied to
    // the device before the graph first runs.
    const unsigned long long* route_row = capturing ? program.route_table + slot * cuda::kRouteRowWords : nullptr;
    op(static_cast<int>(Op::OutlierTest), "outlier_test", [&] {
      return cuda::launch_outlier_test(current.x, static_cast<int>(current.n), k, program.outlier_verdicts + slot,
                                       route_row, stream);
    });
    current.test_slot = slot;
    current.test_k = k;
    current.verdict = -1;
    return slot;
  }
  bool host_verdict(int slot) {
    if (current.verdict < 0) {
      check(cudaMemcpyAsync(&pinned_verdicts[slot], program.outlier_verdicts + slot, sizeof(int),
                            cudaMemcpyDeviceToHost, stream),
            "copying an outlier verdict to the host");
      check(cudaStreamSynchronize(stream), fmt::format("the outlier test at position {}", pos));
      current.verdict = pinned_verdicts[slot];
    }
    return current.verdict != 0;
  }
  void routed_in_graph(const MatvecOp& m, int slot, float* y, float* y2);
  void capture_branch(const PendingBranch& b);

  void head_step(const LayerOps& l) {
    if (opt.fuse_attention) return;  // attention() runs it
    const cuda::HeadStepArgs a = cuda::head_step_args(c, program, l);
    op(static_cast<int>(Op::QkNormRope), "head_step", [&] { return cuda::launch_head_step(a, stream); });
  }
  void attention(const LayerOps& l) {
    if (opt.fuse_attention) {
      const int width = c.n_head * c.head_dim;
      BlockQ8_1* yq = c.head_dim % kQ8_1Block == 0 ? q8_1_copy(width) : nullptr;
      const cuda::FusedAttentionArgs a = cuda::fused_attention_args(c, program, l, attn_splits, yq);
      op(static_cast<int>(Op::Attention), "fused_attention", [&] { return cuda::launch_fused_attention(a, stream); });
      if (yq) q8_1_holds = program.att;
      return;
    }
    const cuda::AttentionArgs a = cuda::attention_args(c, program, l, attn_splits);
    op(static_cast<int>(Op::Attention), "attention", [&] { return cuda::launch_attention(a, stream); });
  }
  void swiglu(float* gate, const float* up, int n) {
    BlockQ8_1* yq = q8_1_copy(n);
    op(static_cast<int>(Op::Swiglu), "swiglu", [&] { return cuda::launch_swiglu(gate, up, yq, n, stream); });
    q8_1_holds = yq ? gate : nullptr;
  }
  void sample(const float* logits, int n) {
    op(kSampleOp, "sample", [&] { return cuda::launch_sample(logits, n, sample_params, state(), stream); });
  }

  // The token in, the step, the sampled token out: what the graph captures.
  void run_step_body() {
    ledger.clear();
    check(cudaMemcpyAsync(&state()->token, &pinned->token, sizeof(int), cudaMemcpyHostToDevice, stream),
          "copying the token to the device");
    decode_step(*this, program);
    if (op_timing) record_boundary(kSampleOp);  // closes the last op
    if (ledger.tests() > 0)
      check(cudaMemcpyAsync(pinned_verdicts, program.outlier_verdicts, ledger.tests() * sizeof(int),
                            cudaMemcpyDeviceToHost, stream),
            "copying the outlier verdicts to the host");
    check(cudaMemcpyAsync(&pinned->sampled, &state()->sampled, sizeof(int), cudaMemcpyDeviceToHost, stream),
          "copying the sampled token to the host");
  }
  void capture();
};

GpuForward::Impl::~Impl() {
  if (graph_exec) cudaGraphExecDestroy(graph_exec);
  if (graph) cudaGraphDestroy(graph);
  if (other_attention.exec) cudaGraphExecDestroy(other_attention.exec);
  if (other_attention.graph) cudaGraphDestroy(other_attention.graph);
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  if (stream) cudaStreamDestroy(stream);
  if (branch_stream) cudaStreamDestroy(branch_stream);
  if (pinned) cudaFreeHost(pinned);
  if (pinned_verdicts) cudaFreeHost(pinned_verdicts);
  if (weights_mem) cudaFree(weights_mem);
  if (scratch_mem) cudaFree(scratch_mem);
  if (kv_mem) cudaFree(kv_mem);
}

void GpuForward::Impl::init(const ModelWeights& weights, const std::vector<PlannedMatvec>& plan) {
  validate(opt.sampler);
  sample_params.temperature = opt.sampler.temperature;
  sample_params.top_k = opt.sampler.top_k;
  sample_params.top_p = opt.sampler.top_p;
  sample_params.seed = opt.sampler.seed;
  op_timing = opt.op_timing;
  context = opt.context > 0 ? std::min(opt.context, c.context_length) : c.context_length;

  // Everything is checked before anything is allocated.
  bound = cuda::bind_gpu_plan(c, weights, plan);
  const cuda::DeviceInfo dev = cuda::query_device();
  if (!dev.present) throw std::runtime_error("GPU decode: " + dev.why_absent);
  device_name = fmt::format("{} (sm_{})", dev.name, dev.sm);
  for (const PlannedMatvec& p : plan)
    if (p.kernel && p.kernel->min_sm > dev.sm)
      throw PlanError(fmt::format("GPU plan: {} needs sm_{}, {} is sm_{}", p.kernel->name, p.kernel->min_sm, dev.name,
                                  dev.sm));
  attn_splits = cuda::attention_splits(dev.sm_count, c.n_head, context);
  need = device_memory_need(c, weights, plan, context, dev.sm_count);
  std::size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "reading the free device memory");
  if (const std::string refusal = device_memory_refusal(need, free_bytes, device_name); !refusal.empty())
    throw GpuMemoryError(refusal);

  check(cudaStreamCreate(&stream), "creating the decode stream");
  check(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(HostSlots), cudaHostAllocDefault),
        "allocating the page-locked token slots");
  pinned->token = 0;
  pinned->sampled = 0;
  if (bound.routes_outliers) {
    check(cudaStreamCreateWithFlags(&branch_stream, cudaStreamNonBlocking), "creating the routing branches' stream");
    check(cudaHostAlloc(reinterpret_cast<void**>(&pinned_verdicts), cuda::outlier_slots(c) * sizeof(int),
                        cudaHostAllocDefault),
          "allocating the page-locked outlier verdicts");
  }

  // The weights, once: every tensor the step reads, each at its 256-aligned offset.
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t weight_total = 0;
  const std::vector<std::size_t> offsets = cuda::weight_offsets(bound, weight_total);
  check(cudaMalloc(&weights_mem, weight_total), fmt::format("allocating {} bytes for the weights", weight_total));
  std::unordered_map<const gguf::Tensor*, const void*> address;
  for (std::size_t i = 0; i < bound.tensors.size(); ++i) {
    const gguf::Tensor* t = bound.tensors[i];
    void* dst = static_cast<std::uint8_t*>(weights_mem) + offsets[i];
    check(cudaMemcpy(dst, t->data, t->bytes, cudaMemcpyHostToDevice), fmt::format("uploading '{}'", t->name));
    address[t] = dst;
  }
  upload_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  layout = cuda::scratch_layout(c, attn_splits, bound.needs_q8_1, bound.routes_outliers);
  check(cudaMalloc(&scratch_mem, layout.bytes), fmt::format("allocating {} bytes of scratch", layout.bytes));
  check(cudaMemset(scratch_mem, 0, layout.bytes), "clearing the scratch");  // the position starts at 0
  const std::size_t kv_bytes = kv_cache_bytes(c, context);
  check(cudaMalloc(&kv_mem, kv_bytes), fmt::format("allocating {} bytes of KV cache", kv_bytes));
  check(cudaMemset(kv_mem, 0, kv_bytes), "clearing the KV cache");
  program = cuda::make_step_program(c, bound, context, [&](const gguf::Tensor* t) { return address.at(t); }, layout,
                                    scratch_mem, kv_mem, {opt.stack_gate_up, opt.stack_qkv});
  cuda::move_stacked_bytes(program, bound);
  host_logits.resize(c.vocab_size);
}

void GpuForward::Impl::record_boundary(int part) {
  if (events_used == events.size()) {
    cudaEvent_t e;
    check(cudaEventCreate(&e), "creating a timing event");
    events.push_back(e);
    event_parts.push_back(part);
  }
  event_parts[events_used] = part;
  check(cudaEventRecord(events[events_used], stream), "recording a timing event");
  ++events_used;
}

void GpuForward::Impl::add_op_times() {
  // Event i opens op i and closes op i - 1; the last one only closes.
  for (std::size_t i = 0; i + 1 < events_used; ++i) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, events[i], events[i + 1]), "reading a timing event");
    const int part = event_parts[i];
    if (part == kSampleOp) {
      sample_s += ms * 1e-3;
    } else {
      times.seconds[part] += ms * 1e-3;
      ++times.calls[part];
    }
  }
  events_used = 0;
  ++timed_steps;
}

void GpuForward::Impl::routed_in_graph(const MatvecOp& m, int slot, float* y, float* y2) {
  cudaStreamCaptureStatus status;
  cudaGraph_t graph_being_captured = nullptr;
  check(cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph_being_captured), "reading the capture's graph");
  // This node's own handle; no default value: the test sets it before the node runs.
  cudaGraphConditionalHandle condition = 0;
  check(cudaGraphConditionalHandleCreate(&condition, graph_being_captured, 0, 0),
        fmt::format("creating the outlier routing condition of {}", to_string(m.part)));
  route_table.add(slot, condition);
  // The dependencies last: their array is valid until the next call on the stream.
  const cudaGraphNode_t* deps = nullptr;
  std::size_t n_deps = 0;
  check(cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &n_deps),
        "reading the capture's dependencies");
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = condition;
  params.conditional.type = cudaGraphCondTypeIf;
  params.conditional.size = 2;  // body 0 when the vector trips the test, body 1 when not
  cudaGraphNode_t node;
  check(cudaGraphAddNode(&node, graph_being_captured, deps, nullptr, n_deps, &params),
        fmt::format("adding the outlier routing node of {} (CUDA graph if/else nodes need CUDA 12.8 or later; "
                    "--no-cuda-graph routes op by op)",
                    to_string(m.part)));
  check(cudaStreamUpdateCaptureDependencies(stream, &node, nullptr, 1, cudaStreamSetCaptureDependencies),
        "continuing the capture after the routing node");
  after_non_kernel_node = true;
  pending_branches.push_back({params.conditional.phGraph_out[0], m.outlier_kernel, m, y, y2, current.x, current.n});
  pending_branches.push_back({params.conditional.phGraph_out[1], m.kernel, m, y, y2, current.x, current.n});
}

void GpuForward::Impl::capture_branch(const PendingBranch& b) {
  current = {};
  current.x = b.x;
  current.n = b.n;
  current.q8_1_ready = true;  // quantized before the node, outside the branches
  check(cudaStreamBeginCaptureToGraph(branch_stream, b.body, nullptr, nullptr, 0, cudaStreamCaptureModeThreadLocal),
        fmt::format("capturing {} into a routing branch", b.kernel->name));
  try {
    run_matvec(*b.kernel, b.m, b.y, b.y2, branch_stream);
  } catch (...) {
    cudaGraph_t ended = nullptr;
    cudaStreamEndCapture(branch_stream, &ended);
    throw;
  }
  cudaGraph_t ended = nullptr;
  check(cudaStreamEndCapture(branch_stream, &ended), fmt::format("ending the routing branch of {}", b.kernel->name));
}


void GpuForward::Impl::capture() {
  pending_branches.clear();
  route_table.reset(program.outlier_slots);
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "starting to capture the decode step");
  capturing = true;
  try {
    run_step_body();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);
    if (broken) cudaGraphDestroy(broken);
    cudaGetLastError();  // the failed capture's error is reported by the exception
    capturing = false;
    throw;
  }
  capturing = false;
  check(cudaStreamEndCapture(stream, &graph),
        "capturing the decode step as a CUDA graph (a kernel that allocates or synchronizes cannot be captured; "
        "--no-cuda-graph runs the step op by op)");
  try {
    for (const PendingBranch& b : pending_branches) capture_branch(b);
    pending_branches.clear();
    if (program.route_table)
      check(cudaMemcpy(program.route_table, route_table.words().data(),
                       route_table.words().size() * sizeof(unsigned long long), cudaMemcpyHostToDevice),
            "copying the outlier routing's graph conditions to the device");
    check(cudaGraphInstantiate(&graph_exec, graph, 0), "instantiating the decode step's CUDA graph");
  } catch (...) {
    cudaGetLastError();  // reported by the exception, not by the next launch
    cudaGraphDestroy(graph);
    graph = nullptr;
    pending_branches.clear();
    throw;
  }
}

GpuForward::GpuForward(const ModelConfig& config, const ModelWeights& weights, const std::vector<PlannedMatvec>& plan,
                       const GpuForwardOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->c = config;
  impl_->opt = options;
  impl_->init(weights, plan);
}

GpuForward::~GpuForward() = default;

int GpuForward::step(int token) {
  Impl& m = *impl_;
  if (token < 0 || token >= m.c.vocab_size)
    throw std::out_of_range(fmt::format("token id {} is outside the vocabulary (0..{})", token, m.c.vocab_size - 1));
  if (m.pos >= m.context)
    throw ContextFull(fmt::format("context full: position {} needs a context longer than {} tokens", m.pos, m.context));
  m.pinned->token = token;
  // The first step runs op by op even with graphs on: the kernels' one-time setup
  // (occupancy queries cached per device) then happens before, not inside, a capture.
  if (m.graph_mode() && (m.graph_exec || m.warmed_up)) {
    if (!m.graph_exec) m.capture();
    nvtxRangePushA("decode_step (graph)");
    const cudaError_t err = cudaGraphLaunch(m.graph_exec, m.stream);
    nvtxRangePop();
    check(err, "launching the decode step's CUDA graph");
  } else {
    nvtxRangePushA("decode_step");
    m.events_used = 0;
    m.run_step_body();
    nvtxRangePop();
    m.warmed_up = true;
  }
  check(cudaStreamSynchronize(m.stream),
        fmt::format("decode step at position {} (--no-cuda-graph with CUDA_LAUNCH_BLOCKING=1 names the op)", m.pos));
  if (m.op_timing) m.add_op_times();
  if (m.ledger.tests() > 0) m.ledger.count(m.pinned_verdicts, m.routing);
  ++m.pos;
  const int sampled = m.pinned->sampled;
  if (sampled < 0) throw std::runtime_error(fmt::format("GPU sampler: logit {} is not finite", -1 - sampled));
  return sampled;
}

std::span<const float> GpuForward::logits() {
  Impl& m = *impl_;
  check(cudaMemcpy(m.host_logits.data(), m.program.logits, m.host_logits.size() * sizeof(float),
                   cudaMemcpyDeviceToHost),
        "copying the logits to the host");
  return m.host_logits;
}

int GpuForward::position() const { return impl_->pos; }
int GpuForward::context() const { return impl_->context; }

void GpuForward::reset() {
  Impl& m = *impl_;
  check(cudaStreamSynchronize(m.stream), "finishing the last step before a reset");
  const int zero = 0;
  check(cudaMemcpy(&m.state()->pos, &zero, sizeof zero, cudaMemcpyHostToDevice), "resetting the position");
  m.pos = 0;
}

void GpuForward::set_op_timing(bool on) { impl_->op_timing = on; }
void GpuForward::set_fuse_attention(bool on) {
  Impl& m = *impl_;
  if (m.opt.fuse_attention == on) return;
  check(cudaStreamSynchronize(m.stream), "finishing the last step before switching the attention");
  std::swap(m.graph, m.other_attention.graph);
  std::swap(m.graph_exec, m.other_attention.exec);
  std::swap(m.warmed_up, m.other_attention.warmed_up);
  m.opt.fuse_attention = on;
}
bool GpuForward::fuse_attention() const { return impl_->opt.fuse_attention; }
const StepTimes& GpuForward::times() const { return impl_->times; }
double GpuForward::sample_seconds() const { return impl_->sample_s; }
int GpuForward::timed_steps() const { return impl_->timed_steps; }
const StepTimes& GpuForward::routing() const { return impl_->routing; }
void GpuForward::clear_routing() { impl_->routing.clear(); }
void GpuForward::clear_times() {
  impl_->times.clear();
  impl_->sample_s = 0;
  impl_->timed_steps = 0;
}

std::uint64_t GpuForward::bytes_per_token(int pos) const {
  const ModelConfig& c = impl_->c;
  const std::uint64_t kv_width = static_cast<std::uint64_t>(c.n_head_kv) * c.head_dim;
  return impl_->bound.weight_bytes + 2ull * c.n_layers * static_cast<std::uint64_t>(pos + 1) * kv_width * sizeof(float);
}
std::uint64_t GpuForward::weight_bytes() const { return impl_->bound.weight_bytes; }
std::uint64_t GpuForward::part_weight_bytes(Op p) const { return impl_->bound.part_bytes[static_cast<int>(p)]; }
const DeviceMemoryNeed& GpuForward::memory() const { return impl_->need; }
const std::string& GpuForward::device_name() const { return impl_->device_name; }
double GpuForward::upload_seconds() const { return impl_->upload_s; }
bool GpuForward::graph_enabled() const { return impl_->graph_mode(); }
int GpuForward::attention_splits() const { return impl_->attn_splits; }

}  // namespace qmv
