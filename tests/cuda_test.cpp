// The device path of the harness: poisoning, run_on_host_buffers for CUDA kernels
// (uploads, true device sizes, the weight cache, copy-back), and the check running
// CUDA kernels. The kernels here are test-only stand-ins that need no CUDA code of
// their own: one computes on the host from the device buffers (so the whole path is
// exercised against the reference), others leave rows unwritten or fault.
// Tests that need a device skip with "no CUDA device ..." where there is none.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "harness/check.h"
#include "harness/csv.h"
#include "harness/data.h"
#include "harness/execute.h"
#include "kernels/availability.h"
#include "kernels/registry.h"
#include "tests/cli_run.h"
#include "tests/test_seed.h"
#ifdef QMV_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_device.h"
#endif

namespace qmv {
namespace {

using testing::fresh_seed;

// What the device check selects (TheDeviceCheckSelectsEveryCudaKernel: every CUDA kernel).
constexpr const char* kEveryCudaKernel = "*.cuda.*";

KernelSpec cuda_spec(const char* name, Status (*run)(const MatVecArgs&)) {
  KernelSpec k;
  k.name = name;
  k.weight = WeightType::Q4_K;
  k.act = ActFormat::F32;
  k.backend = Backend::CUDA;
  k.shape_rule = kSuperBlockColsRule;
  k.supports = supports_superblock_cols;
  k.run = run;
  return k;
}

int undersized_calls = 0;
Status count_calls(const MatVecArgs&) {
  ++undersized_calls;
  return Status::Ok();
}

// Runs everywhere: the host buffers are judged before any device is looked for.
TEST(CudaExecute, UndersizedBufferIsRefusedBeforeAnyLaunch) {
  const KernelSpec k = cuda_spec("q4_K.cuda.test_counter", count_calls);
  const Shape s{67, 512};
  const auto w = random_quantized_matrix(WeightType::Q4_K, s, fresh_seed("undersized"));
  const auto x = gaussian_vector(s.cols, 3);
  std::vector<float> y(static_cast<std::size_t>(s.rows));
  HostCall call;
  call.shape = s;
  call.w = w.data();
  call.w_bytes = w.size() - 1;  // one byte short
  call.x = x.data();
  call.x_bytes = x.size() * sizeof(float);
  call.y = y.data();
  Status st = run_on_host_buffers(k, call);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.error.find("q4_K.cuda.test_counter"), std::string::npos) << st.error;
  EXPECT_NE(st.error.find("weights hold"), std::string::npos) << st.error;
  call.w_bytes = w.size();
  call.x_bytes = x.size() * sizeof(float) - 4;  // one value short
  st = run_on_host_buffers(k, call);
  EXPECT_NE(st.error.find("activation holds"), std::string::npos) << st.error;
  EXPECT_EQ(undersized_calls, 0) << "the kernel ran on an undersized buffer";
}

#ifdef QMV_HAVE_CUDA

// Runs everywhere: the bulk-copy kernels' shape rule (a Q6_K matrix of whole 16-byte
// units) and their 16-byte weight alignment are judged before any device is looked for.
TEST(CudaExecute, BulkCopyKernelsRefuseShapesAndWeightsTheirCopiesCannotTake) {
  for (const char* name : {"q4_K.cuda.tma_dp4a_q8_1", "q6_K.cuda.tma_dp4a_q8_1"}) {
    SCOPED_TRACE(name);
    const KernelSpec* k = global_registry().find(name);
    ASSERT_NE(k, nullptr);
    alignas(16) static std::uint8_t bytes[64 * 1024];
    std::vector<float> y(64);
    MatVecArgs a;
    a.x = bytes;
    a.x_bytes = sizeof bytes;
    a.y = y.data();
    a.y_len = y.size();
    if (k->weight == WeightType::Q6_K) {
      a.shape = {1, 256};  // 210 bytes: no multiple of 16
      a.w = bytes;
      a.w_bytes = sizeof bytes;
      const Status st = invoke(*k, a);
      EXPECT_NE(st.error.find("not supported"), std::string::npos) << st.error;
      EXPECT_NE(st.error.find("% 8"), std::string::npos) << st.error;
    }
    a.shape = {8, 256};
    a.w = bytes + 2;  // 2-aligned: the row code's loads could, the copies cannot
    a.w_bytes = sizeof bytes - 2;
    const Status st = invoke(*k, a);
    EXPECT_NE(st.error.find("16-byte aligned"), std::string::npos) << st.error;
  }
}

const KernelSpec& host_reference() {
  const KernelSpec* k = global_registry().find("q4_K.cpu.scalar_f32");
  if (!k) std::abort();
  return *k;
}

std::vector<std::uint8_t> to_host(const void* device, std::size_t bytes) {
  std::vector<std::uint8_t> h(bytes);
  if (cudaMemcpy(h.data(), device, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) h.clear();
  return h;
}

// How many output rows the host-computed stand-in writes back (all, or all but one).
int rows_left_unwritten = 0;
const void* last_device_weights = nullptr;

// q4_K.cpu.scalar_f32 on host copies of the device buffers, the result written to the
// device output on the call's stream.
Status host_computed(const MatVecArgs& a) {
  last_device_weights = a.w;
  const auto w = to_host(a.w, a.w_bytes);
  const auto x = to_host(a.x, a.x_bytes);
  if (w.size() != a.w_bytes || x.size() != a.x_bytes) return Status::Error("test: copy to host failed");
  std::vector<float> y(static_cast<std::size_t>(a.shape.rows));
  MatVecArgs h = a;
  h.w = w.data();
  h.x = x.data();
  h.y = y.data();
  h.y_len = y.size();
  h.threads = 1;
  h.stream = nullptr;
  if (auto st = invoke(host_reference(), h); !st.ok()) return st;
  const std::size_t written = static_cast<std::size_t>(a.shape.rows - rows_left_unwritten);
  if (cudaMemcpyAsync(a.y, y.data(), written * sizeof(float), cudaMemcpyHostToDevice,
                      static_cast<cudaStream_t>(a.stream)) != cudaSuccess ||
      cudaStreamSynchronize(static_cast<cudaStream_t>(a.stream)) != cudaSuccess)
    return Status::Error("test: copy to device failed");
  return Status::Ok();
}

Status writes_nothing(const MatVecArgs&) { return Status::Ok(); }

// Writes a megabyte at device address 0x100, which nothing maps: an asynchronous fault.
Status faults(const MatVecArgs& a) {
  const std::string err = cuda::poison_device_floats(reinterpret_cast<float*>(0x100), 1 << 20, a.stream);
  return err.empty() ? Status::Ok() : Status::Error(err);
}

#define SKIP_WITHOUT_DEVICE()                                             \
  do {                                                                    \
    const cuda::DeviceInfo& dev = cuda::current_device();                 \
    if (!dev.present) GTEST_SKIP() << dev.why_absent;                     \
  } while (0)

TEST(Cuda, PoisonFillsDeviceMemoryWithNan) {
  SKIP_WITHOUT_DEVICE();
  const cuda::DeviceInfo& dev = cuda::current_device();
  std::printf("CUDA device: %s sm_%d, %d SMs\n", dev.name.c_str(), dev.sm, dev.sm_count);
  const std::size_t n = 100003;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, n * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cuda::poison_device_floats(d, n), "");
  std::vector<float> h(n);
  ASSERT_EQ(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isnan(h[i])) << i;
  EXPECT_NE(cuda::poison_device_floats(nullptr, 5), "");
}

// The check runs CUDA kernels like CPU ones, on the awkward shapes too: the stand-in
// computing on the host passes; leaving one row (or every row) unwritten fails on the
// NaN poison.
TEST(Cuda, CheckRunsCudaKernelsAndCatchesUnwrittenRows) {
  SKIP_WITHOUT_DEVICE();
  const KernelSpec good = cuda_spec("q4_K.cuda.test_host_computed", host_computed);
  const KernelSpec idle = cuda_spec("q4_K.cuda.test_writes_nothing", writes_nothing);
  const std::vector<Shape> shapes = {{1, 256}, {3, 4096}, {67, 512}, {130, 14336}};
  CheckConfig cfg;
  cfg.seed = fresh_seed("cuda check");
  rows_left_unwritten = 0;
  for (const auto& r : run_check({&good}, shapes, cfg)) {
    EXPECT_TRUE(r.skipped.empty()) << r.skipped;
    ASSERT_EQ(r.cases.size(), 2u);
    EXPECT_TRUE(r.passed()) << to_string(r.shape) << ": " << r.cases[0].failure << r.cases[1].failure;
  }
  rows_left_unwritten = 1;
  for (const auto& r : run_check({&good}, shapes, cfg)) {
    EXPECT_FALSE(r.passed()) << to_string(r.shape) << ": a row left unwritten passed";
    for (const auto& c : r.cases) EXPECT_NE(c.failure.find("NaN"), std::string::npos) << c.failure;
  }
  rows_left_unwritten = 0;
  for (const auto& r : run_check({&idle}, shapes, cfg)) EXPECT_FALSE(r.passed()) << to_string(r.shape);
}

// A vocabulary-sized matrix: more rows than the grid-stride kernels launch warps for
// (halfwarp_dp4a caps its grid at a few waves of resident blocks), so their row loops wrap,
// and tma_dp4a's CTAs refill each stage of their ring many times over.
TEST(Cuda, GridStrideKernelsPassOnAVocabularySizedMatrix) {
  std::vector<const KernelSpec*> kernels;
  for (const char* name : {"q4_K.cuda.halfwarp_dp4a_q8_1", "q4_K.cuda.quarterwarp_dp4a_q8_1", "q4_K.cuda.tma_dp4a_q8_1",
                           "q6_K.cuda.halfwarp_dp4a_q8_1", "q6_K.cuda.quarterwarp_dp4a_q8_1", "q6_K.cuda.tma_dp4a_q8_1",
                           "q6_K.cuda.dp4a_q8_1", "q4_K.cuda.warpx3_f32"}) {
    // A renamed or removed kernel fails here, device or not, rather than dropping out.
    kernels.push_back(global_registry().find(name));
    ASSERT_NE(kernels.back(), nullptr) << name << ": no such kernel";
  }
  SKIP_WITHOUT_DEVICE();
  CheckConfig cfg;
  cfg.seed = fresh_seed("grid stride");
  int passed = 0;
  for (const auto& r : run_check(kernels, {{128256, 4096}}, cfg)) {
    EXPECT_TRUE(r.skipped.empty()) << r.spec->name << ": " << r.skipped;
    EXPECT_TRUE(r.passed()) << r.spec->name << ": " << (r.cases.empty() ? "" : r.cases[0].failure);
    passed += r.passed();
  }
  EXPECT_EQ(passed, static_cast<int>(kernels.size()));
}

// Weights are uploaded once per matrix and reused, but never stale: the same bytes keep
// their device copy; the same host buffer rewritten in place is uploaded again.
TEST(Cuda, WeightCacheReusesUploadsButNeverServesStaleBytes) {
  SKIP_WITHOUT_DEVICE();
  const KernelSpec k = cuda_spec("q4_K.cuda.test_host_computed", host_computed);
  const std::uint64_t seed = fresh_seed("weight cache");
  const Shape s{130, 4096};
  auto w = random_quantized_matrix(WeightType::Q4_K, s, seed);
  const auto x = gaussian_vector(s.cols, seed + 1);
  std::vector<float> y(static_cast<std::size_t>(s.rows)), expected(y.size());
  HostCall call;
  call.shape = s;
  call.w = w.data();
  call.w_bytes = w.size();
  call.x = x.data();
  call.x_bytes = x.size() * sizeof(float);
  call.y = y.data();
  auto reference = [&] {
    MatVecArgs h;
    h.shape = s;
    h.w = w.data();
    h.w_bytes = w.size();
    h.x = x.data();
    h.x_bytes = call.x_bytes;
    h.y = expected.data();
    h.y_len = expected.size();
    ASSERT_TRUE(invoke(host_reference(), h).ok());
  };
  rows_left_unwritten = 0;
  ASSERT_TRUE(run_on_host_buffers(k, call).ok());
  const void* first = last_device_weights;
  ASSERT_TRUE(run_on_host_buffers(k, call).ok());
  EXPECT_EQ(last_device_weights, first) << "the same weights were not served from their upload";
  reference();
  EXPECT_EQ(y, expected);
  // Same pointer, same size, new contents.
  const auto other = random_quantized_matrix(WeightType::Q4_K, s, seed + 7);
  std::copy(other.begin(), other.end(), w.begin());
  ASSERT_TRUE(run_on_host_buffers(k, call).ok());
  reference();
  EXPECT_EQ(y, expected) << "stale device weights were used after the host buffer changed";
}

// In a child process: a faulting kernel, then a good one. Exits 0 when the fault was
// named after the faulting kernel and the next call was refused naming it too.
[[noreturn]] void fault_then_call_again() {
  const KernelSpec bad = cuda_spec("q4_K.cuda.test_faults", faults);
  const KernelSpec good = cuda_spec("q4_K.cuda.test_writes_nothing", writes_nothing);
  const Shape s{3, 256};
  const auto w = random_quantized_matrix(WeightType::Q4_K, s, 5);
  const auto x = gaussian_vector(s.cols, 6);
  std::vector<float> y(3);
  HostCall call;
  call.shape = s;
  call.w = w.data();
  call.w_bytes = w.size();
  call.x = x.data();
  call.x_bytes = x.size() * sizeof(float);
  call.y = y.data();
  const Status first = run_on_host_buffers(bad, call);
  const Status second = run_on_host_buffers(good, call);
  std::fprintf(stderr, "first: %s\nsecond: %s\n", first.error.c_str(), second.error.c_str());
  const bool named = first.error.rfind("q4_K.cuda.test_faults: failed on the device", 0) == 0;
  const bool refused =
      second.error.find("not run: the CUDA context was lost after q4_K.cuda.test_faults") != std::string::npos;
  std::exit(named && refused ? 0 : 1);
}

// In a child process: the check of a faulting kernel and a good one on two shapes. Exits
// 0 when the faulting kernel failed, and every pair after its fault was reported as not
// run (naming it) rather than as a failure of its own.
[[noreturn]] void check_after_a_fault() {
  const KernelSpec bad = cuda_spec("q4_K.cuda.test_faults", faults);
  const KernelSpec good = cuda_spec("q4_K.cuda.test_host_computed", host_computed);
  CheckConfig cfg;
  cfg.seed = 11;
  int failed = 0, not_run = 0, other = 0;
  for (const auto& r : run_check({&bad, &good}, {{3, 256}, {8, 512}}, cfg)) {
    const bool names_culprit = r.not_run.find("q4_K.cuda.test_faults") != std::string::npos;
    if (r.spec == &bad && r.shape == Shape{3, 256} && !r.passed() && r.not_run.empty() && !r.cases.empty())
      ++failed;
    else if (names_culprit && r.cases.empty() && !r.passed())
      ++not_run;
    else
      ++other;
    std::fprintf(stderr, "%s %s: not_run '%s', %zu cases\n", r.spec->name.c_str(), to_string(r.shape).c_str(),
                 r.not_run.c_str(), r.cases.size());
  }
  std::exit(failed == 1 && not_run == 3 && other == 0 ? 0 : 1);
}

// After a fault, the check does not blame the kernels it can no longer run: it reports
// them as not run, so a fresh process can check them.
TEST(CudaDeathTest, CheckReportsPairsAfterAFaultAsNotRun) {
  SKIP_WITHOUT_DEVICE();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(check_after_a_fault(), ::testing::ExitedWithCode(0), "");
}

// A fault inside a kernel surfaces at the synchronize, named after the kernel; later
// calls are refused naming it rather than failing under their own names. In a child
// process (re-executed, so it starts with a fresh CUDA context): the fault leaves its
// process's context unusable.
TEST(CudaDeathTest, AsynchronousFaultIsNamedAfterTheKernel) {
  SKIP_WITHOUT_DEVICE();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(fault_then_call_again(), ::testing::ExitedWithCode(0), "");
}

// The check, as `qmvlab check` runs it, over every CUDA kernel on its default shapes:
// each one checked (a shape it does not take aside) and passed. Kernels this device
// cannot run are named in the skip.
TEST(CudaDevice, CheckPassesForEveryCudaKernel) {
  SKIP_WITHOUT_DEVICE();
  const auto kernels = global_registry().select(kEveryCudaKernel);
  ASSERT_FALSE(kernels.empty());
  const std::string out = testing::tmp("cuda-check-every-kernel.csv");
  const testing::CliRun r = testing::qmvlab(std::string("check --kernels '") + kEveryCudaKernel + "' --out " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  std::map<std::string, int> passed_cases;
  for (const CheckRow& row : read_check_csv(out)) {
    if (row.activation == "skipped") {
      // A shape the kernel does not take; or a kernel this device cannot run, named below.
      const KernelSpec* k = global_registry().find(row.kernel);
      const bool unavailable = k != nullptr && !availability(*k).available;
      EXPECT_TRUE(unavailable || row.failure.find("shape not supported") != std::string::npos)
          << row.kernel << ": " << row.failure;
      continue;
    }
    EXPECT_TRUE(row.passed) << row.kernel << " " << row.rows << "x" << row.cols << " " << row.activation << ": "
                            << row.failure;
    passed_cases[row.kernel] += row.passed;
  }
  std::string not_run;
  for (const KernelSpec* k : kernels) {
    if (const Availability av = availability(*k); !av.available) {
      not_run += (not_run.empty() ? "" : ", ") + k->name + " (" + av.reason + ")";
      continue;
    }
    EXPECT_GT(passed_cases[k->name], 0) << k->name << ": no case of it passed the check";
  }
  if (!not_run.empty()) GTEST_SKIP() << "not checked on this device: " << not_run;
}

#else

TEST(Cuda, PoisonFillsDeviceMemoryWithNan) { GTEST_SKIP() << "no CUDA device: built with QMV_CUDA=OFF"; }
TEST(CudaDevice, CheckPassesForEveryCudaKernel) { GTEST_SKIP() << "no CUDA device: built with QMV_CUDA=OFF"; }

#endif

// The device check above selects every registered CUDA kernel, and nothing else: a new
// kernel cannot go unchecked on a device for a name the selection misses.
TEST(Cuda, TheDeviceCheckSelectsEveryCudaKernel) {
  std::set<std::string> registered, selected;
  for (const KernelSpec& k : global_registry().all())
    if (k.backend == Backend::CUDA) registered.insert(k.name);
  for (const KernelSpec* k : global_registry().select(kEveryCudaKernel)) selected.insert(k->name);
  EXPECT_EQ(selected, registered);
  if (registered.empty()) GTEST_SKIP() << "built without CUDA: no CUDA kernel registered to compare";
}

}  // namespace
}  // namespace qmv
