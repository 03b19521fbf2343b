// What the GPU executor adds to the decode step of model/step.h: the plan bound with
// the GPU's checks, the device memory layout (weights, scratch, KV cache), the outlier
// routing's bookkeeping and the arguments of the per-head and attention kernels.
// GpuForward launches kernels over it; the CPU tests replay the same kernels'
// arithmetic on the host over it. Plain C++: no CUDA needed to include it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kernel.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/gpu_math.h"
#include "model/forward_ops_cuda.h"
#include "model/plan.h"
#include "model/step.h"

namespace qmv::cuda {

// Outlier tests one step can make: one per activation vector at most (four per layer:
// the attention input, the attention output, the FFN input, the SwiGLU output; and
// lm_head's input). Each has a verdict slot in the scratch.
inline int outlier_slots(const ModelConfig& c) { return 4 * c.n_layers + 1; }

// The outlier tests of one step, in order (a test's index is its verdict slot), with
// the routed matvecs that read each test's vector; once the verdicts are known, the
// counts they add up to. Both executors keep one, so the GPU's report is tested here.
class OutlierLedger {
 public:
  void clear() { readers_.clear(); }
  // A new test; its slot. Throws std::logic_error past `slots`.
  int open(int slots) {
    if (static_cast<int>(readers_.size()) >= slots)
      throw std::logic_error("outlier test " + std::to_string(readers_.size() + 1) + " of a step, but " +
                             std::to_string(slots) + " verdict slots");
    readers_.emplace_back();
    return static_cast<int>(readers_.size()) - 1;
  }
  void read(int slot, Op part) { readers_.at(slot).push_back(part); }
  int tests() const { return static_cast<int>(readers_.size()); }
  // Per reading part: routable += 1, routed += the verdict; calls[OutlierTest] += tests.
  void count(const int* verdicts, StepTimes& into) const {
    for (std::size_t slot = 0; slot < readers_.size(); ++slot)
      for (Op part : readers_[slot]) {
        ++into.routable[static_cast<int>(part)];
        if (verdicts[slot]) ++into.routed[static_cast<int>(part)];
      }
    into.calls[static_cast<int>(Op::OutlierTest)] += static_cast<std::int64_t>(readers_.size());
  }

 private:
  std::vector<std::vector<Op>> readers_;
};

// The route table of a captured step (see kRouteRowWords): row `slot` lists the
// conditional handles of the if/else nodes that read test `slot`'s vector, one handle
// per node. Built on the host while the step is captured, then copied to the device.
class RouteTable {
 public:
  void reset(int slots) { words_.assign(static_cast<std::size_t>(slots) * kRouteRowWords, 0); }
  // Adds one node's handle to test `slot`. Throws std::logic_error past the row.
  void add(int slot, unsigned long long handle) {
    if (slot < 0 || static_cast<std::size_t>(slot) >= words_.size() / kRouteRowWords)
      throw std::logic_error("route table: test " + std::to_string(slot) + " has no row");
    unsigned long long* r = words_.data() + static_cast<std::size_t>(slot) * kRouteRowWords;
    if (r[0] >= static_cast<unsigned long long>(kRouteHandlesPerTest))
      throw std::logic_error("route table: more than " + std::to_string(kRouteHandlesPerTest) +
                             " routed matvecs read the vector of test " + std::to_string(slot));
    r[1 + r[0]] = handle;
    ++r[0];
  }
  const unsigned long long* row(int slot) const { return words_.data() + static_cast<std::size_t>(slot) * kRouteRowWords; }
  const std::vector<unsigned long long>& words() const { return words_; }

 private:
  std::vector<unsigned long long> words_;
};

// bind_plan for CUDA kernels, and what the GPU step can run: throws PlanError also
// when a kernel wants an activation format the GPU step does not have (f32, and Q8_1
// it quantizes to), and ModelError when the model's heads do not fit the GPU kernels
// (head_dim <= 256).
BoundModel bind_gpu_plan(const ModelConfig& c, const ModelWeights& w, const std::vector<PlannedMatvec>& plan);

// Where each of m.tensors goes in one allocation (256-byte aligned offsets, listed in
// the order of m.tensors; a layer's ffn_up right after its ffn_gate, and its attn_k
// after attn_q and attn_v after attn_k, where the one before is a multiple of 256 bytes
// long); `total` gets the allocation's size.
std::vector<std::size_t> weight_offsets(const BoundModel& m, std::size_t& total);

// The scratch buffers of one step, as offsets into one allocation (256-byte aligned).
struct ScratchLayout {
  std::size_t x = 0, xn = 0, q = 0, k = 0, v = 0, att = 0, att_out = 0, gate = 0, up = 0, ffn_out = 0, logits = 0,
              rope_cos = 0, rope_sin = 0, attn_partials = 0, attn_counters = 0, act_q8_1 = 0, outlier_verdicts = 0,
              route_table = 0, state = 0;
  std::size_t act_q8_1_bytes = 0;  // 0 when no kernel reads Q8_1
  int outlier_slots = 0;           // ints at outlier_verdicts, rows at route_table; 0 without outlier routing
  std::size_t bytes = 0;           // the whole allocation
};
ScratchLayout scratch_layout(const ModelConfig& c, int attn_splits, bool q8_1, bool outlier_routing = false);

// How many splits attention's positions are cut into: enough CTAs (heads x splits)
// to cover every SM twice, at most 64, and no split shorter than 16 positions of the
// full context.
int attention_splits(int sm_count, int n_head, int context);

// Which matvecs of a layer make_step_program runs as one where they can.
struct Stacking {
  bool gate_up = true;  // stack_gate_up
  bool qkv = true;      // stack_qkv
};

// make_step_program (model/step.h) with the activation and GPU buffers in `scratch`,
// laid out as `layout`, and each layer's matvecs stacked as `stacking` says.
StepProgram make_step_program(const ModelConfig& c, const BoundModel& m, int context,
                              const std::function<const void*(const gguf::Tensor*)>& address_of,
                              const ScratchLayout& layout, void* scratch, void* kv_cache, Stacking stacking = {});

// Stacking: two matvecs that read the same vector run as one call on one matrix of both
// (the first's rows, then the second's) where they run the same plain kernel (and the
// same outlier routing), their weights lie back to back (weight_offsets puts them so),
// and so do their outputs (scratch_layout). One launch then reads the bytes of both,
// and a GPU launch loses a few microseconds whatever its size.
//
// Each layer's gate and up as the `ffn_up_gate` op. Returns how many layers it stacked.
int stack_gate_up(StepProgram& p);
// Each layer's q and k, and v after them where it can, as the `attn_qkv` op
// (LayerOps::qkv_stacked says which). Returns how many layers it stacked.
int stack_qkv(StepProgram& p);
// The weight bytes of each stacked op moved in m.part_bytes from the ops it stands for
// to its own (ffn_up_gate, attn_qkv), so the breakdown's GB/s divide what each call read.
void move_stacked_bytes(const StepProgram& p, BoundModel& m);

// The arguments of a layer's per-head step and attention over `p`'s buffers (both
// executors launch or replay them with these).
HeadStepArgs head_step_args(const ModelConfig& c, const StepProgram& p, const LayerOps& l);
AttentionArgs attention_args(const ModelConfig& c, const StepProgram& p, const LayerOps& l, int attn_splits);
// Both, for the fused kernel, with its split counters; `out_q8_1` (null: none) gets the
// output's Q8_1 blocks.
FusedAttentionArgs fused_attention_args(const ModelConfig& c, const StepProgram& p, const LayerOps& l, int attn_splits,
                                        BlockQ8_1* out_q8_1);

}  // namespace qmv::cuda
