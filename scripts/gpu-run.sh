#!/usr/bin/env bash
# The GPU run: build a bundle here, run its steps on a machine with a CUDA device.
#
#   scripts/gpu-run.sh bundle          on the build machine: qmvlab and qmv_tests for sm_90
#                                      (H100/H200) with every shared library they link except
#                                      the C library's own, in build/gpu-bundle/{bin,lib}, and
#                                      build/gpu-bundle/requires (the driver and glibc the
#                                      bundle needs), build/gpu-bundle/commit (the commit
#                                      its results rows name, through QMV_GIT_COMMIT);
#                                      build/gpu-bundle.tar.xz packs it for a
#                                      runner that carries little (ICU's data alone is 30 MiB).
#                                      With the CUDA peer built (scripts/install-peers.sh
#                                      --isa cuda), build/gpu-bundle/peer holds its llama-bench
#                                      and the llama/ggml libraries (cuBLAS is the GPU
#                                      machine's own: the toolkit is installed there).
#   scripts/gpu-run.sh bundle-peer     the CUDA peer (QMV_PEER_CUDA_DIR, default
#                                      .peers/llama.cpp-cuda) into an existing bundle, repacked.
#   scripts/gpu-run.sh device [--dry-run] [STEP..]
#                                      on the GPU machine (a CUDA driver, no network, none of
#                                      our Debian libraries): the steps below, in order.
#                                      --dry-run prints each step's commands and runs none.
#
# Steps (default: probe list peak check tests bench):
#   probe     GPU name, driver, glibc; stops at once, in one line, where the bundle cannot run
#   list      the registered kernels; fails when no CUDA kernel is available
#   peak      the CPU read peak, the GPU device-to-device copy and the GPU read peak, and
#             the read of one matrix per launch at the Llama matrix sizes (--gpu-windows)
#   check     every CUDA kernel against the reference, default shapes plus 128256x4096
#             (halfwarp_dp4a's grid-stride path); fails when it checked no CUDA kernel
#   tests     the device tests of qmv_tests (not the CPU replays); fails when none ran
#   bench     cold bench of every CUDA kernel on the Llama-2-7B and Llama-3-8B shapes
#   ffn       cold bench of every CUDA kernel on the FFN shapes 4096x14336, 14336x4096 only,
#             launched from the host and replayed from CUDA graphs (--gpu-graph); then the
#             bulk-copy and half-warp kernels replayed with each launch overlapping the one
#             before (--gpu-overlap)
#   profile   Nsight Compute counters of the Q4_K/Q6_K kernels on the FFN shapes (ncu)
#   sanitize  compute-sanitizer's memcheck, racecheck and synccheck on the check of the
#             newest kernel families (bulk-copy, quarter-warp) on small shapes
#   accuracy  the accuracy study with the GPU rows
#   decode    a Llama-2-7B-shaped Q4_K_M model made there; the auto plan (also with the
#             fused attention kernel, with q, k and v as three matvecs and with gate and
#             up as two); the bulk-copy kernels with the fused attention, with and
#             without overlapped launches; the plan sweep over the GPU variants; an int8
#             plan with and without outlier routing
#   realmodel the greedy text of models/*.gguf (or QMV_REAL_MODEL) on the GPU and the CPU
#   ab        the decode step's variants A/B, interleaved (A B B A, QMV_AB_ROUNDS rounds,
#             default 1; scripts/decode_ab.py): the fused attention against the separate
#             kernels, q, k and v stacked against three matvecs, the bulk-copy plan's
#             overlapped launches against plain ones; rows in results/<gpu>/decode-ab.csv
#   peer      llama.cpp's CUDA decode against qmvlab's on the decode step's Llama-2-7B
#             Q4_K_M, in alternating rounds (llama-bench -p 0 -n 64 -ngl 99, then qmvlab
#             decode --device cuda; QMV_PEER_ROUNDS, default 3), medians into
#             results/<gpu>/decode-vs-llamacpp.csv (scripts/compare_llamacpp.py --device
#             cuda). A bundle without the peer is refused before anything runs.
#
# Each step writes its log and CSV into results/<gpu>/ as it ends; where OUT is set (a
# folder a remote runner copies back) that folder is also packed into $OUT/<gpu>.tar.gz
# after every step, so a run stopped at a time limit keeps what finished. The run fails
# (exit 1) when any step failed or ran nothing, naming them.
#
# A kernel that faults loses its process's CUDA context, and nothing after it in that
# process can run. So one fault costs one kernel, not a step: check reports the pairs
# it could not run as NOT RUN and they are checked again in fresh processes; a kernel
# that failed check is left out of the later steps (bench, ffn, profile, accuracy, the
# decode plans); and a device test that failed is run again alone, to tell the test
# that failed from those that failed after it.
#
# Environment: QMV_GPU_KERNELS (the kernels list, check, bench, ffn and accuracy take;
# default '*.cuda.*'), QMV_GPU_EXCLUDE (comma-separated kernel globs the steps after
# check leave out, as if they had failed check: what an earlier call found faulting),
# QMV_OVERLAP_KERNELS (what the ffn step times with --gpu-overlap), QMV_PROFILE_KERNELS
# (what the profile step counts), QMV_CUDA_ARCHS (default 90), QMV_GPU_BUILD_DIR (default build/gpu),
# QMV_GPU_BUNDLE (default build/gpu-bundle), QMV_GPU_RESULTS (default results/<gpu>),
# QMV_GPU_STEP_TIMEOUT (seconds per step, default 420), QMV_GPU_BUDGET (seconds for the
# whole call: each step's limit is cut to what is left, and steps with nothing left are
# not started but named; set it a little under a runner's own limit), QMV_GPU_MODEL (the decode model,
# made when missing), QMV_REAL_MODEL (the realmodel step's GGUF), QMV_PEER_ROUNDS.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${QMV_GPU_BUILD_DIR:-build/gpu}
bundle=${QMV_GPU_BUNDLE:-build/gpu-bundle}
# What a remote runner may carry to the GPU machine (64 MiB for the runner this was
# written for): the bundle and the working tree together.
max_carry_mib=62

bundle() {
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DQMV_CUDA=ON \
    -DQMV_CUDA_ARCHS="${QMV_CUDA_ARCHS:-90}" >/dev/null
  cmake --build "$build_dir" -j"$(nproc)" --target qmvlab qmv_tests
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  cp "$build_dir/qmvlab" "$build_dir/tests/qmv_tests" "$bundle/bin/"
  strip --strip-unneeded "$bundle/bin/qmvlab" "$bundle/bin/qmv_tests"
  # Every library the loader resolves, except the C library's family (the GPU
  # machine's own is newer, and mixing loaders breaks) and the CUDA driver (it must be
  # the machine's own).
  ldd "$bundle/bin/qmvlab" "$bundle/bin/qmv_tests" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    while read -r lib; do
      case "$(basename "$lib")" in
        libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | libresolv.so.* | ld-linux* | libcuda.so.*) ;;
        *) cp -L "$lib" "$bundle/lib/" ;;
      esac
    done
  # What the machine must have: the newest glibc symbol version any bundled file asks
  # for, and the driver the bundled CUDA runtime needs (CUDA 13 runtimes: driver 580).
  local glibc cudart_major driver=0
  glibc=$(objdump -T "$bundle"/bin/* "$bundle"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' |
    sort -uV | tail -1)
  cudart_major=$(cd "$bundle/lib" && ls libcudart.so.* 2>/dev/null | head -1 | sed -E 's/libcudart\.so\.([0-9]+).*/\1/')
  case "$cudart_major" in
    13) driver=580 ;;
    12) driver=525 ;;
  esac
  printf 'glibc %s\ndriver %s\n' "${glibc:-0}" "$driver" >"$bundle/requires"
  # The commit the results rows will name: the GPU machine's checkout, if any, is not
  # the tree this was built from.
  local commit
  commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  [[ -z $(git status --porcelain --untracked-files=no -- . ':!results' 2>/dev/null) ]] || commit+="+dirty"
  echo "$commit" >"$bundle/commit"
  bundle_peer
  pack_bundle
}

# build/gpu-bundle.tar.xz, its size against what a device call carries, and a check
# that the binaries start from the bundle alone.
pack_bundle() {
  # xz: the bundle packs to about a quarter of its size, which keeps it and the tree
  # under what a device call carries.
  tar -cJf "$bundle.tar.xz" -C "$(dirname "$bundle")" "$(basename "$bundle")"
  local mib tree_mib
  mib=$(du -sm "$bundle.tar.xz" | cut -f1)
  # The tree the GPU machine needs: the committed results/ (tens of MiB of CSVs and
  # plots) can stay behind, since the run writes results/<gpu>/ afresh.
  tree_mib=$(( $( (git ls-files -z -- ':!results'; git ls-files -z --others --exclude-standard -- ':!results') |
    du -cm --files0-from=- 2>/dev/null | tail -1 | cut -f1) ))
  echo "bundle: $bundle, $mib MiB packed in $bundle.tar.xz ($(tr '\n' ' ' <"$bundle/requires")); the tree" \
    "without results/: $tree_mib MiB"
  ls -l "$bundle/bin" "$bundle/lib"
  [[ ! -d $bundle/peer ]] || ls -l "$bundle/peer/bin" "$bundle/peer/lib"
  if ((mib + tree_mib > max_carry_mib)); then
    echo "gpu-run.sh: the bundle ($mib MiB) and the tree ($tree_mib MiB) exceed the $max_carry_mib MiB a device call carries" >&2
    exit 1
  fi
  # The binaries must start from the bundle alone (the loader finds nothing missing).
  if LD_LIBRARY_PATH="$bundle/lib" ldd "$bundle/bin/qmvlab" "$bundle/bin/qmv_tests" | grep -q "not found"; then
    echo "gpu-run.sh: a library is still missing:" >&2
    LD_LIBRARY_PATH="$bundle/lib" ldd "$bundle/bin/qmvlab" "$bundle/bin/qmv_tests" | grep "not found" >&2
    exit 1
  fi
}

# The CUDA peer, when .peers/llama.cpp-cuda holds it: llama-bench and every library it
# loads from its own build or this machine, except the C library's family, the driver
# and cuBLAS (hundreds of MiB: the GPU machine's toolkit has it). The CUDA runtime is
# the one in bundle/lib already.
peer_build=${QMV_PEER_CUDA_DIR:-.peers/llama.cpp-cuda}
bundle_peer() {
  rm -rf "$bundle/peer"
  if [[ ! -x $peer_build/build/bin/llama-bench ]]; then
    echo "bundle: no CUDA peer in $peer_build (scripts/install-peers.sh --isa cuda builds it): the peer step will refuse"
    return 0
  fi
  mkdir -p "$bundle/peer/bin" "$bundle/peer/lib"
  cp "$peer_build/build/bin/llama-bench" "$bundle/peer/bin/"
  cp "$peer_build/commit" "$bundle/peer/commit"
  ldd "$peer_build/build/bin/llama-bench" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    while read -r soname lib; do
      case "$soname" in
        libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | libresolv.so.* | ld-linux* | libcuda.so.*) ;;
        libcublas* | libcudart*) ;;
        *) cp -L "$lib" "$bundle/peer/lib/$soname" ;;
      esac
    done
  strip --strip-unneeded "$bundle/peer/bin/llama-bench" "$bundle/peer/lib/"*
}

# ---------------------------------------------------------------------------------
# On the device

gpu_name() {
  local g
  g=$({ nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true; } | head -1 |
    tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+//; s/-+$//')
  echo "${g:-unknown-gpu}"
}

# Packs results/<gpu>/ into $OUT after each step (one archive: runners may copy back
# only a few files), written under another name and renamed.
save() {
  ((dry_run == 0)) || return 0
  [[ -n ${OUT:-} ]] || return 0
  # A failed packing is reported, not fatal: the steps after it still run.
  tar -czf "$OUT/.partial.tar.gz" -C "$(dirname "$results")" "$(basename "$results")" &&
    mv "$OUT/.partial.tar.gz" "$OUT/$gpu.tar.gz" ||
    echo "gpu-run.sh: could not pack $results into $OUT/$gpu.tar.gz" >&2
}

# The seconds a command may run now: QMV_GPU_STEP_TIMEOUT, or less where QMV_GPU_BUDGET
# (the whole call's seconds, counted from the script's start) has less left once the
# final packing's reserve is kept; 0 when too little is left to start anything. A
# runner that kills the call at its own limit loses the step it cuts and the summary;
# a budget a little under that limit ends the step cleanly (its log so far kept) and
# names the steps it left unstarted.
budget_reserve_s=15
min_step_s=10
step_seconds() {
  local limit=${QMV_GPU_STEP_TIMEOUT:-420}
  if [[ -n ${QMV_GPU_BUDGET:-} ]]; then
    local left=$((QMV_GPU_BUDGET - SECONDS - budget_reserve_s))
    ((left >= limit)) || limit=$left
    ((limit >= min_step_s)) || limit=0
  fi
  echo "$limit"
}

# Runs a step's command with a time limit, its output to the terminal and to
# results/<gpu>/<name>.log; records a failure under the step's name.
run_step() {
  local name=$1
  shift
  echo
  echo "== $name: $*"
  ((dry_run == 0)) || return 0
  local limit
  limit=$(step_seconds)
  if ((limit == 0)); then
    echo "== $name: not started, the call's budget is spent (QMV_GPU_BUDGET=$QMV_GPU_BUDGET s, $SECONDS s gone)" |
      tee "$results/$name.log"
    unfinished+=("$name")
    failed+=("$name (not started: budget spent)")
    return 0
  fi
  local start=$SECONDS status=0
  timeout --signal=INT --kill-after=10 "$limit" "$@" 2>&1 | tee "$results/$name.log" || status=${PIPESTATUS[0]}
  echo "== $name: exit $status after $((SECONDS - start)) s"
  if ((status == 124 || status == 137)); then  # timeout's: stopped at the limit
    unfinished+=("$name")
    failed+=("$name (stopped at its $limit s limit)")
  elif ((status != 0)); then
    failed+=("$name (exit $status)")
  fi
  save
  return 0
}

# True for a step stopped at its time limit or never started: a failure already named.
is_unfinished() { [[ " ${unfinished[*]:-} " == *" $1 "* ]]; }

# Fails the step `name` when `pattern` (an extended regex) has no match in its log,
# unless it is unfinished.
require_in_log() {
  local name=$1 pattern=$2 why=$3
  ((dry_run == 0)) || return 0
  ! is_unfinished "$name" || return 0
  if ! grep -Eq "$pattern" "$results/$name.log"; then
    echo "gpu-run.sh: $name: $why"
    failed+=("$name ($why)")
  fi
}

version_at_least() {  # version_at_least HAVE NEED
  [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" == "$2" ]]
}

step_probe() {
  if ((dry_run)); then
    echo "== probe: nvidia-smi --query-gpu=name,driver_version,... against $bundle/requires"
    return 0
  fi
  {
    echo "machine: $(uname -srm), $(nproc) cores"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem \
      --format=csv 2>&1 || true
  } | tee "$results/probe.log"
  local driver glibc need_glibc need_driver
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | cut -d. -f1 || true)
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}' || true)
  need_glibc=$(awk '$1 == "glibc" {print $2}' "$bundle/requires" 2>/dev/null || echo 0)
  need_driver=$(awk '$1 == "driver" {print $2}' "$bundle/requires" 2>/dev/null || echo 0)
  echo "driver ${driver:-none}, glibc ${glibc:-unknown}; the bundle needs driver >= $need_driver, glibc >= $need_glibc" |
    tee -a "$results/probe.log"
  if [[ -z $driver ]]; then
    echo "gpu-run.sh: no CUDA device: nvidia-smi finds no GPU here, so nothing on the GPU can run" | tee -a "$results/probe.log"
    save
    exit 1
  fi
  if ((driver < need_driver)); then
    echo "gpu-run.sh: the bundle cannot run here: its CUDA runtime needs driver >= $need_driver, this machine has $driver" |
      tee -a "$results/probe.log"
    save
    exit 1
  fi
  if [[ -n $glibc ]] && ! version_at_least "$glibc" "$need_glibc"; then
    echo "gpu-run.sh: the bundle cannot run here: its libraries need glibc >= $need_glibc, this machine has $glibc" |
      tee -a "$results/probe.log"
    save
    exit 1
  fi
  save
}

step_list() {
  run_step list "$qmvlab" list --kernels "$kernels"
  require_in_log list '\| +yes +\|' "no CUDA kernel is available on this device"
}

step_peak() {
  # With the ceilings of one launch per matrix: the Llama FFN and attention matrices,
  # and plain sizes from 1 MiB to 128 MiB.
  run_step peak "$qmvlab" peak --threads all --out "$results/peak.csv" \
    --gpu-windows 1048576,4194304,q4_K:4096x4096,q4_K:4096x14336,q6_K:4096x14336,q6_K:32000x4096,134217728
  require_in_log peak 'GPU read peak \(' "the GPU read peak was not measured"
}

step_check() {
  run_step check "$qmvlab" check --kernels "$kernels" --shapes default,128256x4096 --out "$results/check.csv"
  ((dry_run == 0)) || return 0
  recheck_not_run
  local logs
  logs=$(cat "$results"/check.log "$results"/check-rerun*.log 2>/dev/null || true)  # no reruns: no rerun logs
  if ! is_unfinished check && ! grep -Eq '^check: [1-9][0-9]* passed' <<<"$logs"; then
    echo "gpu-run.sh: check: no CUDA kernel passed a check"
    failed+=("check (no CUDA kernel passed a check)")
  fi
  local k
  for k in $(awk '$1 == "FAIL" {print $2}' <<<"$logs" | sort -u); do
    excluded+=("$k")
  done
  ((${#excluded[@]} == 0)) || echo "gpu-run.sh: the steps after check leave out: ${excluded[*]}"
}

# The pairs a check could not run after a fault lost its CUDA context (its NOT RUN
# lines), checked again: one fresh process per shape, the same seed, rows appended to
# check.csv. A fault among them leaves NOT RUN lines for the next round.
recheck_not_run() {
  local logs=("$results/check.log") round seed shape
  rm -f "$results"/check-rerun*.log
  # No seed line (a check that died before its header): the reruns draw their own.
  seed=$(grep -oE 'rerun with --seed [0-9]+' "$results/check.log" 2>/dev/null | head -1 | awk '{print $NF}' || true)
  for round in 1 2 3 4; do
    local pending
    pending=$(cat "${logs[@]}" | awk '$1 == "NOT" && $2 == "RUN" {print $3, $4}' | sort -u)
    [[ -n $pending ]] || return 0
    logs=()
    for shape in $(awk '{print $2}' <<<"$pending" | sort -u); do
      local names
      names=$(awk -v s="$shape" '$2 == s {print $1}' <<<"$pending" | paste -sd, -)
      run_step "check-rerun$round-$shape" "$qmvlab" check --kernels "$names" --shapes "$shape" \
        ${seed:+--seed "$seed"} --out "$results/check.csv" --append
      logs+=("$results/check-rerun$round-$shape.log")
    done
  done
  if cat "${logs[@]}" | grep -q '^NOT RUN '; then
    echo "gpu-run.sh: check: pairs still not run after 4 rounds of fresh processes"
    failed+=("check (pairs still not run after 4 rounds)")
  fi
}

# The kernel selection of the steps after check: QMV_GPU_KERNELS (or $1) without the
# kernels that failed check or QMV_GPU_EXCLUDE names.
selected_kernels() {
  local globs=${1:-$kernels} k
  for k in "${excluded[@]}"; do globs+=",!$k"; done
  echo "$globs"
}

# True when the decode plan (type=kernel,...) names a kernel the steps leave out.
plan_excluded() {
  local choice k
  for choice in ${1//,/ }; do
    for k in "${excluded[@]}"; do
      # shellcheck disable=SC2053  # the right side is a glob
      [[ ${choice#*=} == $k ]] && return 0
    done
  done
  return 1
}

step_tests() {
  # The device tests only: the CPU replays of the CUDA arithmetic run in CI.
  run_step tests "$tests" \
    --gtest_filter='Cuda.*:CudaExecute.*:CudaDeathTest.*:CudaBench.*:CudaQuantize.*:GpuForwardDevice.*'
  require_in_log tests '\[  PASSED  \] [1-9]' "no device test passed"
  ((dry_run == 0)) || return 0
  # A test that faulted takes the tests after it down with the context: each failed
  # test runs again alone, which tells the one that fails from those that only followed.
  # At most 30 of them, so a run where everything failed does not spend its time here.
  local t reruns=0 limit
  rm -f "$results/tests-alone.log"
  for t in $(grep -oE '^\[  FAILED  \] [A-Za-z0-9_]+\.[A-Za-z0-9_/]+' "$results/tests.log" | awk '{print $NF}' | sort -u); do
    if ((++reruns > 30)); then
      echo "gpu-run.sh: tests: more than 30 failed; the rest not run again alone" | tee -a "$results/tests-alone.log"
      break
    fi
    limit=$(step_seconds)
    ((limit <= 120)) || limit=120
    if ((limit == 0)); then
      echo "gpu-run.sh: tests: the call's budget is spent; the rest not run again alone" | tee -a "$results/tests-alone.log"
      break
    fi
    if timeout --signal=INT --kill-after=10 "$limit" "$tests" --gtest_filter="$t" >>"$results/tests-alone.log" 2>&1; then
      echo "gpu-run.sh: tests: passes alone: $t (it failed after an earlier test's fault)" | tee -a "$results/tests-alone.log"
    else
      echo "gpu-run.sh: tests: fails alone: $t" | tee -a "$results/tests-alone.log"
    fi
  done
  save
  if grep -q '\[  SKIPPED \]' "$results/tests.log"; then
    echo "gpu-run.sh: tests: device tests skipped on a machine with a device:"
    grep '\[  SKIPPED \]' "$results/tests.log"
    failed+=("tests (skipped on a device)")
  fi
}

step_bench() {
  run_step bench "$qmvlab" bench --kernels "$(selected_kernels)" --shapes llama-2-7b,llama-3-8b --min-time 0.05 \
    --out "$results/bench.csv"
  require_in_log bench 'GB/s' "no kernel was timed"
}

step_ffn() {
  run_step ffn "$qmvlab" bench --kernels "$(selected_kernels)" --shapes 4096x14336,14336x4096 --min-time 0.05 --reps 7 \
    --out "$results/bench-ffn.csv"
  require_in_log ffn 'GB/s' "no kernel was timed"
  # The same launches replayed from CUDA graphs, as the decode runs them.
  run_step ffn-graph "$qmvlab" bench --kernels "$(selected_kernels)" --shapes 4096x14336,14336x4096 --min-time 0.05 --reps 7 \
    --gpu-graph --out "$results/bench-ffn-graph.csv"
  require_in_log ffn-graph 'GB/s' "no kernel was timed"
  # The bulk-copy kernels replayed from graphs, each launch overlapping the one before
  # (--gpu-overlap), beside the half-warp ones, which launch as usual: a stream of
  # matvecs with no gap between them, as decode --overlap-weights runs them.
  run_step ffn-overlap "$qmvlab" bench --kernels "$(selected_kernels "${QMV_OVERLAP_KERNELS:-*.cuda.tma_*,q4_K.cuda.halfwarp_dp4a_q8_1,q6_K.cuda.halfwarp_dp4a_q8_1}")" \
    --shapes 4096x14336,14336x4096 --min-time 0.05 --reps 7 --gpu-graph --gpu-overlap --out "$results/bench-ffn-overlap.csv"
  require_in_log ffn-overlap 'GB/s' "no kernel was timed"
}

# The kernels no GPU had run before, under compute-sanitizer: out-of-bounds and
# misaligned accesses (memcheck), shared-memory hazards between a stage's copy and its
# readers (racecheck), barrier misuse (synccheck). Each tool fails its step when it
# reports an error or reports nothing. A kernel that failed check stays in: here its
# fault is what the tools are for.
step_sanitize() {
  local sanitizer tool kernels_to_check
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1 || true)
  if [[ -z $sanitizer ]]; then
    echo "gpu-run.sh: sanitize: no compute-sanitizer on this machine" | tee "$results/sanitize.log"
    failed+=("sanitize (no compute-sanitizer)")
    return 0
  fi
  kernels_to_check=${QMV_SANITIZE_KERNELS:-*.cuda.tma_*,*.cuda.quarterwarp_*}
  for tool in memcheck racecheck synccheck; do
    run_step "sanitize-$tool" "$sanitizer" --tool "$tool" --error-exitcode 3 \
      "$qmvlab" check --kernels "$kernels_to_check" --shapes 8x256,67x512,4096x4096 --seed 7
    require_in_log "sanitize-$tool" 'ERROR SUMMARY: 0 errors' "compute-sanitizer $tool did not report 0 errors"
  done
}

step_profile() {
  local ncu
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1 || true)
  if [[ -z $ncu ]]; then
    echo "gpu-run.sh: profile: no ncu on this machine" | tee "$results/profile.log"
    failed+=("profile (no ncu)")
    return 0
  fi
  # One launch of each kernel per shape, caches flushed between replays (cold).
  local metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
  metrics+=,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed
  metrics+=,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active
  metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size
  metrics+=,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
  run_step profile "$ncu" --csv --metrics "$metrics" --cache-control all --clock-control none \
    "$qmvlab" check --kernels "$(selected_kernels "${QMV_PROFILE_KERNELS:-q4_K.cuda.*,q6_K.cuda.*}")" --shapes 4096x14336,14336x4096 \
    --seed 7
  require_in_log profile 'dram__throughput' "ncu read no counter"
}

step_accuracy() {
  run_step accuracy "$qmvlab" accuracy --kernels "$(selected_kernels)" --out "$results/accuracy.csv"
}

# The Llama-2-7B-shaped Q4_K_M model the decode and peer steps read, made when missing.
decode_model() { echo "${QMV_GPU_MODEL:-/tmp/qmv-models/llama-2-7b-q4_K_m.gguf}"; }
make_decode_model() {
  local model
  model=$(decode_model)
  ((dry_run)) || mkdir -p "$(dirname "$model")"
  [[ -s $model ]] || run_step make-model "$qmvlab" make-model --preset llama-2-7b --mix q4_K_m --out "$model"
}

# The folders holding cuBLAS on the GPU machine, for the peer's loader: the toolkit's
# and the Python packages' (nvidia-cublas).
cuda_library_path() {
  local dir dirs=()
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(find /usr/local /opt /usr/lib -maxdepth 8 -name 'libcublas.so.*' -printf '%h\n' 2>/dev/null | sort -u); do
    [[ -d $dir ]] && dirs+=("$dir")
  done
  (IFS=:; echo "${dirs[*]}")
}

step_peer() {
  make_decode_model
  local model peer_libs
  model=$(decode_model)
  peer_libs="$bundle/peer/lib:$(cuda_library_path)"
  if ((dry_run == 0)) && LD_LIBRARY_PATH="$peer_libs:$LD_LIBRARY_PATH" ldd "$peer_bench" | grep -q "not found"; then
    echo "gpu-run.sh: peer: llama-bench cannot start here, missing:" \
      "$(LD_LIBRARY_PATH="$peer_libs:$LD_LIBRARY_PATH" ldd "$peer_bench" | awk '/not found/ {print $1}' | paste -sd' ')" |
      tee "$results/peer.log"
    failed+=("peer (llama-bench's libraries missing)")
    return 0
  fi
  # The peer's libraries for llama-bench alone: its ggml is not the one qmvlab links.
  local compare=(python3 scripts/compare_llamacpp.py --device cuda --model "$model" --qmvlab "$qmvlab"
    --llama-bench "$peer_bench" --llama-bench-libs "$peer_libs" --threads "$(nproc)" -n 64
    --rounds "${QMV_PEER_ROUNDS:-3}" --out "$results/decode-vs-llamacpp.csv")
  run_step peer "${compare[@]}"
  ((dry_run == 0)) || "${compare[@]}" --dry-run
  require_in_log peer '^\| .*\.gguf \|' "no comparison row was written"
}

step_ab() {
  make_decode_model
  local ab=(python3 scripts/decode_ab.py --qmvlab "$qmvlab" --model "$(decode_model)" "--extra=--device cuda" -n 128
    --rounds "${QMV_AB_ROUNDS:-1}" --out "$results/decode-ab.csv")
  run_step ab-fused-attention "${ab[@]}" --a= --b=--fuse-attention
  run_step ab-stacked-qkv "${ab[@]}" --a=--no-stack-qkv --b=
  local bulk='q4_K=q4_K.cuda.tma_dp4a_q8_1,q6_K=q6_K.cuda.tma_dp4a_q8_1'
  if plan_excluded "$bulk"; then
    echo "gpu-run.sh: ab-overlap: not run, its plan names a kernel left out ($bulk)"
  else
    run_step ab-overlap "${ab[@]}" "--a=--plan $bulk --fuse-attention" "--b=--plan $bulk --fuse-attention --overlap-weights"
  fi
  local name
  for name in ab-fused-attention ab-stacked-qkv ab-overlap; do
    [[ ! -e $results/$name.log ]] || require_in_log "$name" 'tok/s' "no A/B ratio"
  done
}

step_decode() {
  local model
  model=$(decode_model)
  make_decode_model
  local prompt=1,450,4996,310,278,3303,338
  # The auto plan first, then what each of its step's choices gains against the other
  # way, so a run cut short at a time limit keeps the headline and its A/B runs.
  run_step decode "$qmvlab" decode --model "$model" --device cuda --prompt-tokens "$prompt" -n 128 --ignore-eos \
    --quiet --out "$results/decode.csv"
  # With each layer's head step and attention as one kernel (--fuse-attention).
  run_step decode-fused-attention "$qmvlab" decode --model "$model" --device cuda --prompt-tokens "$prompt" -n 128 \
    --ignore-eos --quiet --fuse-attention --out "$results/decode.csv"
  # The bulk-copy kernels with the fused attention, then also launched as programmatic
  # dependents of the kernel before each (--overlap-weights).
  local bulk='q4_K=q4_K.cuda.tma_dp4a_q8_1,q6_K=q6_K.cuda.tma_dp4a_q8_1'
  if plan_excluded "$bulk"; then
    echo "gpu-run.sh: decode-tma, decode-tma-overlap: not run, their plan names a kernel left out ($bulk)"
  else
    run_step decode-tma "$qmvlab" decode --model "$model" --device cuda --prompt-tokens "$prompt" -n 128 \
      --ignore-eos --quiet --plan "$bulk" --fuse-attention --out "$results/decode.csv"
    run_step decode-tma-overlap "$qmvlab" decode --model "$model" --device cuda --prompt-tokens "$prompt" -n 128 \
      --ignore-eos --quiet --plan "$bulk" --fuse-attention --overlap-weights --out "$results/decode.csv"
  fi
  # With each layer's q, k and v as three matvecs: what stacking them gains.
  run_step decode-qkv-apart "$qmvlab" decode --model "$model" --device cuda --prompt-tokens "$prompt" -n 128 \
    --ignore-eos --quiet --no-stack-qkv --out "$results/decode.csv"
  # With each layer's gate and up as two matvecs: what stacking them gains.
  run_step decode-apart "$qmvlab" decode --model "$model" --device cuda --prompt-tokens "$prompt" -n 128 \
    --ignore-eos --quiet --no-stack-gate-up --out "$results/decode.csv"
  local left_out
  left_out=$(IFS=,; echo "${excluded[*]}")
  run_step plan-sweep python3 scripts/plan_sweep.py --qmvlab "$qmvlab" --model "$model" --device cuda --plans gpu \
    ${left_out:+--exclude "$left_out"} --reference-plan 'q4_K=q4_K.cpu.avx2_f32,q6_K=q6_K.cpu.avx2_f32' --out "$results/decode-plans.csv" \
    --log "$results/plan-sweep-commands.log"
  require_in_log plan-sweep 'tok/s' "no plan decoded"
  # An int8 plan without and with outlier routing: what the device-side test and the
  # graph's if/else nodes cost per token (the routed calls are in the log).
  local int8='q4_K=q4_K.cuda.halfwarp_dp4a_q8_1,q6_K=q6_K.cuda.halfwarp_dp4a_q8_1'
  if plan_excluded "$int8"; then
    echo "gpu-run.sh: decode-int8, decode-routed: not run, their plan names a kernel left out ($int8)"
    return 0
  fi
  run_step decode-int8 "$qmvlab" decode --model "$model" --device cuda \
    --plan "$int8" --prompt-tokens "$prompt" -n 128 --ignore-eos --quiet --out "$results/decode.csv"
  run_step decode-routed "$qmvlab" decode --model "$model" --device cuda \
    --plan "$int8" --route-outliers --prompt-tokens "$prompt" -n 128 --ignore-eos --quiet --out "$results/decode.csv"
}

step_realmodel() {
  local model=${QMV_REAL_MODEL:-}
  [[ -n $model ]] || model=$(ls models/*.gguf 2>/dev/null | head -1 || true)
  if [[ -z $model || ! -s $model ]]; then
    echo "gpu-run.sh: realmodel: no model file (QMV_REAL_MODEL or models/*.gguf)" | tee "$results/realmodel.log"
    failed+=("realmodel (no model)")
    return 0
  fi
  local common=(decode --model "$model" --prompt "The capital of France is" -n 48 --quiet)
  run_step realmodel-gpu "$qmvlab" "${common[@]}" --device cuda --json "$results/realmodel-gpu.json"
  run_step realmodel-cpu "$qmvlab" "${common[@]}" --device cpu --json "$results/realmodel-cpu.json"
  if [[ -s $results/realmodel-gpu.json && -s $results/realmodel-cpu.json ]]; then
    python3 - "$results/realmodel-cpu.json" "$results/realmodel-gpu.json" <<'EOF' | tee "$results/realmodel.log"
import json, sys
cpu, gpu = (json.load(open(p)) for p in sys.argv[1:3])
a, b = cpu["generated_tokens"], gpu["generated_tokens"]
same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
print(f"greedy tokens: {same} of {len(a)} identical before the first difference")
print("cpu:", repr(cpu.get("text", "")))
print("gpu:", repr(gpu.get("text", "")))
EOF
  fi
  save
}

device() {
  dry_run=0
  if [[ ${1:-} == --dry-run ]]; then
    dry_run=1
    shift
  fi
  if [[ ! -x $bundle/bin/qmvlab && -s $bundle.tar.xz ]]; then
    tar -xJf "$bundle.tar.xz" -C "$(dirname "$bundle")"
  fi
  if [[ ! -x $bundle/bin/qmvlab ]]; then
    echo "gpu-run.sh: no $bundle/bin/qmvlab: run 'scripts/gpu-run.sh bundle' on the build machine and carry" \
      "$bundle.tar.xz (or $bundle)" >&2
    exit 1
  fi
  bundle=$(cd "$bundle" && pwd)
  export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [[ ! -s $bundle/commit ]] || export QMV_GIT_COMMIT="$(cat "$bundle/commit")"
  qmvlab=$bundle/bin/qmvlab
  tests=$bundle/bin/qmv_tests
  kernels=${QMV_GPU_KERNELS:-*.cuda.*}
  peer_bench=$bundle/peer/bin/llama-bench
  gpu=$(gpu_name)
  results=${QMV_GPU_RESULTS:-results/$gpu}
  ((dry_run)) || mkdir -p "$results"
  local var
  for var in QMV_GPU_BUDGET QMV_GPU_STEP_TIMEOUT; do
    if [[ -n ${!var:-} && ! ${!var} =~ ^[1-9][0-9]*$ ]]; then
      echo "gpu-run.sh: $var must be a whole number of seconds, not '${!var}'" >&2
      exit 2
    fi
  done
  failed=()
  unfinished=()
  excluded=()
  [[ -z ${QMV_GPU_EXCLUDE:-} ]] || IFS=, read -r -a excluded <<<"$QMV_GPU_EXCLUDE"
  local steps=("$@") s
  ((${#steps[@]})) || steps=(probe list peak check tests bench)
  # What a step needs from the bundle is asked for before the GPU machine's time is spent.
  for s in "${steps[@]}"; do
    case "$s" in
      probe | list | peak | check | tests | bench | ffn | profile | sanitize | accuracy | decode | realmodel | ab) ;;
      peer)
        if [[ ! -x $peer_bench ]]; then
          echo "gpu-run.sh: peer: the bundle holds no CUDA llama-bench ($peer_bench): build it with" \
            "'scripts/install-peers.sh --isa cuda', then 'scripts/gpu-run.sh bundle'" >&2
          exit 2
        fi
        ;;
      *) echo "gpu-run.sh: unknown step '$s'" >&2; exit 2 ;;
    esac
  done
  [[ ${steps[0]} == probe ]] || step_probe
  for s in "${steps[@]}"; do
    "step_$s"
  done
  if ((dry_run)); then
    echo
    echo "gpu-run.sh: dry run of ${steps[*]}: nothing was run"
    return 0
  fi
  save
  echo
  ls -l "$results"
  if ((${#failed[@]})); then
    echo "gpu-run.sh: FAILED: ${failed[*]}"
    exit 1
  fi
  echo "gpu-run.sh: every step passed: ${steps[*]}"
}

case "${1:-}" in
  bundle) bundle ;;
  bundle-peer)
    [[ -x $bundle/bin/qmvlab ]] || { echo "gpu-run.sh: no $bundle/bin/qmvlab: run 'scripts/gpu-run.sh bundle' first" >&2; exit 1; }
    bundle_peer
    pack_bundle
    ;;
  device) shift; device "$@" ;;
  *)
    echo "usage: scripts/gpu-run.sh bundle | bundle-peer | device [--dry-run] [STEP...] (see the comment at the top)" >&2
    exit 2
    ;;
esac
