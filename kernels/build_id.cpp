#include "kernels/build_id.h"

#include "kernels/registry.h"

namespace qmv {

std::string kernel_build_id(const KernelSpec& spec) {
  for (const KernelSourceBuild& s : kernel_source_builds()) {
    if (spec.source != s.source) continue;
    std::string id = s.build;
    for (const PeerBuild& p : peer_builds())
      if (p.name == spec.peer) id += "+" + p.name + "-" + p.version;
    return id;
  }
  return "unknown";
}

}  // namespace qmv
