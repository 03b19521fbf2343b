#include <fmt/format.h>

#include "harness/cli/cli.h"
#include "kernels/registry.h"

int main(int argc, char** argv) {
  // A broken registry (two variants with one name) would make every result
  // ambiguous: refuse to start.
  if (!qmv::registry_startup_errors().empty()) {
    for (const auto& e : qmv::registry_startup_errors()) fmt::print(stderr, "qmvlab: {}\n", e);
    return 2;
  }
  return qmv::run_cli(argc, argv);
}
