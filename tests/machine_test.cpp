// The context results rows carry (harness/machine.h): the commit (a bundle run away from
// its source tree names the one it was built from, through QMV_GIT_COMMIT); the machine's
// name, from recorded CPUs, so that two CPU generations never share a results folder;
// former names resolving to the names machines have now.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/machine.h"
#include "tests/scoped_env.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

bool is_tree_commit(const std::string& c) {
  if (c == "unknown") return true;  // built outside a git checkout
  std::string hash = c;
  if (hash.size() > 6 && hash.compare(hash.size() - 6, 6, "+dirty") == 0) hash.resize(hash.size() - 6);
  if (hash.size() != 12) return false;
  for (char ch : hash)
    if (!std::isxdigit(static_cast<unsigned char>(ch))) return false;
  return true;
}

TEST(SourceCommit, TheBundlesCommitWinsOverTheTreesWhereSet) {
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  const std::string built = "b" + std::to_string(rng()) + "+dirty";
  const testing::ScopedEnv env({{"QMV_GIT_COMMIT", built}});
  EXPECT_EQ(source_commit(), built);
}

TEST(SourceCommit, WithoutItTheTreesOwnHash) {
  std::string tree;
  {
    const testing::ScopedEnv env({{"QMV_GIT_COMMIT", std::nullopt}});
    tree = source_commit();
  }
  EXPECT_TRUE(is_tree_commit(tree)) << tree;
  const testing::ScopedEnv empty({{"QMV_GIT_COMMIT", std::string()}});  // set but empty: as if unset
  EXPECT_EQ(source_commit(), tree);
}

// CPUID leaf 1 EAX as the parts report it: Milan (Zen 3), Genoa (Zen 4), Cascade Lake,
// Emerald Rapids.
TEST(CpuSignature, DisplayFamilyAndModelFoldInTheExtendedFields) {
  struct Case {
    std::uint32_t eax;
    int family, model, stepping;
  };
  for (const Case& c : {Case{0x00A00F11, 25, 1, 1}, Case{0x00A10F11, 25, 17, 1}, Case{0x00050657, 6, 85, 7},
                        Case{0x000C06F2, 6, 207, 2},
                        // Below family 6 the extended model field does not count.
                        Case{0x00010543, 5, 4, 3}}) {
    const CpuSignature s = decode_cpuid_signature(c.eax);
    EXPECT_EQ(s.family, c.family) << std::hex << c.eax;
    EXPECT_EQ(s.model, c.model) << std::hex << c.eax;
    EXPECT_EQ(s.stepping, c.stepping) << std::hex << c.eax;
  }
}

// A CPU as recorded: its CPUID signature, libcpuinfo's microarchitecture and its own name.
CpuDescription recorded(const char* vendor, std::uint32_t eax, const char* cpuinfo_uarch, const char* model_name) {
  CpuDescription cpu;
  cpu.vendor = vendor;
  const CpuSignature s = decode_cpuid_signature(eax);
  cpu.family = s.family, cpu.model = s.model, cpu.stepping = s.stepping;
  cpu.cpuinfo_uarch = cpuinfo_uarch;
  cpu.cpu_model = model_name;
  cpu.cores = 2;
  return cpu;
}

// The same from display family, model and stepping.
CpuDescription x86(const char* vendor, int family, int model, int stepping, const char* cpuinfo_uarch) {
  CpuDescription cpu;
  cpu.vendor = vendor;
  cpu.family = family, cpu.model = model, cpu.stepping = stepping;
  cpu.cpuinfo_uarch = cpuinfo_uarch;
  cpu.cpu_model = vendor[0] == 'a' ? "AMD EPYC" : "Intel Xeon";
  cpu.cores = 2;
  return cpu;
}

// Recorded CPUs, with what this Debian's libcpuinfo (a 2022 snapshot) says of each: it
// knows Milan, calls Cascade Lake "skylake", and knows neither Zen 4 nor the Rapids.
TEST(MachineName, RecordedCpusByVendorMicroarchitectureAndCores) {
  const std::vector<std::pair<CpuDescription, std::string>> cases = {
      {recorded("amd", 0x00A00F11, "zen3", "AMD EPYC 7B13"), "amd-zen3-2c"},
      {recorded("amd", 0x00A10F11, "", "AMD EPYC 9B14"), "amd-zen4-2c"},
      {recorded("intel", 0x00050657, "skylake", "Intel(R) Xeon(R) Platinum 8259CL"), "intel-cascadelake-2c"},
      {x86("intel", 6, 85, 4, "skylake"), "intel-skylake-2c"},
      {x86("intel", 6, 85, 11, "skylake"), "intel-cooperlake-2c"},
      {x86("intel", 6, 143, 8, ""), "intel-sapphirerapids-2c"},
      {recorded("intel", 0x000C06F2, "", "Intel(R) Xeon(R) Processor"), "intel-emeraldrapids-2c"},
      {x86("intel", 6, 173, 1, ""), "intel-graniterapids-2c"},
      {x86("intel", 6, 106, 6, "icelake"), "intel-icelake-2c"},
      {x86("intel", 6, 63, 2, "haswell"), "intel-haswell-2c"},
      {x86("intel", 6, 79, 1, "broadwell"), "intel-broadwell-2c"},
      {x86("amd", 0x17, 0x31, 0, "zen2"), "amd-zen2-2c"},
      {x86("amd", 0x1A, 0x02, 0, ""), "amd-zen5-2c"},
  };
  std::set<std::string> names;
  for (const auto& [cpu, want] : cases) {
    EXPECT_EQ(machine_name(cpu), want) << signature_text(cpu);
    names.insert(machine_name(cpu));
  }
  EXPECT_EQ(names.size(), cases.size()) << "two CPUs share a name";
}

TEST(MachineName, OurTableOverridesLibcpuinfoAndTheModelStringNeverNamesAnX86Part) {
  // A Zen 4 that an older table would call Zen 3, and a Cascade Lake it calls Skylake.
  EXPECT_EQ(machine_name(x86("amd", 25, 17, 1, "zen3")), "amd-zen4-2c");
  EXPECT_EQ(cpu_microarchitecture(x86("intel", 6, 85, 7, "skylake")), "cascadelake");
  // Both EPYCs call themselves "AMD EPYC": the name no longer comes from that.
  CpuDescription zen3 = x86("amd", 25, 1, 1, "zen3"), zen4 = x86("amd", 25, 17, 1, "");
  zen3.cpu_model = zen4.cpu_model = "AMD EPYC";
  EXPECT_NE(machine_name(zen3), machine_name(zen4));
  CpuDescription cores = zen3;
  cores.cores = 16;
  EXPECT_EQ(machine_name(cores), "amd-zen3-16c");
}

TEST(MachineName, UnknownPartsFallBackToLibcpuinfoThenToFamilyAndModel) {
  // Not in our table, known to libcpuinfo.
  EXPECT_EQ(machine_name(x86("intel", 6, 0x2D, 7, "sandybridge")), "intel-sandybridge-2c");
  // Known to neither: family and model keep generations apart.
  EXPECT_EQ(machine_name(x86("intel", 6, 0xFE, 0, "")), "intel-fam6-m254-2c");
  EXPECT_EQ(machine_name(x86("amd", 0x1A, 0xF0, 0, "")), "amd-fam26-m240-2c");
  EXPECT_EQ(cpu_microarchitecture(x86("amd", 0x1A, 0xF0, 0, "")), "");
  // A stepping of model 0x55 outside the known ones: libcpuinfo's "skylake" would pool it
  // with Skylake-SP, so the stepping goes into the name.
  EXPECT_EQ(machine_name(x86("intel", 6, 85, 9, "skylake")), "intel-fam6-m85-s9-2c");
  // Off x86 there is no signature: libcpuinfo's name, else the CPU's own.
  CpuDescription arm;
  arm.vendor = "arm", arm.cpuinfo_uarch = "neoversen1", arm.cpu_model = "Neoverse N1", arm.cores = 4;
  EXPECT_EQ(machine_name(arm), "arm-neoversen1-4c");
  EXPECT_EQ(signature_text(arm), "");
  arm.cpuinfo_uarch.clear();
  EXPECT_EQ(machine_name(arm), "neoverse-n1-4c");
}

TEST(MachineName, AnIsaMaskGetsAFolderOfItsOwn) {
  CpuDescription cpu = x86("intel", 6, 207, 2, "");
  EXPECT_EQ(machine_name(cpu), "intel-emeraldrapids-2c");
  cpu.isa_mask = "avx2 fma f16c";
  EXPECT_EQ(machine_name(cpu), "intel-emeraldrapids-2c-isa-avx2-fma-f16c");
  cpu.isa_mask = "";
  EXPECT_EQ(machine_name(cpu), "intel-emeraldrapids-2c-isa-none");
}

TEST(MachineName, SignatureText) {
  EXPECT_EQ(signature_text(recorded("intel", 0x000C06F2, "", "")), "family 6 model 207 stepping 2");
  EXPECT_EQ(signature_text(recorded("amd", 0x00A10F11, "", "")), "family 25 model 17 stepping 1");
}

// This CPU: the signature is the one the kernel reports, and the name is made from it.
TEST(MachineName, ThisMachinesSignatureIsTheKernels) {
  const MachineInfo& m = machine_info();
  std::ifstream in("/proc/cpuinfo");
  std::map<std::string, std::string> fields;
  for (std::string line; std::getline(in, line) && !line.empty();) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
    fields[key] = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
  }
  if (!fields.count("cpu family") || !fields.count("model") || !fields.count("stepping"))
    GTEST_SKIP() << "no x86 signature in /proc/cpuinfo";
  EXPECT_EQ(m.signature,
            "family " + fields["cpu family"] + " model " + fields["model"] + " stepping " + fields["stepping"]);
  const std::string base = m.machine.substr(0, m.machine.find("-isa-"));
  EXPECT_TRUE(std::regex_match(base, std::regex("[a-z]+-([a-z0-9]+|fam[0-9]+-m[0-9]+(-s[0-9]+)?)-[0-9]+c"))) << base;
  if (!m.uarch.empty()) {
    EXPECT_NE(base.find("-" + m.uarch + "-"), std::string::npos) << base << " " << m.uarch;
  }
}

TEST(GpuMachineName, TheDeviceNameAsTheGpuScriptSpellsItsFolder) {
  // The folders the GPU runs wrote (scripts/gpu-run.sh's gpu_name) from the names the
  // devices give.
  EXPECT_EQ(gpu_machine_name("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3");
  EXPECT_EQ(gpu_machine_name("NVIDIA H200"), "nvidia-h200");
  EXPECT_EQ(gpu_machine_name("  NVIDIA GeForce RTX 4090 (rev. a1) "), "nvidia-geforce-rtx-4090-rev-a1");
  EXPECT_EQ(gpu_machine_name("NVIDIA A100-SXM4-80GB"), "nvidia-a100-sxm4-80gb");
  EXPECT_EQ(gpu_machine_name("\xc3\xa9"), "unknown-gpu");
  EXPECT_EQ(gpu_machine_name(""), "unknown-gpu");
}

TEST(CanonicalMachine, FormerNamesResolveWithTheirMaskAndOthersStay) {
  EXPECT_EQ(canonical_machine("amd-epyc-2c"), "amd-zen3-2c");
  EXPECT_EQ(canonical_machine("amd-epyc-2c-isa-avx2-fma-f16c"), "amd-zen3-2c-isa-avx2-fma-f16c");
  for (const char* other : {"amd-zen3-2c", "amd-zen4-2c", "amd-epyc-16c", "amd-epyc-2cx", "intel-xeon-2c",
                            "intel-xeon-2c-isa-avx2-fma-f16c", "nvidia-h100-80gb-hbm3", ""})
    EXPECT_EQ(canonical_machine(other), other);
  for (const auto& [former, now] : former_machine_names()) {
    EXPECT_EQ(canonical_machine(former), now);
    EXPECT_EQ(canonical_machine(now), now) << "a current name must not be a former one";
  }
}

// scripts/machines.py keeps the Python side's copy of the table: the same pairs.
TEST(CanonicalMachine, ThePythonTableIsTheSame) {
  std::ifstream in(std::string(QMV_SOURCE_DIR) + "/scripts/machines.py");
  ASSERT_TRUE(in) << "scripts/machines.py";
  std::stringstream text;
  text << in.rdbuf();
  const std::string src = text.str();
  const auto start = src.find("FORMER_MACHINES = {");
  ASSERT_NE(start, std::string::npos);
  const std::string table = src.substr(start, src.find('}', start) - start);
  std::set<std::pair<std::string, std::string>> python, cpp;
  const std::regex pair_re("\"([^\"]+)\"\\s*:\\s*\"([^\"]+)\"");
  for (std::sregex_iterator it(table.begin(), table.end(), pair_re), end; it != end; ++it)
    python.insert({(*it)[1], (*it)[2]});
  for (const auto& [former, now] : former_machine_names()) cpp.insert({std::string(former), std::string(now)});
  EXPECT_EQ(python, cpp);
}

}  // namespace
}  // namespace qmv
