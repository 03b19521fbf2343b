// The test-only kernel with a weight transform (tests/prepared_kernel.cpp).
#pragma once

namespace qmv::testing {

inline constexpr const char* kPreparedKernel = "test.q4_K.prepared_reversed";
// Prepared copies alive now, and made since the process started.
int prepared_copies_live();
int prepared_copies_made();

}  // namespace qmv::testing
