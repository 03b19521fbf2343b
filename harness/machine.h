// Where a result was measured: the context every results row carries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/kernel.h"

namespace qmv {

struct MachineInfo {
  std::string machine;    // names results/<machine>/: machine_name() of this CPU, e.g. "intel-emeraldrapids-2c"
  std::string cpu_model;  // as the CPU names itself
  std::string uarch;      // "zen3", "emeraldrapids", ...; empty where neither our table nor libcpuinfo knows it
  std::string signature;  // "family 6 model 207 stepping 2"; empty off x86
  int cores = 0;
  std::size_t llc_bytes = 0;   // last-level cache, all instances together
  std::size_t ram_bytes = 0;
  std::string compiler;        // compiler and build type of this binary
  std::string git_commit;      // short hash, "+dirty" when the tree had changes
  std::string gpu;             // "none" or the device name with SM, driver
  std::string gpu_machine;     // names results/<gpu>/: gpu_machine_name() of the device; "" without one
  std::string gpu_arch;        // the device's compute capability, "sm_90"; "" without one
  std::string gpu_status;      // one line for people: the device, or why there is none
};

// Computed once per process.
const MachineInfo& machine_info();

// What a machine's name is made of, as detected here or recorded from another CPU, so
// that naming can be tested without that CPU.
struct CpuDescription {
  std::string vendor;         // "intel", "amd", ...; empty when unknown
  int family = 0;             // display family and model (extended fields folded in);
  int model = 0;              // family 0: no CPUID signature (not x86)
  int stepping = 0;
  std::string cpuinfo_uarch;  // libcpuinfo's name for the microarchitecture, empty when it has none
  std::string cpu_model;      // the CPU's own name: the last resort off x86
  int cores = 0;
  std::optional<std::string> isa_mask;  // the features a mask keeps, space-separated; nullopt: no mask
};

struct CpuSignature {
  int family = 0, model = 0, stepping = 0;
};
// Decodes CPUID leaf 1 EAX into display family, model and stepping.
CpuSignature decode_cpuid_signature(std::uint32_t eax);

// "family 6 model 207 stepping 2", or "" without a signature.
std::string signature_text(const CpuDescription& cpu);

// The microarchitecture: our table of x86 parts first (libcpuinfo's snapshot predates
// several), then libcpuinfo's name, else "".
std::string cpu_microarchitecture(const CpuDescription& cpu);

// <vendor>-<uarch>-<cores>c[-isa-<features>]; an unknown x86 part is
// <vendor>-fam<F>-m<M>, so two generations never share a results folder.
std::string machine_name(const CpuDescription& cpu);

// A GPU's results folder and tuning-store machine: its name lowercased, every run of
// other characters one dash ("NVIDIA H100 80GB HBM3" is "nvidia-h100-80gb-hbm3"), as
// scripts/gpu-run.sh names the folder it writes.
std::string gpu_machine_name(std::string_view device_name);

// Names machines went by before the name told CPUs apart, with the name each has now.
const std::vector<std::pair<std::string_view, std::string_view>>& former_machine_names();

// A former name, alone or with its "-isa-..." suffix, as the machine is called now;
// any other name unchanged. Wherever results of several machines are grouped or shown.
std::string canonical_machine(std::string_view name);

// The commit results rows name: $QMV_GIT_COMMIT where set (a bundle built elsewhere),
// else this source tree's HEAD, "+dirty" when tracked files outside results/ changed.
std::string source_commit();

// Replaces "{machine}" in a path with the machine slug.
std::string expand_machine(std::string path);

}  // namespace qmv
