// `auto` from measurements made here: the speeds a kernel plan's `auto` picks by, read
// from the tuning store (harness/tuning_store.h) and, for the matvecs of a model it has
// no figures for, measured first and saved there, so the next run measures nothing.
//
// A matvec (op kind, weight type, shape, threads, cache state) is covered when every
// kernel that can run it here has a usable store row. One that is not gets all its
// candidates timed together, interleaved (a figure compared with one taken on another
// day would carry that day's bandwidth): first a screening pass of one repetition each,
// then the ones within kFinalistRatio of the fastest again, three repetitions (all of
// them, where the memory's speed changed between the two passes). Timing
// stops when the budget is spent; a matvec left unmeasured takes the kernel fastest at
// the nearest measured shape of its weight type, else the static order, and the plan
// table says which.
//
// Where the weights stream from memory (CPU, cold), a kernel's figure is of the memory
// speed it met: a host whose memory runs at two speeds, minutes apart, keeps rows of
// each (harness/tuning_store.h, read_gbps), and the speed a decode will meet is not the
// one its plan was made at. So a matvec's candidates are compared at the speeds where
// every one of them has a row (a row of unknown speed, from a file written before the
// column, answers at any), and at one where most of them have a row, leaving out those
// that have none there. Where there are several speeds and the memory reads now at one
// of them (AutoPlanOptions::read_gbps_now; `decode`, `plan`, `logits` and `tune` read it
// just before they plan), the kernels are ranked at that speed: which kernel is fastest
// differs between the speeds (results/README.md, "Ranked at the speed now"), and a
// decode meets the speed of its minutes. Those within kTieAtSpeedNow of the fastest
// there tie, and the geometric mean over the speeds decides between them; the slower
// ones are out. Otherwise, by the geometric mean of each
// kernel's times over them: a kernel that ties at the slow speed and wins at the fast
// one ranks ahead. A matvec is covered where some speed has a row of every candidate,
// so the second run of a model times nothing. What auto times keeps the read loop
// timed beside it. Measuring, a matvec it would rank at the speed now is covered only
// where every candidate has a row at that speed: a kernel left out there is a kernel
// that may be fastest there, so all of the matvec's candidates are timed now, and the
// next run at that speed times nothing.
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

#include "harness/csv.h"
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
  // Seconds per repetition of the screening pass and of the finalists' three.
  double screen_min_time_s = 0.02, final_min_time_s = 0.05;
  std::function<void(const std::string&)> progress;  // one line per step, for stderr
  // The memory's read speed now, in GB/s, for a matvec whose rows hold two or more read
  // speeds: > 0, this speed; < 0, read it once when first needed (cold CPU weights, the
  // rows' read loop); 0, rank over every speed instead (the geometric mean).
  double read_gbps_now = 0;
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
  int over_speeds = 0;  // matvecs whose figures are means over two or more read speeds
  int left_out = 0;     // candidates not ranked: no row at one of their matvec's ranked speeds
  int at_speed_now = 0;  // matvecs ranked at the one stored speed the memory reads at now
  double read_gbps_now = 0;  // that speed (0: not read, or no matvec needed it)
  std::string store;   // the store's path
  std::string warning; // a damaged store, or one that could not be written ("" if neither)
  // One line for the plan's header: what was measured and where the rest came from.
  std::string summary() const;
};

// At the speed now, kernels this close to the fastest there tie: a store's figure moves
// by a few percent between runs, so a lead that small at one speed says little. Among
// the tied, the geometric mean over the speeds they all have rows at decides.
inline constexpr double kTieAtSpeedNow = 1.05;

// Of the read speeds a matvec's kernels were ranked at (each group's rows' slowest and
// fastest read, GB/s), the one `now_gbps` falls in or nearest to, within kSameReadSpeed
// of its rows; -1 where none is that near (or now_gbps is not above 0).
int group_at_speed(const std::vector<std::pair<double, double>>& group_ranges, double now_gbps);

// A fully covered matvec needs nothing timed; this ratio of the fastest screening time
// decides which candidates are timed again.
inline constexpr double kFinalistRatio = 1.25;

// The evidence `auto` needs to decide every matvec `plan` leaves to it on this
// machine, or on this GPU for the CUDA backend; with options.n > 1, every plain matvec
// that has a batch kernel taking n vectors.
AutoPlanEvidence auto_plan_evidence(const KernelPlan& plan, const ModelWeights& weights, const AutoPlanOptions& options);

// qmvlab's own kernels that can run the matvec here, what auto weighs for it; with
// n > 1, the batch kernels (OpKind::MatVecBatch) that take n vectors per call, for a
// plain matvec (none fuses a pair). A kernel without a known build (one a test
// registers) could never be found in the store again, so auto leaves it out.
std::vector<const KernelSpec*> auto_candidates(const AutoMatvec& m, Backend backend, int n = 1);

// Whether a matvec's screening pass and its finalists' pass met one speed of the memory
// (kSameReadSpeed; a pass without a read loop timed among it, warm, meets any): where
// not, `auto` times every candidate again together, so that one speed holds a row of
// each and the next run finds the matvec covered.
bool passes_met_one_speed(const std::vector<BenchRow>& screened, const std::vector<BenchRow>& finals);

// Whether decode meets the model's weights from memory ("cold") or from the last-level
// cache ("warm": the weights the matvecs read fit in half of it).
std::string model_cache_state(const ModelWeights& weights);

}  // namespace qmv
