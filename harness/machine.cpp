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

std::string slug(const std::string& s) {
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
  return out.empty() ? "unknown-cpu" : out;
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

MachineInfo detect() {
  MachineInfo m;
  cpuinfo_initialize();
  if (const cpuinfo_package* pkg = cpuinfo_get_package(0)) m.cpu_model = pkg->name;
  if (m.cpu_model.empty()) m.cpu_model = "unknown CPU";
  m.cores = static_cast<int>(cpuinfo_get_cores_count());
  if (m.cores <= 0) m.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  for (std::uint32_t i = 0; i < cpuinfo_get_l3_caches_count(); ++i)
    m.llc_bytes += cpuinfo_get_l3_cache(i)->size;
  if (m.llc_bytes == 0)
    for (std::uint32_t i = 0; i < cpuinfo_get_l2_caches_count(); ++i)
      m.llc_bytes += cpuinfo_get_l2_cache(i)->size;
  m.ram_bytes = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) *
                static_cast<std::size_t>(sysconf(_SC_PAGE_SIZE));
  m.machine = fmt::format("{}-{}c", slug(m.cpu_model), m.cores);
  // A masked run is another machine's stand-in: its results go to a folder of their own.
  if (cpu_features_masked()) {
    std::string isa = cpu_feature_names(cpu_feature_mask());
    for (char& c : isa) c = c == ' ' ? '-' : c;
    m.machine += "-isa-" + (isa.empty() ? std::string("none") : isa);
  }
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
  } else {
    m.gpu_status = "CUDA: " + dev.why_absent + "; GPU kernels are skipped";
  }
#else
  m.gpu_status = "CUDA: not built (QMV_CUDA=OFF)";
#endif
  return m;
}

}  // namespace

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
