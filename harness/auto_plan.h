// `auto` from measurements made here: the speeds a kernel plan's `auto` picks by, read
// from the tuning store (harness/tuning_store.h) and, for the matvecs of a model it has
// no figures for, measured first and saved there, so the next run measures nothing.
//
// A matvec (op kind, weight type, shape, threads, cache state) is covered when every
// kernel that can run it here has a usable store row. One that is not gets all its
// candidates timed together, interleaved (a figure compared with one taken on another
// day would carry that day's bandwidth): first a screening pass of one repetition each,
// then the ones within kFinalistRatio of the fastest again, three repetitions. Timing
// stops when the budget is spent; a matvec left unmeasured takes the kernel fastest at
// the nearest measured shape of its weight type, else the static order, and the plan
// table says which.
//
// Where the weights stream from memory (CPU, cold), the figures compared are of one
// memory speed: a host whose memory runs at two speeds, minutes apart, keeps rows of each
// (harness/tuning_store.h, read_gbps), and a kernel's figure from a fast minute says
// nothing against another's from a slow one. `auto` times a few read passes as it plans;
// a matvec is covered where every candidate has a row at one speed (a row of unknown
// speed, from a file written before the column, matches any), and of those speeds the
// one nearest the speed now answers. What it times keeps the read loop timed beside it.
// So the second run of a model times nothing whatever the speed; the summary counts the
// matvecs answered at another or an unknown speed.
//
// With n > 1 (`decode --batch B`, n = B) the same is done for the batch decode's
// matvecs: the candidates are the batch kernels that take n vectors per call, and the
// rows read, timed and kept are those of n vectors per call. The one-vector kernel
// called n times, the batch kernels' rival (model/batch_forward.h), is the n = 1 plan's
// and needs no timing of its own.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/plan.h"

namespace qmv {

struct AutoPlanOptions {
  int threads = 1;
  Backend backend = Backend::CPU;
  bool measure = true;    // false (--no-tune): the store's figures only
  double budget_s = 60;   // timing stops once this much has been spent
  double spent_s = 0;     // spent on timing before, in the same run (the one-vector plan's, for a batch)
  // Activation vectors per call: 1 for the one-vector plan, the batch's B for the
  // batch plan's speeds.
  int n = 1;
  std::string store_path; // "" : TuningStore::default_path(backend)
  // The memory's read speed now, GB/s: < 0 measured here where the weights stream from
  // memory (CPU, cold; else unknown), 0 unknown (each kernel's newest row), > 0 given.
  double read_gbps = -1;
  // Seconds per repetition of the screening pass and of the finalists' three.
  double screen_min_time_s = 0.02, final_min_time_s = 0.05;
  std::function<void(const std::string&)> progress;  // one line per step, for stderr
};

struct AutoPlanEvidence {
  std::vector<KernelSpeed> speeds;  // what resolve_plan's auto picks by
  int matvecs = 0;                  // distinct matvecs auto decides
  int from_store = 0, measured = 0, unmeasured = 0;
  double seconds = 0;  // spent timing
  int threads = 0;
  int n = 1;  // vectors per call of the speeds
  bool static_order = false;  // the plan takes the fixed order, whatever was measured
  Backend backend = Backend::CPU;
  std::string cache;   // "cold" or "warm": how the model's weights are met
  double read_gbps = 0;   // the memory's read speed the rows were chosen for; 0: unknown
  std::string read_loop;  // the loop that measured it here ("" when given or unknown)
  // Matvecs answered by rows of another or an unknown read speed than the one now.
  int other_speed = 0;
  std::string store;   // the store's path
  std::string warning; // a damaged store, or one that could not be written ("" if neither)
  // One line for the plan's header: what was measured and where the rest came from.
  std::string summary() const;
};

// A fully covered matvec needs nothing timed; this ratio of the fastest screening time
// decides which candidates are timed again.
inline constexpr double kFinalistRatio = 1.25;

// The evidence `auto` needs to decide every matvec `plan` leaves to it on this
// machine, or on this GPU for the CUDA backend; with options.n > 1, every plain matvec
// that has a batch kernel taking n vectors.
AutoPlanEvidence auto_plan_evidence(const KernelPlan& plan, const ModelWeights& weights, const AutoPlanOptions& options);

// The memory's read speed now on `threads` threads: the median of three passes of
// `loop` (the stored peak's loop when "") over a buffer well past the last-level cache.
struct ReadSpeedNow {
  double gbps = 0;
  std::string loop;
};
ReadSpeedNow read_speed_now(int threads, std::string loop = {});

// qmvlab's own kernels that can run the matvec here, what auto weighs for it; with
// n > 1, the batch kernels (OpKind::MatVecBatch) that take n vectors per call, for a
// plain matvec (none fuses a pair). A kernel without a known build (one a test
// registers) could never be found in the store again, so auto leaves it out.
std::vector<const KernelSpec*> auto_candidates(const AutoMatvec& m, Backend backend, int n = 1);

// Whether decode meets the model's weights from memory ("cold") or from the last-level
// cache ("warm": the weights the matvecs read fit in half of it).
std::string model_cache_state(const ModelWeights& weights);

}  // namespace qmv
