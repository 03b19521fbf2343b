// The batch kernels' dispatch on the count of activation vectors a call brings: the
// count is a template argument of their loops, so each count keeps its sums in
// registers, and a call's n picks the instantiation. The CPU and CUDA batch kernels
// share it; each says in its own words why a count is refused.
#pragma once

#include <type_traits>

#include "kernels/kernel.h"

namespace qmv {

// The most vectors a batch kernel's call takes.
inline constexpr int kMaxBatchVectors = 8;

// run(std::integral_constant<int, n>{}) for n in 1..kMaxBatchVectors; refuse(n) for any
// other n.
template <class Run, class Refuse>
Status dispatch_vector_count(int n, Run&& run, Refuse&& refuse) {
  static_assert(kMaxBatchVectors == 8, "one case per count below");
  switch (n) {
    case 1: return run(std::integral_constant<int, 1>{});
    case 2: return run(std::integral_constant<int, 2>{});
    case 3: return run(std::integral_constant<int, 3>{});
    case 4: return run(std::integral_constant<int, 4>{});
    case 5: return run(std::integral_constant<int, 5>{});
    case 6: return run(std::integral_constant<int, 6>{});
    case 7: return run(std::integral_constant<int, 7>{});
    case 8: return run(std::integral_constant<int, 8>{});
  }
  return refuse(n);
}

}  // namespace qmv
