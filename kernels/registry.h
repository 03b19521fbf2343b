// The process-wide kernel registry: every variant file adds its KernelSpec during
// static initialisation; everything else queries it here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernel.h"

namespace qmv {

class Registry {
 public:
  // Refuses a duplicate name or an incomplete spec (no run, no supports, empty name).
  Status add(KernelSpec spec);
  const std::vector<KernelSpec>& all() const { return specs_; }
  const KernelSpec* find(std::string_view name) const;
  // Kernels whose name matches any of the comma-separated shell globs and none of the
  // exclusions among them ("!glob"), in name order. Exclusions alone select every other
  // kernel: "!*.ggml.*" is all but the peer's.
  std::vector<const KernelSpec*> select(std::string_view globs) const;
  // The exclusions among `globs` that match no registered kernel (unmatched_exclusions).
  std::vector<std::string> unmatched_exclusions(std::string_view globs) const;

 private:
  std::vector<KernelSpec> specs_;
};

Registry& global_registry();
// Problems met while registering (duplicate names...): main() refuses to start on any.
const std::vector<std::string>& registry_startup_errors();

// The peers whose kernels are built in (e.g. "ggml"), each with its version; a peer's
// plugin records itself once, during static initialisation.
struct PeerBuild {
  std::string name, version;
};
bool register_peer(const char* name, const char* version);
const std::vector<PeerBuild>& peer_builds();

// The weight type's scalar CPU kernel on f32 activations (`<type>.cpu.scalar_f32`,
// `<type>.cpu.scalar` for float weights): the reference others are measured against.
const KernelSpec* scalar_reference(WeightType w);

// True when `name` is selected by the comma-separated shell globs, as Registry::select
// reads them (exclusions included).
bool glob_match_any(std::string_view globs, std::string_view name);

// The exclusions ("!glob") among `globs` that match none of `names`: a misspelt
// exclusion would otherwise leave in what it meant to take out.
std::vector<std::string> unmatched_exclusions(std::string_view globs, const std::vector<std::string>& names);

}  // namespace qmv
