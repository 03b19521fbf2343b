#!/usr/bin/env bash
# scripts/gpu-run.sh on a machine without a GPU: it must fail loudly, never pass by
# skipping. Without nvidia-smi the probe stops in one line; with a stand-in nvidia-smi
# (a GPU that CUDA cannot reach) the list and check steps run and fail as having
# found no CUDA kernel to run, and an old driver is refused by the probe.
#   tests/gpu_run_script_test.sh QMVLAB QMV_TESTS
set -uo pipefail
qmvlab=$1 tests=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: a GPU is visible here; this test is for machines without one"
  exit 0
fi

mkdir -p "$work/bundle/bin" "$work/bundle/lib" "$work/fake"
ln -s "$qmvlab" "$work/bundle/bin/qmvlab"
ln -s "$tests" "$work/bundle/bin/qmv_tests"
printf 'glibc 2.17\ndriver 580\n' >"$work/bundle/requires"
export QMV_GPU_BUNDLE=$work/bundle QMV_GPU_RESULTS=$work/results
run() { OUT= "$root/scripts/gpu-run.sh" device "$@" >"$work/log" 2>&1; echo $?; }

# 1. No nvidia-smi at all: the probe refuses before any step.
code=$(PATH=/usr/bin:/bin run list check)
[[ $code == 1 ]] || fail "no GPU: exit $code, want 1: $(cat "$work/log")"
grep -q "no CUDA device: nvidia-smi finds no GPU" "$work/log" || fail "no GPU: no one-line reason: $(cat "$work/log")"
grep -q "== list" "$work/log" && fail "no GPU: steps ran after the probe failed"

# 2. A GPU that nvidia-smi names but CUDA cannot use: list and check run, find no
#    kernel to run, and the script fails naming both.
cat >"$work/fake/nvidia-smi" <<'SMI'
#!/usr/bin/env bash
case "$*" in
  *--query-gpu=driver_version*) echo "${FAKE_DRIVER:-580.10}" ;;
  *--query-gpu=name,*) printf 'name, driver_version\nFake GPU, %s\n' "${FAKE_DRIVER:-580.10}" ;;
  *--query-gpu=name*) echo "Fake GPU" ;;
  *) exit 9 ;;
esac
SMI
chmod +x "$work/fake/nvidia-smi"
code=$(PATH=$work/fake:$PATH run list check)
[[ $code == 1 ]] || fail "unusable GPU: exit $code, want 1: $(cat "$work/log")"
grep -q "FAILED: .*list (no CUDA kernel is available on this device)" "$work/log" ||
  fail "unusable GPU: list not failed: $(tail -5 "$work/log")"
grep -qE "check \(exit [12]\)" "$work/log" || fail "unusable GPU: check not failed: $(tail -5 "$work/log")"
[[ -s $work/results/check.log && -s $work/results/list.log ]] || fail "step logs not written as the steps ended"

# The peak step wants the read peak measured, not the line saying it was not.
code=$(PATH=$work/fake:$PATH run peak)
[[ $code == 1 ]] || fail "unusable GPU: peak: exit $code, want 1"
grep -q "peak (the GPU read peak was not measured)" "$work/log" || fail "unusable GPU: peak not failed: $(tail -5 "$work/log")"

# 3. A driver older than the bundle's CUDA runtime needs: one line, nothing runs.
code=$(FAKE_DRIVER=535.54 PATH=$work/fake:$PATH run list)
[[ $code == 1 ]] || fail "old driver: exit $code, want 1"
grep -q "needs driver >= 580, this machine has 535" "$work/log" || fail "old driver: no reason: $(cat "$work/log")"

# 4. An unknown step is a usage error.
code=$(PATH=$work/fake:$PATH run frobnicate)
[[ $code == 2 ]] || fail "unknown step: exit $code, want 2"
echo "gpu-run.sh fails loudly without a usable GPU: 5 cases passed"
