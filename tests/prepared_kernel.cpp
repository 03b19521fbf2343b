// A test-only kernel with a weight transform. prepare() keeps the matrix's rows in
// reverse order and run() reads only that copy, so its result is right only when the
// harness hands it the prepared copy of the very matrix it multiplies. Live copies are
// counted so tests can see every prepared matrix released.
#include "tests/prepared_kernel.h"

#include <atomic>
#include <cstring>
#include <new>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/registry.h"

namespace qmv::testing {
namespace {

std::atomic<int> live{0};
std::atomic<int> made{0};

struct ReversedRows {
  Shape shape;
  std::vector<std::uint8_t> rows;
};

Status prepare_reversed(const MatVecArgs& a, PreparedWeights* out) {
  const std::size_t rb = row_bytes(WeightType::Q4_K, a.shape.cols);
  auto* r = new (std::nothrow) ReversedRows{a.shape, {}};
  if (!r) return Status::Error("out of memory");
  r->rows.resize(rb * static_cast<std::size_t>(a.shape.rows));
  const auto* w = static_cast<const std::uint8_t*>(a.w);
  for (std::int64_t i = 0; i < a.shape.rows; ++i)
    std::memcpy(r->rows.data() + rb * static_cast<std::size_t>(a.shape.rows - 1 - i), w + rb * static_cast<std::size_t>(i), rb);
  ++live;
  ++made;
  *out = {r, r->rows.size()};
  return Status::Ok();
}

void release_reversed(PreparedWeights p) {
  delete static_cast<ReversedRows*>(p.handle);
  --live;
}

Status run_reversed(const MatVecArgs& a) {
  const auto* r = static_cast<const ReversedRows*>(a.prepared);
  if (!(r->shape == a.shape)) return Status::Error("prepared copy of another shape");
  const KernelSpec* ref = global_registry().find("q4_K.cpu.scalar_f32");
  if (!ref) return Status::Error("q4_K.cpu.scalar_f32 not registered");
  std::vector<float> y(static_cast<std::size_t>(a.shape.rows));
  MatVecArgs b = a;
  b.w = r->rows.data();
  b.w_bytes = r->rows.size();
  b.prepared = nullptr;
  b.y = y.data();
  b.y_len = y.size();
  if (Status st = ref->run(b); !st.ok()) return st;
  for (std::int64_t i = 0; i < a.shape.rows; ++i) a.y[i] = y[static_cast<std::size_t>(a.shape.rows - 1 - i)];
  return Status::Ok();
}

KernelRecord reversed_record() {
  KernelRecord r = cpu_matvec_kernel(kPreparedKernel, WeightType::Q4_K, ActFormat::F32, run_reversed,
                                     "test-only kernel reading its own (row-reversed) copy of the weights");
  r.prepare = prepare_reversed;
  r.release = release_reversed;
  // It writes every output itself, after its reference call: not a call team's share.
  r.joins_call_teams = false;
  return r;
}

}  // namespace

int prepared_copies_live() { return live.load(); }
int prepared_copies_made() { return made.load(); }

}  // namespace qmv::testing

QMV_REGISTER_KERNEL(qmv::testing::reversed_record());
