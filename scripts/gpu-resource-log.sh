#!/usr/bin/env bash
# Compiler launcher for the CUDA kernels (CMake's CUDA_COMPILER_LAUNCHER, with
# --ptxas-options=-v): runs the compile and keeps ptxas's resource report (registers,
# stack frame and spills of every kernel, per arch) in <object>.resources, where the
# ctest cuda_resources reads it. Every other line of compiler output passes through.
set -uo pipefail
object=""
previous=""
for arg in "$@"; do
  [[ $previous == "-o" ]] && object=$arg
  previous=$arg
done
log=$(mktemp)
"$@" >"$log" 2>&1
status=$?
report='^ptxas info|^ +[0-9]+ bytes stack frame'
if [[ $status -eq 0 && -n $object ]]; then
  grep -E "$report" "$log" >"$object.resources.tmp"
  mv "$object.resources.tmp" "$object.resources"
fi
grep -vE "$report" "$log" >&2
rm -f "$log"
exit "$status"
