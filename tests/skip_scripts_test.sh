#!/usr/bin/env bash
# skip.sh and gate_ci_test.sh on stand-ins: a skip exits 77 with its SKIP: line, one CI
# can fix exits 1 when CI=true; a gate that passed with a half ungated is such a skip
# (a machine without a recorded baseline only a skip),
# a gate that failed keeps its exit status, a fully gated pass passes.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
expect() {  # expect STATUS TEXT -- COMMAND...
  local want=$1 text=$2
  shift 3
  local out status
  out=$("$@" 2>&1)
  status=$?
  if [ "$status" -ne "$want" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL: $* gave $status (want $want) and: $out (want: $text)"
    fails=$((fails + 1))
  fi
}
expect 77 "SKIP: no widget" -- env -u CI bash "$here/skip.sh" "no widget"
expect 77 "SKIP: no widget" -- env CI=true bash "$here/skip.sh" "no widget"
expect 77 "SKIP: no tool" -- env -u CI bash "$here/skip.sh" --unless-ci "no tool"
expect 1 "FAIL: not tested, and CI=true requires it: no tool" -- env CI=true bash "$here/skip.sh" --unless-ci "no tool"

# A stand-in qmvlab: `gate` prints $GATE_SAYS and exits $GATE_EXIT.
printf '#!/usr/bin/env bash\necho "$GATE_SAYS"\nexit "$GATE_EXIT"\n' >"$work/qmvlab"
chmod +x "$work/qmvlab"
no_baseline="no baseline at results/m/gate-baseline.csv: speed not gated (record one with --update-baseline)"
expect 77 "SKIP: gate passed, but this machine has no baseline: $no_baseline" -- \
  env -u CI GATE_SAYS="$no_baseline" GATE_EXIT=0 bash "$here/gate_ci_test.sh" "$work/qmvlab" ci.toml
expect 77 "SKIP: gate passed, but this machine has no baseline: $no_baseline" -- \
  env CI=true GATE_SAYS="$no_baseline" GATE_EXIT=0 bash "$here/gate_ci_test.sh" "$work/qmvlab" ci.toml
ungated="valgrind not found: instructions per weight byte not gated (install valgrind)"
expect 77 "SKIP: gate passed, but not all of it ran: $ungated" -- \
  env -u CI GATE_SAYS="$ungated" GATE_EXIT=0 bash "$here/gate_ci_test.sh" "$work/qmvlab" ci.toml
expect 1 "FAIL: not tested, and CI=true requires it: gate passed" -- \
  env CI=true GATE_SAYS="$ungated"$'\n'"$no_baseline" GATE_EXIT=0 bash "$here/gate_ci_test.sh" "$work/qmvlab" ci.toml
expect 1 "FAIL speed" -- env -u CI GATE_SAYS="FAIL speed; $ungated" GATE_EXIT=1 bash "$here/gate_ci_test.sh" "$work/qmvlab" ci.toml
expect 0 "gate: all gated" -- env CI=true GATE_SAYS="gate: all gated" GATE_EXIT=0 bash "$here/gate_ci_test.sh" "$work/qmvlab" ci.toml
[ "$fails" -eq 0 ] && echo "skip scripts: skips, CI failures and the gate's ungated halves as expected"
