#!/usr/bin/env bash
# scripts/install-peers.sh refuses what it cannot build before it fetches or builds
# anything: an unknown --isa or argument, or --isa cuda without nvcc, is one line on stderr and exit 2; --help
# prints the usage and exits 0.
set -uo pipefail
script="$(dirname "$0")/../scripts/install-peers.sh"
failures=0

expect() {  # expect NAME WANT_RC WANT_TEXT ARGS...
  local name=$1 want_rc=$2 want_text=$3
  shift 3
  local out rc
  out=$(env -u QMV_PEERS bash "$script" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL $name: exit $rc, want $want_rc; output: $out"
    failures=$((failures + 1))
  elif ! grep -qF -- "$want_text" <<<"$out"; then
    echo "FAIL $name: output lacks '$want_text': $out"
    failures=$((failures + 1))
  elif [ "$want_rc" -ne 0 ] && [ "$(wc -l <<<"$out")" -ne 1 ]; then
    echo "FAIL $name: want one line, got: $out"
    failures=$((failures + 1))
  else
    echo "ok $name"
  fi
}

expect unknown-isa 2 "unknown --isa 'sse9'" --isa sse9
expect unknown-isa-equals 2 "unknown --isa 'avx1024'" --isa=avx1024
expect empty-isa 2 "unknown --isa ''" --isa
expect unknown-argument 2 "unknown argument '--fast'" --fast
expect help 0 "--isa avx2" --help
CUDACXX=/nonexistent/nvcc expect cuda-without-nvcc 2 "--isa cuda needs nvcc" --isa cuda
[ "$failures" -eq 0 ]
