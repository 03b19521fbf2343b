#!/usr/bin/env bash
# scripts/gpu-run.sh on a machine without a GPU: it must fail loudly, never pass by
# skipping. Without nvidia-smi the probe stops in one line; with a stand-in nvidia-smi
# (a GPU that CUDA cannot reach) the list and check steps run and fail as having
# found no CUDA kernel to run, and an old driver is refused by the probe. With stand-ins
# for qmvlab and qmv_tests acting out a kernel that faults, the check is isolated, the
# kernel left out after it, and a faulting test told from those after it;
# the sanitize step fails without compute-sanitizer and on any error it reports; a call
# given a budget ends inside it.
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
# The store gpu-run.sh picks itself (ctest's environment names the tests' own).
unset QMV_TUNING_STORE
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

# A results folder that cannot be packed into OUT is reported; the steps still run.
code=$(OUT=$work/no/such/folder PATH=$work/fake:$PATH "$root/scripts/gpu-run.sh" device list check >"$work/log" 2>&1; echo $?)
[[ $code == 1 ]] || fail "unwritable OUT: exit $code, want 1"
grep -q "could not pack .* into $work/no/such/folder" "$work/log" || fail "unwritable OUT: not reported: $(tail -3 "$work/log")"
grep -q "== check" "$work/log" || fail "unwritable OUT: the steps after the first packing did not run"

# The peak step wants the read peak measured, not the line saying it was not (a
# stand-in for qmvlab prints what it prints on a machine without a CUDA device, in
# well under the ten seconds its CPU read peak takes).
mkdir -p "$work/cpuonly/bin"
cat >"$work/cpuonly/bin/qmvlab" <<'FAKE'
#!/usr/bin/env bash
echo "peak read bandwidth, 16 threads: 180.00 GB/s (best of 7, median 175.00), read loop avx2.s4"
echo "GPU peak: not measured: no CUDA device (CUDA driver version is insufficient for CUDA runtime version)"
FAKE
chmod +x "$work/cpuonly/bin/qmvlab"
cp "$work/bundle/requires" "$work/cpuonly/"
code=$(QMV_GPU_BUNDLE=$work/cpuonly PATH=$work/fake:$PATH run peak)
[[ $code == 1 ]] || fail "unusable GPU: peak: exit $code, want 1"
grep -q "peak (the GPU read peak was not measured)" "$work/log" || fail "unusable GPU: peak not failed: $(tail -5 "$work/log")"

# 3. A driver older than the bundle's CUDA runtime needs: one line, nothing runs.
code=$(FAKE_DRIVER=535.54 PATH=$work/fake:$PATH run list)
[[ $code == 1 ]] || fail "old driver: exit $code, want 1"
grep -q "needs driver >= 580, this machine has 535" "$work/log" || fail "old driver: no reason: $(cat "$work/log")"

# 5. A kernel that faults: a stand-in for qmvlab acts out check --isolate's report of it
#    (the kernel's failure, the others checked); the faulting kernel is left out of the
#    bench, with QMV_GPU_EXCLUDE's; a stand-in qmv_tests has a test fault and another fail
#    after it, and each failed device test runs again alone.
mkdir -p "$work/faulty/bin"
cat >"$work/faulty/bin/qmvlab" <<'FAKE'
#!/usr/bin/env bash
echo "$*" >>"$FAKE_CALLS"
echo "${QMV_TUNING_STORE-unset}" >>"$FAKE_CALLS.store"
case "$*" in
  "check --isolate --kernels *.cuda.* "*)
    echo "checking 3 kernel(s) on 2 shape(s), 16 thread(s), seed 42 (rerun with --seed 42)"
    echo "PASS q4_K.cuda.a              8x256  gaussian: kernel 1e-9"
    echo "FAIL q4_K.cuda.bad            8x256  process: kernel inf e2e inf <- its process was killed by signal 11 (SIGSEGV)"
    echo "FAIL q4_K.cuda.bad           16x256  process: kernel inf e2e inf <- not checked: its process was killed by signal 11 (SIGSEGV) at 8x256"
    echo "PASS q4_K.cuda.b              8x256  gaussian: kernel 1e-9"
    echo "check: 2 passed, 2 failed, 0 skipped"
    exit 1 ;;
  bench*) echo "1.0 GB/s" ;;
esac
FAKE
cat >"$work/faulty/bin/qmv_tests" <<'FAKE'
#!/usr/bin/env bash
echo "$*" >>"$FAKE_CALLS.tests"
echo "${QMV_TUNING_STORE-unset}" >>"$FAKE_CALLS.tests-store"
if [[ -n ${FAKE_MANY:-} && $* == --gtest_filter=*:* ]]; then
  for i in $(seq 1 32); do echo "[  FAILED  ] Cuda.Many$i (1 ms)"; done
  exit 1
fi
case "$*" in
  --gtest_filter=Cuda.Victim) echo "[  PASSED  ] 1 test." ;;
  --gtest_filter=Cuda.Culprit) echo "[  FAILED  ] Cuda.Culprit (3 ms)"; exit 1 ;;
  *) printf '%s\n' "[  PASSED  ] 5 tests." "[  FAILED  ] Cuda.Culprit (3 ms)" "[  FAILED  ] Cuda.Victim (1 ms)" \
       "[  FAILED  ] 2 tests, listed below:" "[  FAILED  ] Cuda.Culprit" "[  FAILED  ] Cuda.Victim"; exit 1 ;;
esac
FAKE
chmod +x "$work/faulty/bin/qmvlab" "$work/faulty/bin/qmv_tests"
cp "$work/bundle/requires" "$work/faulty/"
export FAKE_CALLS=$work/calls
code=$(QMV_GPU_BUNDLE=$work/faulty QMV_GPU_EXCLUDE='q6_K.cuda.slow*' PATH=$work/fake:$PATH run check bench tests)
[[ $code == 1 ]] || fail "faulting kernel: exit $code, want 1: $(cat "$work/log")"
grep -qx 'check --isolate --kernels \*\.cuda\.\* --shapes default,128256x4096 --out .*/check.csv' "$FAKE_CALLS" ||
  fail "faulting kernel: check not isolated: $(cat "$FAKE_CALLS")"
grep -q '^bench --kernels \*\.cuda\.\*,!q6_K\.cuda\.slow\*,!q4_K\.cuda\.bad --shapes' "$FAKE_CALLS" ||
  fail "faulting kernel: bench did not leave it out: $(grep bench "$FAKE_CALLS")"
grep -q "fails alone: Cuda.Culprit" "$work/log" || fail "tests: culprit not named: $(cat "$work/log")"
grep -q "passes alone: Cuda.Victim" "$work/log" || fail "tests: victim not told apart: $(cat "$work/log")"
grep -q "fails alone: Cuda.Culprit" "$work/results/tests-alone.log" || fail "tests: no tests-alone.log"
grep -q "FAILED: check (exit 1) tests (exit 1)" "$work/log" || fail "faulting kernel: failures not named: $(tail -3 "$work/log")"
grep -q "check (no CUDA kernel passed" "$work/log" && fail "faulting kernel: its passes were not counted"
[[ $(wc -l <"$FAKE_CALLS") == 2 ]] || fail "faulting kernel: want 1 check and 1 bench: $(cat "$FAKE_CALLS")"
# qmvlab writes the GPU's store into the results folder; the tests, into their own.
[[ $(sort -u "$FAKE_CALLS.store") == "$work/results/tuning.csv" ]] ||
  fail "qmvlab's store is not the results folder's: $(sort -u "$FAKE_CALLS.store")"
[[ $(sort -u "$FAKE_CALLS.tests-store") == unset ]] ||
  fail "the device tests were given the run's store: $(sort -u "$FAKE_CALLS.tests-store")"
# Everything failed: at most 30 tests run again alone.
rm -f "$FAKE_CALLS.tests"
code=$(FAKE_MANY=1 QMV_GPU_BUNDLE=$work/faulty PATH=$work/fake:$PATH run tests)
[[ $code == 1 ]] || fail "many failures: exit $code, want 1"
grep -q "more than 30 failed or the budget is spent; the rest not run again alone" "$work/log" || fail "many failures: no cap: $(tail -3 "$work/log")"
[[ $(grep -c '^--gtest_filter=Cuda.Many[0-9]*$' "$FAKE_CALLS.tests") == 30 ]] ||
  fail "many failures: want 30 runs alone: $(cat "$FAKE_CALLS.tests")"

# 6. compute-sanitizer: missing, it fails the step in one line; a stand-in that reports
#    0 errors passes memcheck, racecheck and synccheck on the newest families (what
#    QMV_GPU_EXCLUDE leaves out included: a fault is what the tools are for); one that
#    reports errors fails its tool's step.
if ! command -v compute-sanitizer >/dev/null && [[ ! -e /usr/local/cuda/bin/compute-sanitizer ]]; then
  code=$(PATH=$work/fake:$PATH run sanitize)
  [[ $code == 1 ]] || fail "no sanitizer: exit $code, want 1"
  grep -q "sanitize (no compute-sanitizer)" "$work/log" || fail "no sanitizer: not named: $(tail -3 "$work/log")"
fi
mkdir -p "$work/sanitizer"
cat >"$work/sanitizer/compute-sanitizer" <<'FAKE'
#!/usr/bin/env bash
echo "$*" >>"$FAKE_CALLS.sanitizer"
# racecheck's summary line is its own (compute-sanitizer 2025)
if [[ $2 == racecheck ]]; then
  bad="========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)"
  [[ $2 == "${FAKE_BAD_TOOL:-}" ]] && { echo "$bad"; exit 3; }
  echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
  exit 0
fi
[[ $2 == "${FAKE_BAD_TOOL:-}" ]] && { echo "========= ERROR SUMMARY: 2 errors"; exit 3; }
echo "========= ERROR SUMMARY: 0 errors"
FAKE
chmod +x "$work/sanitizer/compute-sanitizer"
rm -f "$FAKE_CALLS.sanitizer"
code=$(QMV_GPU_EXCLUDE='q6_K.cuda.tma_dp4a_q8_1' PATH=$work/sanitizer:$work/fake:$PATH run sanitize)
[[ $code == 0 ]] || fail "sanitizer: exit $code, want 0: $(tail -5 "$work/log")"
for tool in memcheck racecheck synccheck; do
  grep -q "^--tool $tool --error-exitcode 3 .*/qmvlab check --kernels \*\.cuda\.tma_\*,\*\.cuda\.quarterwarp_\* --shapes" \
    "$FAKE_CALLS.sanitizer" || fail "sanitizer: $tool not run as expected: $(cat "$FAKE_CALLS.sanitizer")"
done
code=$(FAKE_BAD_TOOL=racecheck PATH=$work/sanitizer:$work/fake:$PATH run sanitize)
[[ $code == 1 ]] || fail "sanitizer errors: exit $code, want 1"
grep -q "FAILED: sanitize-racecheck (exit 3) sanitize-racecheck (compute-sanitizer racecheck did not report 0 errors)" \
  "$work/log" || fail "sanitizer errors: not named: $(tail -3 "$work/log")"

# 7. A call's budget (QMV_GPU_BUDGET): a step that would run past it is stopped inside
#    it, its log so far kept, and the steps after it are named as not started, not
#    run; the call ends within its budget.
mkdir -p "$work/slow/bin"
cat >"$work/slow/bin/qmvlab" <<'FAKE'
#!/usr/bin/env bash
case "$1" in
  check) echo "PASS q4_K.cuda.a 8x256"; echo "check: 1 passed, 0 failed, 0 skipped" ;;
  bench) echo "timing 1 kernel"; exec sleep 60 ;;
esac
FAKE
cp "$work/faulty/bin/qmv_tests" "$work/slow/bin/"
chmod +x "$work/slow/bin/qmvlab"
cp "$work/bundle/requires" "$work/slow/"
start=$SECONDS
code=$(QMV_GPU_BUDGET=15 QMV_GPU_BUDGET_RESERVE=3 QMV_GPU_BUNDLE=$work/slow PATH=$work/fake:$PATH run check bench tests)
took=$((SECONDS - start))
[[ $code == 1 ]] || fail "budget: exit $code, want 1: $(tail -5 "$work/log")"
((took < 15)) || fail "budget: the call took $took s of a 15 s budget"
grep -qE "FAILED: bench \(stopped at its [0-9]+ s limit\) tests \(not started: budget spent\)$" "$work/log" ||
  fail "budget: cut and unstarted steps not named (alone): $(tail -3 "$work/log")"
grep -q "timing 1 kernel" "$work/results/bench.log" || fail "budget: the cut step's log was not kept"
grep -q "not started, the call's budget is spent" "$work/results/tests.log" || fail "budget: no log for the unstarted step"
code=$(QMV_GPU_BUDGET=7m PATH=$work/fake:$PATH run list)
[[ $code == 2 ]] || fail "budget in minutes: exit $code, want 2"
grep -q "QMV_GPU_BUDGET must be a whole number of seconds, not '7m'" "$work/log" || fail "budget in minutes: $(cat "$work/log")"
code=$(QMV_GPU_BUDGET_RESERVE=-1 PATH=$work/fake:$PATH run list)
[[ $code == 2 ]] || fail "negative reserve: exit $code, want 2"
grep -q "QMV_GPU_BUDGET_RESERVE must be a whole number of seconds, not '-1'" "$work/log" ||
  fail "negative reserve: $(cat "$work/log")"

# 4. An unknown step is a usage error.
code=$(PATH=$work/fake:$PATH run frobnicate)
[[ $code == 2 ]] || fail "unknown step: exit $code, want 2"

# 8. The CUDA peer. A bundle without it: the peer step is refused in one line before
#    anything runs (no probe, no step).
code=$(PATH=$work/fake:$PATH run list peer)
[[ $code == 2 ]] || fail "no peer: exit $code, want 2: $(cat "$work/log")"
grep -q "peer: the bundle holds no CUDA llama-bench (.*): build it with 'scripts/install-peers.sh --isa cuda'" \
  "$work/log" || fail "no peer: no reason: $(cat "$work/log")"
[[ $(wc -l <"$work/log") == 1 ]] || fail "no peer: more than one line: $(cat "$work/log")"
# bundle-peer packs a peer build (a stand-in: qmvlab's binary as its llama-bench) into
# the bundle: the binary, its commit file and every library it loads but the C
# library's family, the driver and cuBLAS.
mkdir -p "$work/peerbuild/build/bin"
cp "$qmvlab" "$work/peerbuild/build/bin/llama-bench"
echo "llama.cpp stand-in $RANDOM" >"$work/peerbuild/commit"
# XZ_OPT=-0: xz's fastest level; what is packed is the same, and it takes seconds, not a minute.
(cd "$root" && XZ_OPT=-0 QMV_PEER_CUDA_DIR=$work/peerbuild scripts/gpu-run.sh bundle-peer >"$work/log" 2>&1) ||
  fail "bundle-peer: $(tail -5 "$work/log")"
[[ -x $work/bundle/peer/bin/llama-bench ]] || fail "bundle-peer: no llama-bench in the bundle"
cmp -s "$work/peerbuild/commit" "$work/bundle/peer/commit" || fail "bundle-peer: the peer's commit file not carried"
tar -tJf "$work/bundle.tar.xz" >"$work/packed" 2>&1 || fail "bundle-peer: no packed bundle: $(cat "$work/packed")"
grep -q 'peer/bin/llama-bench$' "$work/packed" || fail "bundle-peer: the packed bundle lacks the peer"
while read -r soname; do
  case "$soname" in
    libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | libresolv.so.* | ld-linux* | libcuda.so.* | libcublas* | libcudart*)
      [[ ! -e $work/bundle/peer/lib/$soname ]] || fail "bundle-peer: $soname bundled, the GPU machine's own is used" ;;
    *) [[ -s $work/bundle/peer/lib/$soname ]] || fail "bundle-peer: $soname, which llama-bench loads, not bundled" ;;
  esac
done < <(ldd "$qmvlab" | awk '$2 == "=>" && $3 ~ /^\// {print $1}')
# The decode step's second auto decode must time nothing: the first filled the GPU's
# store. A stand-in qmvlab times kernels in its first decode only, or, with
# FAKE_ALWAYS_TIMES set, in every one: the step passes the first and fails the second.
mkdir -p "$work/tune/bin"
cat >"$work/tune/bin/qmvlab" <<'FAKE'
#!/usr/bin/env bash
[[ $1 == decode ]] || exit 0
if [[ -e $QMV_TUNING_STORE && -z ${FAKE_ALWAYS_TIMES:-} ]]; then
  echo "tuning: 7 matvec shape(s) for auto on the GPU: 7 from the store; nothing timed [$QMV_TUNING_STORE]"
else
  touch "$QMV_TUNING_STORE"
  echo "tuning: 7 matvec shape(s) for auto on the GPU: 7 measured now in 3 s [$QMV_TUNING_STORE]"
fi
echo "decode: 127 tokens in 0.400 s = 317.50 tok/s"
FAKE
chmod +x "$work/tune/bin/qmvlab"
cp "$work/bundle/requires" "$work/tune/"
touch "$work/model.gguf"
tune_run() {
  rm -rf "$work/results"
  QMV_GPU_BUNDLE=$work/tune QMV_GPU_MODEL=$work/model.gguf PATH=$work/fake:$PATH run decode
}
code=$(tune_run)
[[ $code == 1 ]] || fail "decode: exit $code, want 1 (the stand-in's plan sweep fails)"
# The store the decodes wrote lies in the results folder, which the run packs.
[[ -e $work/results/tuning.csv ]] || fail "decode: the GPU's store is not in the results folder"
grep -q "FAILED: .*decode-again" "$work/log" &&
  fail "decode: a second decode that timed nothing failed: $(tail -3 "$work/log")"
grep -q "== decode-again" "$work/log" || fail "decode: no second auto decode: $(cat "$work/log")"
code=$(FAKE_ALWAYS_TIMES=1 tune_run)
grep -q "FAILED: .*decode-again (the second auto decode timed kernels again)" "$work/log" ||
  fail "decode: a second decode that timed kernels again passed: $(tail -3 "$work/log")"

# A dry run lists the commands: the model made, llama-bench on the GPU (-ngl 99)
# alternating with qmvlab decode --device cuda, the CSV; it runs none and writes nothing.
rm -rf "$work/results"
code=$(QMV_PEER_ROUNDS=2 PATH=/usr/bin:/bin run --dry-run peer ab)
[[ $code == 0 ]] || fail "dry run: exit $code, want 0: $(cat "$work/log")"
grep -q "== make-model: .*/qmvlab make-model --preset llama-2-7b --mix q4_K_m" "$work/log" ||
  fail "dry run: the model is not made: $(cat "$work/log")"
grep -q "== peer: .*compare_llamacpp.py --device cuda .* --rounds 2 --out $work/results/decode-vs-llamacpp.csv" "$work/log" ||
  fail "dry run: no comparison: $(cat "$work/log")"
[[ $(grep -c "peer/bin/llama-bench -m .* -p 0 -n 64 .* -ngl 99" "$work/log") == 2 ]] ||
  fail "dry run: want llama-bench -ngl 99 in each of 2 rounds: $(cat "$work/log")"
[[ $(grep -c "/qmvlab decode --model .* --device cuda" "$work/log") == 2 ]] ||
  fail "dry run: want qmvlab decode --device cuda in each of 2 rounds: $(cat "$work/log")"
[[ $(grep -c "== ab-.*decode_ab.py .*--extra=--device cuda" "$work/log") == 3 ]] ||
  fail "dry run: want 3 decode A/B commands on the GPU: $(grep ab- "$work/log")"
[[ $(grep -c "== make-model" "$work/log") == 2 ]] || fail "dry run: both steps say the model they need is made"
grep -q "nothing was run" "$work/log" || fail "dry run: not said: $(tail -2 "$work/log")"
[[ ! -e $work/results ]] || fail "dry run: it wrote $work/results"
echo "gpu-run.sh fails loudly without a usable GPU, one fault costs one kernel, a call keeps its budget," \
  "the second auto decode times nothing, the GPU's store stays with the results, and the CUDA peer is" \
  "bundled, listed and refused when missing: 10 cases passed"
