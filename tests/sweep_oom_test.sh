#!/usr/bin/env bash
# A sweep point whose memory cannot be had (a 16 GB matrix under a 3 GB address-space
# limit) is a `failed` row naming the error, the sweep goes on to the next group, and
# it exits 1: never a crash, never a bare `qmvlab: std::bad_alloc`.
#   tests/sweep_oom_test.sh QMVLAB
set -uo pipefail
qmvlab=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/oom.toml" <<'TOML'
name = "oom"
kernels = ["f32.cpu.scalar", "bf16.cpu.scalar"]
shapes = ["65536x65536"]
threads = [1]
cache = ["warm"]
repetitions = 1
min_time = 0.001
check = false
TOML
out=$( (ulimit -v 3000000; QMV_TUNING_STORE=$work/store.csv "$qmvlab" sweep "$work/oom.toml" --out "$work/oom.csv") 2>&1)
code=$?
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }
[[ $code == 1 ]] || fail "exit $code, want 1"
grep -q "bad_alloc" <<<"$out" || fail "the error is not named"
grep -q "^qmvlab: std::bad_alloc" <<<"$out" && fail "the sweep stopped at the first failure"
rows=$(grep -c ",failed,the run of this group failed: out of memory (std::bad_alloc)" "$work/oom.csv")
[[ $rows == 2 ]] || fail "want a failed row for each of the two groups' points, got $rows"
echo "a point out of memory is a failed row and the sweep goes on: 2 rows"
