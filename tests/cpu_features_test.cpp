// The ISA mask: `--cpu-features` / QMV_CPU_FEATURES make qmvlab behave as on a CPU with
// only the features named, so an AVX-512 machine can stand in for an AVX2-only one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>

#include "kernels/activation_quantizers.h"
#include "kernels/availability.h"
#include "kernels/cpu_features.h"
#include "kernels/formats/formats.h"
#include "kernels/registry.h"
#include "tests/cli_run.h"

namespace qmv {
namespace {

using testing::CliRun;
using testing::count_lines;
using testing::expect_error;
using testing::qmvlab;

constexpr std::uint32_t kAvx2Only = CpuFeature::AVX2 | CpuFeature::FMA | CpuFeature::F16C;

// Sets the process's mask for one test and puts the previous one back.
class ScopedMask {
 public:
  explicit ScopedMask(std::uint32_t allowed) : previous_(cpu_feature_mask()) { set_cpu_feature_mask(allowed); }
  ~ScopedMask() { set_cpu_feature_mask(previous_); }

 private:
  std::uint32_t previous_;
};

TEST(CpuFeatureMask, ParsesNamesAndRefusesUnknownOnes) {
  EXPECT_EQ(parse_cpu_features("avx2,fma,f16c"), kAvx2Only);
  EXPECT_EQ(parse_cpu_features(" avx512f , avx512vnni "), CpuFeature::AVX512F | CpuFeature::AVX512VNNI);
  EXPECT_EQ(parse_cpu_features(""), 0u);
  try {
    (void)parse_cpu_features("avx2,sse9");
    FAIL() << "sse9 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'sse9'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("avx512vnni"), std::string::npos) << e.what();
  }
}

TEST(CpuFeatureMask, AKernelNeedingAMaskedFeatureIsUnavailableAndSaysWhy) {
  int checked = 0;
  for (const KernelSpec& k : global_registry().all()) {
    if (k.backend != Backend::CPU) continue;
    const bool runs_unmasked = availability(k).available;
    ScopedMask mask(kAvx2Only);
    const Availability av = availability(k);
    // Under the mask a kernel runs exactly when it ran before and needs nothing beyond it.
    EXPECT_EQ(av.available, runs_unmasked && (k.cpu_features & ~kAvx2Only) == 0) << k.name;
    if (runs_unmasked && !av.available) {
      EXPECT_NE(av.reason.find("masked out by --cpu-features"), std::string::npos) << k.name << ": " << av.reason;
      ++checked;
    }
  }
  // On a CPU without AVX-512 nothing is masked away; the rest of the test still holds.
  if (missing_cpu_features(CpuFeature::AVX512F | CpuFeature::AVX512VNNI) == 0) {
    EXPECT_GT(checked, 0);
  }
  EXPECT_FALSE(cpu_features_masked());
}

// The activation quantizers sit below the kernels and follow the mask too.
TEST(CpuFeatureMask, TheActivationQuantizersFollowIt) {
  const QuantizerIsa unmasked = active_quantizer_isa();
  {
    ScopedMask mask(kAvx2Only);
    EXPECT_EQ(active_quantizer_isa(), unmasked == QuantizerIsa::Scalar ? QuantizerIsa::Scalar : QuantizerIsa::AVX2);
  }
  {
    ScopedMask mask(static_cast<std::uint32_t>(CpuFeature::F16C));
    EXPECT_EQ(active_quantizer_isa(), QuantizerIsa::Scalar);
  }
  EXPECT_EQ(active_quantizer_isa(), unmasked);
}

TEST(CpuFeatureMask, TheCommandLineAndTheEnvironmentSetItAndNameTheResultsFolder) {
  const CliRun plain = qmvlab("list --machine");
  ASSERT_EQ(plain.code, 0) << plain.output;
  const std::string machine = plain.output.substr(0, plain.output.find('\n'));
  EXPECT_EQ(machine.find("-isa-"), std::string::npos) << machine;
  for (const char* args : {"--cpu-features avx2,fma,f16c list --machine", "list --cpu-features=avx2,fma,f16c --machine"}) {
    const CliRun r = qmvlab(args);
    ASSERT_EQ(r.code, 0) << args << ": " << r.output;
    EXPECT_EQ(r.output, machine + "-isa-avx2-fma-f16c\n") << args;
  }
  ::setenv(kCpuFeaturesEnv, "avx2", 1);
  const CliRun env = qmvlab("list --machine");
  const CliRun overridden = qmvlab("list --cpu-features avx2,fma --machine");
  ::unsetenv(kCpuFeaturesEnv);
  EXPECT_EQ(env.output, machine + "-isa-avx2\n");
  EXPECT_EQ(overridden.output, machine + "-isa-avx2-fma\n");
  expect_error("check --cpu-features avx2,avx9 --kernels q4_K.cpu.scalar_f32 --shapes 1x256", "'avx9'");
}

TEST(CpuFeatureMask, CheckSkipsWhatTheMaskLeavesOutAndRunsTheRest) {
  const CliRun r = qmvlab("check --cpu-features avx2,fma,f16c --kernels 'q4_K.cpu.*' --shapes 3x256");
  ASSERT_EQ(r.code, 0) << r.output;
  const bool has_avx512 = missing_cpu_features(CpuFeature::AVX512F | CpuFeature::AVX512BW | CpuFeature::AVX512VL |
                                               CpuFeature::AVX512VNNI) == 0;
  const bool has_avx2 = missing_cpu_features(kAvx2Only) == 0;
  // Under this mask every avx512vnni Q4_K kernel is skipped on any CPU; the scalar
  // kernels run, and the AVX2 ones where the CPU has AVX2.
  const int avx512_kernels = static_cast<int>(global_registry().select("q4_K.cpu.avx512vnni*").size());
  ASSERT_GE(avx512_kernels, 3);
  EXPECT_EQ(count_lines(r.output, "SKIP q4_K.cpu.avx512vnni"), avx512_kernels) << r.output;
  if (has_avx512) {
    EXPECT_EQ(count_lines(r.output, "masked out by --cpu-features"), avx512_kernels) << r.output;
  }
  EXPECT_EQ(count_lines(r.output, "PASS q4_K.cpu.scalar"), 3) << r.output;  // f32, q8k, batch_f32
  const int avx2_kernels = static_cast<int>(global_registry().select("q4_K.cpu.avx2*").size());
  ASSERT_GE(avx2_kernels, 2);
  EXPECT_EQ(count_lines(r.output, "PASS q4_K.cpu.avx2"), has_avx2 ? avx2_kernels : 0) << r.output;
}

}  // namespace
}  // namespace qmv
