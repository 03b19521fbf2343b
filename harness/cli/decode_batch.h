// `qmvlab decode --batch B`: B sequences that start from one prompt, each sampled with
// a seed of its own (the sampler's seed + b), decoded together by BatchCpuForward, each
// step one batch matvec per weight matrix (model/batch_forward.h). Reports the tokens/s
// of all the sequences together and of each, and the share of the roofline: a step
// reads the weights once for every sequence, and each sequence's KV cache.
#pragma once

#include <string>
#include <vector>

#include "harness/auto_plan.h"
#include "model/config.h"
#include "model/plan.h"
#include "model/sampler.h"
#include "model/tokenizer.h"

namespace qmv {

struct BatchDecodeRequest {
  const LoadedModel* model = nullptr;
  const Tokenizer* tokenizer = nullptr;
  std::vector<int> prompt;
  int tokens = 0;  // to generate per sequence
  int batch = 1;
  int threads = 1;
  int context = 0;
  std::vector<PlannedMatvec> plan;  // batch_plan's
  std::string plan_rules;           // KernelPlan::describe, as given
  // What auto's figures came from: the one-vector plan's, then the batch kernels'
  // (none with a bench CSV).
  std::vector<AutoPlanEvidence> tuning;
  SamplerConfig sampler;
  bool ignore_eos = false;
  bool quiet = false;
  double roofline_gbps = 0;  // 0: no roofline
  std::string roofline_source;
  std::string json_out;  // "": none
  std::string command;   // the command line, for the JSON
};

// Runs it, prints the report; returns the exit status.
int run_batch_decode(const BatchDecodeRequest& r);

}  // namespace qmv
