#include "harness/machine.h"

#include <cpuinfo.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "kernels/cpu_features.h"
#ifdef QMV_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

namespace qmv {
namespace {

std::string slug(const std::string& s, const char* if_empty) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  // "(R)" and "(TM)" leave single letters behind; drop them.
  for (const char* junk : {"-r-", "-tm-"}) {
    for (auto pos = out.find(junk); pos != std::string::npos; pos = out.find(junk))
      out.replace(pos, std::string(junk).size(), "-");
  }
  return out.empty() ? if_empty : out;
}

std::string run_git(const char* args) {
  const std::string cmd = fmt::format("git -C '{}' {} 2>/dev/null", QMV_SOURCE_DIR, args);
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::array<char, 256> buf{};
    while (fgets(buf.data(), buf.size(), p)) out += buf.data();
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string vendor_name(cpuinfo_vendor v) {
  switch (v) {
    case cpuinfo_vendor_intel: return "intel";
    case cpuinfo_vendor_amd: return "amd";
    case cpuinfo_vendor_hygon: return "hygon";
    case cpuinfo_vendor_via: return "via";
    case cpuinfo_vendor_arm: return "arm";
    case cpuinfo_vendor_apple: return "apple";
    case cpuinfo_vendor_qualcomm: return "qualcomm";
    case cpuinfo_vendor_samsung: return "samsung";
    case cpuinfo_vendor_nvidia: return "nvidia";
    case cpuinfo_vendor_cavium: return "cavium";
    case cpuinfo_vendor_huawei: return "huawei";
    default: return "";
  }
}

// libcpuinfo's microarchitectures, for the parts our table leaves to it.
std::string uarch_name(cpuinfo_uarch u) {
  switch (u) {
    case cpuinfo_uarch_nehalem: return "nehalem";
    case cpuinfo_uarch_sandy_bridge: return "sandybridge";
    case cpuinfo_uarch_ivy_bridge: return "ivybridge";
    case cpuinfo_uarch_haswell: return "haswell";
    case cpuinfo_uarch_broadwell: return "broadwell";
    case cpuinfo_uarch_sky_lake: return "skylake";
    case cpuinfo_uarch_palm_cove: return "cannonlake";
    case cpuinfo_uarch_sunny_cove: return "icelake";
    case cpuinfo_uarch_silvermont: return "silvermont";
    case cpuinfo_uarch_airmont: return "airmont";
    case cpuinfo_uarch_goldmont: return "goldmont";
    case cpuinfo_uarch_goldmont_plus: return "goldmontplus";
    case cpuinfo_uarch_knights_landing: return "knightslanding";
    case cpuinfo_uarch_knights_mill: return "knightsmill";
    case cpuinfo_uarch_bulldozer: return "bulldozer";
    case cpuinfo_uarch_piledriver: return "piledriver";
    case cpuinfo_uarch_steamroller: return "steamroller";
    case cpuinfo_uarch_excavator: return "excavator";
    case cpuinfo_uarch_jaguar: return "jaguar";
    case cpuinfo_uarch_puma: return "puma";
    case cpuinfo_uarch_zen: return "zen";
    case cpuinfo_uarch_zen2: return "zen2";
    case cpuinfo_uarch_zen3: return "zen3";
    case cpuinfo_uarch_dhyana: return "dhyana";
    case cpuinfo_uarch_cortex_a72: return "cortexa72";
    case cpuinfo_uarch_cortex_a76: return "cortexa76";
    case cpuinfo_uarch_neoverse_n1: return "neoversen1";
    case cpuinfo_uarch_neoverse_v1: return "neoversev1";
    case cpuinfo_uarch_neoverse_n2: return "neoversen2";
    case cpuinfo_uarch_firestorm: return "firestorm";
    default: return "";
  }
}

CpuDescription describe_this_cpu(int cores) {
  CpuDescription cpu;
  if (const cpuinfo_package* pkg = cpuinfo_get_package(0)) cpu.cpu_model = pkg->name;
  if (const cpuinfo_core* core = cpuinfo_get_core(0)) {
    cpu.vendor = vendor_name(core->vendor);
    cpu.cpuinfo_uarch = uarch_name(core->uarch);
#if CPUINFO_ARCH_X86 || CPUINFO_ARCH_X86_64
    if (core->cpuid != 0) {
      const CpuSignature s = decode_cpuid_signature(core->cpuid);
      cpu.family = s.family, cpu.model = s.model, cpu.stepping = s.stepping;
    }
#endif
  }
  cpu.cores = cores;
  if (cpu_features_masked()) cpu.isa_mask = cpu_feature_names(cpu_feature_mask());
  return cpu;
}

MachineInfo detect() {
  MachineInfo m;
  cpuinfo_initialize();
  m.cores = static_cast<int>(cpuinfo_get_cores_count());
  if (m.cores <= 0) m.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const CpuDescription cpu = describe_this_cpu(m.cores);
  m.cpu_model = cpu.cpu_model.empty() ? "unknown CPU" : cpu.cpu_model;
  m.uarch = cpu_microarchitecture(cpu);
  m.signature = signature_text(cpu);
  m.machine = machine_name(cpu);
  for (std::uint32_t i = 0; i < cpuinfo_get_l3_caches_count(); ++i)
    m.llc_bytes += cpuinfo_get_l3_cache(i)->size;
  if (m.llc_bytes == 0)
    for (std::uint32_t i = 0; i < cpuinfo_get_l2_caches_count(); ++i)
      m.llc_bytes += cpuinfo_get_l2_cache(i)->size;
  m.ram_bytes = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) *
                static_cast<std::size_t>(sysconf(_SC_PAGE_SIZE));
#if defined(__clang__)
  m.compiler = fmt::format("clang {} {}", __clang_version__, QMV_BUILD_TYPE);
#elif defined(__GNUC__)
  m.compiler = fmt::format("gcc {} {}", __VERSION__, QMV_BUILD_TYPE);
#else
  m.compiler = "unknown";
#endif
  m.git_commit = source_commit();
  m.gpu = "none";
#ifdef QMV_HAVE_CUDA
  const cuda::DeviceInfo& dev = cuda::current_device();
  if (dev.present) {
    m.gpu = fmt::format("{} sm_{} {}SMs driver {}", dev.name, dev.sm, dev.sm_count,
                        cuda::version_text(dev.driver_version));
    m.gpu_status = "CUDA: " + m.gpu;
    m.gpu_machine = gpu_machine_name(dev.name);
    m.gpu_arch = fmt::format("sm_{}", dev.sm);
  } else {
    m.gpu_status = "CUDA: " + dev.why_absent + "; GPU kernels are skipped";
  }
#else
  m.gpu_status = "CUDA: not built (QMV_CUDA=OFF)";
#endif
  return m;
}

}  // namespace

CpuSignature decode_cpuid_signature(std::uint32_t eax) {
  const int base_family = static_cast<int>((eax >> 8) & 0xF);
  const int base_model = static_cast<int>((eax >> 4) & 0xF);
  CpuSignature s;
  s.stepping = static_cast<int>(eax & 0xF);
  // The extended family counts only on family 15, the extended model on 6 and 15.
  s.family = base_family == 0xF ? base_family + static_cast<int>((eax >> 20) & 0xFF) : base_family;
  s.model = base_family == 0x6 || base_family == 0xF ? base_model | static_cast<int>(((eax >> 16) & 0xF) << 4)
                                                       : base_model;
  return s;
}

std::string signature_text(const CpuDescription& cpu) {
  if (cpu.family == 0) return "";
  return fmt::format("family {} model {} stepping {}", cpu.family, cpu.model, cpu.stepping);
}

namespace {

struct X86Part {
  const char* vendor;
  int family, model_lo, model_hi, stepping_lo, stepping_hi;
  const char* uarch;
};
// Server and desktop parts since Haswell and Zen. Intel's from Linux's
// arch/x86/include/asm/intel-family.h, where steppings of model 0x55 tell Skylake-SP,
// Cascade Lake and Cooper Lake apart; AMD's model ranges per family from Linux's
// arch/x86/kernel/cpu/amd.c (Zen generations). Part names, not core names, since a
// part is what a results folder describes: Cascade Lake has Skylake's cores, and
// Emerald Rapids Sapphire Rapids'.
constexpr X86Part kX86Parts[] = {
    {"intel", 6, 0x3C, 0x3C, 0, 15, "haswell"},
    {"intel", 6, 0x3F, 0x3F, 0, 15, "haswell"},
    {"intel", 6, 0x45, 0x46, 0, 15, "haswell"},
    {"intel", 6, 0x3D, 0x3D, 0, 15, "broadwell"},
    {"intel", 6, 0x47, 0x47, 0, 15, "broadwell"},
    {"intel", 6, 0x4F, 0x4F, 0, 15, "broadwell"},
    {"intel", 6, 0x56, 0x56, 0, 15, "broadwell"},
    {"intel", 6, 0x4E, 0x4E, 0, 15, "skylake"},
    {"intel", 6, 0x5E, 0x5E, 0, 15, "skylake"},
    {"intel", 6, 0x55, 0x55, 0, 4, "skylake"},
    {"intel", 6, 0x55, 0x55, 5, 7, "cascadelake"},
    {"intel", 6, 0x55, 0x55, 10, 11, "cooperlake"},
    // Kaby Lake's models also carry Coffee, Whiskey and Amber Lake: the same cores.
    {"intel", 6, 0x8E, 0x8E, 0, 15, "kabylake"},
    {"intel", 6, 0x9E, 0x9E, 0, 15, "kabylake"},
    {"intel", 6, 0xA5, 0xA6, 0, 15, "cometlake"},
    {"intel", 6, 0x66, 0x66, 0, 15, "cannonlake"},
    {"intel", 6, 0x6A, 0x6A, 0, 15, "icelake"},
    {"intel", 6, 0x6C, 0x6C, 0, 15, "icelake"},
    {"intel", 6, 0x7D, 0x7E, 0, 15, "icelake"},
    {"intel", 6, 0xA7, 0xA7, 0, 15, "rocketlake"},
    {"intel", 6, 0x8C, 0x8D, 0, 15, "tigerlake"},
    {"intel", 6, 0x8F, 0x8F, 0, 15, "sapphirerapids"},
    {"intel", 6, 0xCF, 0xCF, 0, 15, "emeraldrapids"},
    {"intel", 6, 0xAD, 0xAE, 0, 15, "graniterapids"},
    {"intel", 6, 0xAF, 0xAF, 0, 15, "sierraforest"},
    {"intel", 6, 0xDD, 0xDD, 0, 15, "clearwaterforest"},
    {"intel", 6, 0x97, 0x97, 0, 15, "alderlake"},
    {"intel", 6, 0x9A, 0x9A, 0, 15, "alderlake"},
    {"intel", 6, 0xB7, 0xB7, 0, 15, "raptorlake"},
    {"intel", 6, 0xBA, 0xBA, 0, 15, "raptorlake"},
    {"intel", 6, 0xBF, 0xBF, 0, 15, "raptorlake"},
    {"intel", 6, 0xAA, 0xAA, 0, 15, "meteorlake"},
    {"intel", 6, 0xAC, 0xAC, 0, 15, "meteorlake"},
    {"intel", 6, 0xB5, 0xB5, 0, 15, "arrowlake"},
    {"intel", 6, 0xC5, 0xC6, 0, 15, "arrowlake"},
    {"intel", 6, 0xBD, 0xBD, 0, 15, "lunarlake"},
    {"intel", 19, 0x01, 0x01, 0, 15, "diamondrapids"},
    {"amd", 0x17, 0x00, 0x2F, 0, 15, "zen"},
    {"amd", 0x17, 0x50, 0x5F, 0, 15, "zen"},
    {"amd", 0x17, 0x30, 0x4F, 0, 15, "zen2"},
    {"amd", 0x17, 0x60, 0x7F, 0, 15, "zen2"},
    {"amd", 0x17, 0x90, 0x91, 0, 15, "zen2"},
    {"amd", 0x17, 0xA0, 0xAF, 0, 15, "zen2"},
    // Zen 3 and Zen 4 share a family: only the model range tells the AVX2-only part
    // from the AVX-512 one.
    {"amd", 0x19, 0x00, 0x0F, 0, 15, "zen3"},
    {"amd", 0x19, 0x20, 0x5F, 0, 15, "zen3"},
    {"amd", 0x19, 0x10, 0x1F, 0, 15, "zen4"},
    {"amd", 0x19, 0x60, 0xAF, 0, 15, "zen4"},
    {"amd", 0x1A, 0x00, 0x2F, 0, 15, "zen5"},
    {"amd", 0x1A, 0x40, 0x4F, 0, 15, "zen5"},
    {"amd", 0x1A, 0x60, 0x7F, 0, 15, "zen5"},
    {"amd", 0x1A, 0x50, 0x5F, 0, 15, "zen6"},
    {"amd", 0x1A, 0x80, 0xAF, 0, 15, "zen6"},
    {"amd", 0x1A, 0xC0, 0xCF, 0, 15, "zen6"},
};

struct PartLookup {
  const char* uarch = nullptr;
  bool model_known = false;  // the table has the model, perhaps not this stepping
};

PartLookup look_up_part(const CpuDescription& cpu) {
  PartLookup found;
  if (cpu.family == 0) return found;
  for (const X86Part& p : kX86Parts) {
    if (cpu.vendor != p.vendor || cpu.family != p.family || cpu.model < p.model_lo || cpu.model > p.model_hi)
      continue;
    found.model_known = true;
    if (cpu.stepping >= p.stepping_lo && cpu.stepping <= p.stepping_hi) {
      found.uarch = p.uarch;
      return found;
    }
  }
  return found;
}

}  // namespace

std::string cpu_microarchitecture(const CpuDescription& cpu) {
  const PartLookup part = look_up_part(cpu);
  if (part.uarch) return part.uarch;
  // A model the table splits by stepping: libcpuinfo would name every stepping alike.
  if (part.model_known) return "";
  return slug(cpu.cpuinfo_uarch, "");
}

std::string machine_name(const CpuDescription& cpu) {
  const std::string vendor = slug(cpu.vendor, "unknown");
  std::string name;
  if (const std::string uarch = cpu_microarchitecture(cpu); !uarch.empty()) {
    name = vendor + "-" + uarch;
  } else if (cpu.family != 0) {
    name = fmt::format("{}-fam{}-m{}", vendor, cpu.family, cpu.model);
    if (look_up_part(cpu).model_known) name += fmt::format("-s{}", cpu.stepping);
  } else {
    name = slug(cpu.cpu_model, "unknown-cpu");
  }
  name += fmt::format("-{}c", cpu.cores);
  // A masked run is another machine's stand-in: its results go to a folder of their own.
  if (cpu.isa_mask) {
    std::string isa = *cpu.isa_mask;
    for (char& c : isa) c = c == ' ' ? '-' : c;
    name += "-isa-" + (isa.empty() ? std::string("none") : isa);
  }
  return name;
}

std::string gpu_machine_name(std::string_view device_name) {
  std::string slug;
  for (const char c : device_name) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) && u < 0x80)
      slug += static_cast<char>(std::tolower(u));
    else if (!slug.empty() && slug.back() != '-')
      slug += '-';
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "unknown-gpu" : slug;
}

const std::vector<std::pair<std::string_view, std::string_view>>& former_machine_names() {
  // Committed rows keep the name they were measured under; scripts/machines.py has the
  // same table for the Python side.
  static const std::vector<std::pair<std::string_view, std::string_view>> names = {
      {"amd-epyc-2c", "amd-zen3-2c"},
  };
  return names;
}

std::string canonical_machine(std::string_view name) {
  constexpr std::string_view kIsa = "-isa-";
  for (const auto& [former, now] : former_machine_names()) {
    if (name.substr(0, former.size()) != former) continue;
    const std::string_view rest = name.substr(former.size());
    if (rest.empty() || rest.substr(0, kIsa.size()) == kIsa) return std::string(now) + std::string(rest);
  }
  return std::string(name);
}

std::string source_commit() {
  // A binary run away from its source tree (scripts/gpu-run.sh's bundle on a GPU machine)
  // is told the commit it was built from: that machine's checkout, if any, is not it.
  if (const char* built = std::getenv("QMV_GIT_COMMIT"); built && *built) return built;
  std::string commit = run_git("rev-parse --short=12 HEAD");
  if (commit.empty()) return "unknown";
  // results/ is what this program writes; rewriting it does not change the code.
  if (!run_git("status --porcelain --untracked-files=no -- . ':!results'").empty()) commit += "+dirty";
  return commit;
}

const MachineInfo& machine_info() {
  static const MachineInfo info = detect();
  return info;
}

std::string expand_machine(std::string path) {
  const std::string key = "{machine}";
  for (auto pos = path.find(key); pos != std::string::npos; pos = path.find(key))
    path.replace(pos, key.size(), machine_info().machine);
  return path;
}

}  // namespace qmv
