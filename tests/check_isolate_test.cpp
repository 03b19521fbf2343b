// check --isolate against kernels that fault on purpose (tests/fault_kernels*.cpp,
// registered only in qmvlab_faults): a crash, a hang and an exit each cost their own
// kernel, with the reason in its rows, while the plain check dies of the first of them.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "harness/csv.h"
#include "kernels/availability.h"
#include "kernels/registry.h"
#include "tests/cli_run.h"

namespace {

using qmv::testing::CliRun;
using qmv::testing::tmp;

CliRun faults(const std::string& args) { return qmv::testing::run_program(QMVLAB_FAULTS_EXE, args); }

const qmv::CheckRow* find_row(const std::vector<qmv::CheckRow>& rows, const std::string& kernel, std::int64_t r,
                              std::int64_t c) {
  for (const auto& row : rows)
    if (row.kernel == kernel && row.rows == r && row.cols == c) return &row;
  return nullptr;
}

TEST(CheckIsolate, EachFaultCostsOnlyItsKernel) {
  const std::string out = tmp("isolated.csv");
  const CliRun r = faults(
      "check --isolate --isolate-timeout 3 --shapes 3x256,8x512 --out " + out +
      " --kernels 'test.q4_K.crash,test.q4_K.hang,test.q4_K.exit,test.q4_K.unwritten_last,q4_K.cpu.scalar_f32,"
      "q6_K.cpu.scalar_f32'");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("check: 4 passed, 8 failed, 0 skipped"), std::string::npos) << r.output;
  const auto rows = qmv::read_check_csv(out);
  for (const char* good : {"q4_K.cpu.scalar_f32", "q6_K.cpu.scalar_f32"})
    for (auto [rows_n, cols_n] : {std::pair{3, 256}, std::pair{8, 512}}) {
      const qmv::CheckRow* row = find_row(rows, good, rows_n, cols_n);
      ASSERT_NE(row, nullptr) << good << " " << rows_n << "x" << cols_n << " has no row";
      EXPECT_TRUE(row->passed) << good << ": " << row->failure;
    }
  const std::map<std::string, std::string> first_shape_reason = {
      {"test.q4_K.crash", "its process was killed by signal 11 (SIGSEGV)"},
      {"test.q4_K.hang", "its process was still running after its 3 s limit (killed)"},
      {"test.q4_K.exit", "its process exited with status 3"}};
  for (const auto& [kernel, reason] : first_shape_reason) {
    const qmv::CheckRow* first = find_row(rows, kernel, 3, 256);
    const qmv::CheckRow* second = find_row(rows, kernel, 8, 512);
    ASSERT_TRUE(first && second) << kernel << ": a shape has no row";
    EXPECT_FALSE(first->passed || second->passed) << kernel;
    EXPECT_EQ(first->activation, "process");
    EXPECT_EQ(first->failure, reason);
    EXPECT_EQ(second->failure, "not checked: its process " + reason.substr(12) + " at 3x256");
    EXPECT_NE(r.output.find("FAIL " + kernel), std::string::npos) << r.output;
  }
  // A kernel that fails the check in its process fails as it would in one: its rows,
  // with the reason the check gave.
  for (const qmv::CheckRow& row : rows)
    if (row.kernel == "test.q4_K.unwritten_last") {
      EXPECT_NE(row.activation, "process");
      EXPECT_NE(row.failure.find("NaN"), std::string::npos) << row.failure;
    }
  std::set<std::string> kernels;
  for (const auto& row : rows) kernels.insert(row.kernel);
  EXPECT_EQ(kernels.size(), 6u);
}

TEST(CheckIsolate, WithoutItTheRunDiesOfTheCrash) {
  const CliRun r = faults("check --shapes 3x256 --kernels 'test.q4_K.crash,q4_K.cpu.scalar_f32'");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 1) << "the crash must end the process, not fail a kernel: " << r.output;
  EXPECT_EQ(r.output.find("check: "), std::string::npos) << "no summary from a dead run: " << r.output;
}

// The children check the same data as one process: the same seed gives the same rows,
// the problems a child reads from the shared cache included.
TEST(CheckIsolate, SameRowsAsOneProcess) {
  const std::string one = tmp("one-process.csv"), isolated = tmp("isolated-same.csv");
  const std::string args = "--seed 12345 --shapes 3x256,67x512,2x32 --kernels 'q4_K.cpu.scalar*,q4_K.cpu.avx2*,q8_0.cpu.*'";
  const CliRun plain = qmv::testing::qmvlab("check " + args + " --out " + one);
  const CliRun iso = qmv::testing::qmvlab("check --isolate " + args + " --out " + isolated);
  ASSERT_EQ(plain.code, 0) << plain.output;
  ASSERT_EQ(iso.code, 0) << iso.output;
  const auto a = qmv::read_check_csv(one), b = qmv::read_check_csv(isolated);
  ASSERT_EQ(a.size(), b.size());
  std::map<std::tuple<std::string, std::int64_t, std::int64_t, std::string>, const qmv::CheckRow*> by_pair;
  for (const auto& row : a) by_pair[{row.kernel, row.rows, row.cols, row.activation}] = &row;
  for (const auto& row : b) {
    const auto it = by_pair.find({row.kernel, row.rows, row.cols, row.activation});
    ASSERT_NE(it, by_pair.end()) << row.kernel << " " << row.rows << "x" << row.cols << " " << row.activation;
    EXPECT_EQ(row.passed, it->second->passed) << row.kernel;
    EXPECT_EQ(row.failure, it->second->failure) << row.kernel;
    EXPECT_NEAR(row.nmse_kernel, it->second->nmse_kernel, 1e-6 * it->second->nmse_kernel + 1e-30) << row.kernel;
    EXPECT_NEAR(row.nmse_e2e, it->second->nmse_e2e, 1e-6 * it->second->nmse_e2e + 1e-30) << row.kernel;
  }
}

TEST(CheckIsolate, NoFaultKernelInQmvlab) {
  const CliRun r = qmv::testing::qmvlab("list");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("test.q4_K."), std::string::npos) << r.output;
}

// On a device: the trap loses its process's CUDA context; isolated, the kernel checked
// after it still passes every shape; in one process it is not run.
TEST(CheckIsolate, CudaFaultCostsOnlyItsKernel) {
  const qmv::KernelSpec* good = qmv::global_registry().find("q4_K.cuda.coalesced_f32");
  if (!good) GTEST_SKIP() << "no CUDA device: built without CUDA";
  if (const auto av = qmv::availability(*good); !av.available) GTEST_SKIP() << "no CUDA device: " << av.reason;
  const std::string args = " --shapes 8x256,67x512 --kernels 'test.q4_K.cuda.trap,q4_K.cuda.coalesced_f32'";
  const CliRun plain = faults("check" + args);
  EXPECT_EQ(plain.code, 1) << plain.output;
  EXPECT_NE(plain.output.find("NOT RUN q4_K.cuda.coalesced_f32"), std::string::npos) << plain.output;
  const std::string out = tmp("isolated-cuda.csv");
  const CliRun iso = faults("check --isolate" + args + " --out " + out);
  EXPECT_EQ(iso.code, 1) << iso.output;
  EXPECT_NE(iso.output.find("check: 2 passed, 2 failed, 0 skipped"), std::string::npos) << iso.output;
  const auto rows = qmv::read_check_csv(out);
  const qmv::CheckRow* trapped = find_row(rows, "test.q4_K.cuda.trap", 8, 256);
  const qmv::CheckRow* after = find_row(rows, "test.q4_K.cuda.trap", 67, 512);
  ASSERT_TRUE(trapped && after) << iso.output;
  EXPECT_NE(trapped->failure.find("kernel returned an error"), std::string::npos) << trapped->failure;
  EXPECT_EQ(after->failure, "not checked: its process lost its CUDA context to an earlier fault");
}

TEST(CheckIsolate, TimeoutNeedsIsolate) {
  qmv::testing::expect_error("check --kernels q4_K.cpu.scalar_f32 --isolate-timeout 5", "--isolate-timeout");
  qmv::testing::expect_error("check --kernels q4_K.cpu.scalar_f32 --isolate --isolate-timeout 0", "--isolate-timeout");
}

}  // namespace
