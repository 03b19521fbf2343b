#!/usr/bin/env bash
# `qmvlab gate` as CI runs it: its exit status, except that a pass with a half left
# ungated (no baseline for this machine, no valgrind, kernels without a baseline row) is
# a skip naming what was not gated, and, unless only the machine's baseline is missing,
# a failure when CI=true.
# Usage: gate_ci_test.sh QMVLAB GATE-ARGS...
set -uo pipefail
source "$(dirname "$0")/skip.sh"
qmvlab=$1
shift
out=$("$qmvlab" gate "$@" 2>&1)
status=$?
printf '%s\n' "$out"
[ "$status" -eq 0 ] || exit "$status"
# A baseline is recorded per machine and CI's machine may be one no baseline was
# recorded on: its absence is a skip even in CI; any other ungated half is not.
no_baseline=$(grep -E "^no (instruction )?baseline at .*not gated" <<<"$out" | paste -sd ';' -)
ungated=$(grep -F "not gated" <<<"$out" | grep -vE "^no (instruction )?baseline at " | paste -sd ';' -)
[ -z "$ungated" ] || skip_test_unless_ci "gate passed, but not all of it ran: $ungated"
[ -z "$no_baseline" ] || skip_test "gate passed, but this machine has no baseline: $no_baseline"
