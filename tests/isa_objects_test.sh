#!/usr/bin/env bash
# Kernel files compiled with ISA flags (those of the instruction-set folders
# kernels/cpu/<arch>/<isa>/, e.g. -mavx2, -mavx512*) must define no weak or
# unique symbols (inline library code such as std::string or std::vector members):
# the linker keeps one copy of each for the whole program, and if it keeps one built
# for AVX-512, qmvlab dies with SIGILL on CPUs without it. See KernelRecord.
# Likewise their static initialisers (the kernel registration, run at start-up on
# every CPU) must hold no AVX-512 instruction: no EVEX-encoded one (prefix 0x62).
set -euo pipefail
checked=0 bad=0
for obj in "$@"; do
  # The object's path below the target's folder: its source's, one name in several folders.
  name=${obj#*/CMakeFiles/*.dir/}
  case "$name" in kernels/cpu/*/*/*) ;; *) continue ;; esac
  checked=$((checked + 1))
  leaks=$(nm -C --defined-only "$obj" | awk '$2 ~ /^[WVuiw]$/' | grep -v 'DW.ref.__gxx_personality_v0' || true)
  case "$name" in
    kernels/cpu/x86/avx512*/*)
      evex=$(objdump -d "$obj" | awk '/^[0-9a-f]+ <_GLOBAL__sub_I/ {on = 1; next} /^[0-9a-f]+ </ {on = 0} on' |
        awk -F'\t' 'NF >= 3 && $2 ~ /^62 /' || true)
      if [ -n "$evex" ]; then
        bad=$((bad + 1))
        echo "FAIL $name runs AVX-512 instructions at start-up (make its records constexpr):"
        echo "$evex" | sed 's/^/    /'
      fi
      ;;
  esac
  if [ -n "$leaks" ]; then
    bad=$((bad + 1))
    echo "FAIL $name defines shared inline code compiled with its ISA flags:"
    echo "$leaks" | sed 's/^/    /'
  fi
done
[ "$checked" -gt 0 ] || { echo "no ISA kernel objects given"; exit 1; }
echo "isa_objects: $((checked - bad)) passed, $bad failed"
[ "$bad" -eq 0 ]
