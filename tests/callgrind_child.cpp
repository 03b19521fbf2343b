// The process the instruction-gate test runs under callgrind: qmvlab's own child
// cannot see the test-only kernels (the deliberately slowed one among them).
#include <cstdio>
#include <exception>

#include "harness/instructions.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s kernel@RxC[,kernel@RxC...]\n", argv[0]);
    return 2;
  }
  try {
    qmv::run_instrumented_calls(qmv::parse_points(argv[1]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
