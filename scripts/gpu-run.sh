#!/usr/bin/env bash
# The GPU run: a bundle built here (scripts/gpu-bundle.sh), its steps run on a machine with
# a CUDA device, each under a time limit within the call's budget (scripts/step-runner.sh).
#   scripts/gpu-run.sh bundle | bundle-peer        here: scripts/gpu-bundle.sh's bundle
#   scripts/gpu-run.sh device [--dry-run] [STEP..] there (a CUDA driver, no network, none of
#                                                  our libraries); --dry-run prints the commands
# Steps, in the order given (default: probe list peak check tests bench; harness/README.md,
# "On a GPU", says what each runs): probe list peak check tests bench batch ffn profile
# sanitize accuracy decode realmodel ab peer. Logs and CSVs go to results/<gpu>/ (QMV_GPU_RESULTS)
# as each step ends; the run fails (exit 1) naming every step that failed or ran nothing.
# A kernel that failed check (each kernel in a process of its own: check --isolate), or
# that QMV_GPU_EXCLUDE's globs name, is left out of the steps after it. Environment:
# QMV_GPU_KERNELS (default '*.cuda.*'), QMV_OVERLAP_KERNELS, QMV_PROFILE_KERNELS,
# QMV_SANITIZE_KERNELS, QMV_BATCH_KERNELS, QMV_GPU_BUNDLE, QMV_GPU_MODEL (the decode model,
# made when missing), QMV_REAL_MODEL, QMV_AB_ROUNDS, QMV_PEER_ROUNDS, QMV_TUNING_STORE (the GPU's
# tuning store; default tuning.csv in the results folder), and step-runner.sh's budget.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/step-runner.sh
source scripts/gpu-bundle.sh  # use_bundle

step_probe() {
  ((dry_run == 0)) || { echo "== probe: nvidia-smi --query-gpu=name,driver_version,... against $bundle/requires"; return 0; }
  local status=0
  QMV_GPU_BUNDLE=$bundle scripts/gpu-bundle.sh probe | tee "$results/probe.log" || status=${PIPESTATUS[0]}
  save
  ((status == 0)) || exit 1
}

# QMV_GPU_KERNELS (or $1) without the kernels that failed check or QMV_GPU_EXCLUDE names.
selected_kernels() {
  local globs=${1:-$kernels} k
  for k in "${excluded[@]}"; do globs+=",!$k"; done
  echo "$globs"
}
plan_excluded() {  # true when a decode plan (type=kernel,...) names a kernel left out
  local choice k
  # shellcheck disable=SC2053  # the right side is a glob
  for choice in ${1//,/ }; do for k in "${excluded[@]}"; do [[ ${choice#*=} != $k ]] || return 0; done; done
  return 1
}

step_list() {
  run_step list "$qmvlab" list --kernels "$kernels"
  require_in_log list '\| +yes +\|' "no CUDA kernel is available on this device"
}
step_peak() {
  run_step peak "$qmvlab" peak --threads all --out "$results/peak.csv" \
    --gpu-windows 1048576,4194304,q4_K:4096x4096,q4_K:4096x14336,q6_K:4096x14336,q6_K:32000x4096,134217728
  require_in_log peak 'GPU read peak \(' "the GPU read peak was not measured"
}

step_check() {
  run_step check "$qmvlab" check --isolate --kernels "$kernels" --shapes default,128256x4096 --out "$results/check.csv"
  require_in_log check '^check: [1-9][0-9]* passed' "no CUDA kernel passed a check"
  ((dry_run == 0)) || return 0
  excluded+=($(awk '$1 == "FAIL" {print $2}' "$results/check.log" | sort -u))
  ((${#excluded[@]} == 0)) || echo "gpu-run.sh: the steps after check leave out: ${excluded[*]}"
}
step_tests() {  # the device tests only: the CPU replays of the CUDA arithmetic run in CI
  local device_tests='Cuda.*:CudaExecute.*:CudaDeathTest.*:CudaBench.*:CudaQuantize.*:GpuForwardDevice.*'
  # The tests keep their rows in a store of their own, never the run's.
  local store=$QMV_TUNING_STORE
  unset QMV_TUNING_STORE
  run_step tests "$tests" --gtest_filter="$device_tests:Registry/BatchKernel.*cuda*:AutoPlan.OnTheGpu*"
  require_in_log tests '\[  PASSED  \] [1-9]' "no device test passed"
  rerun_alone tests "$tests"
  export QMV_TUNING_STORE=$store
  ! grep -q '\[  SKIPPED \]' "$results/tests.log" 2>/dev/null || failed+=("tests (skipped on a device)")
}

bench() {  # bench NAME CSV KERNELS SHAPES [OPTIONS...]: fails when nothing was timed
  local name=$1 csv=$2 sel=$3 shapes=$4 && shift 4
  run_step "$name" "$qmvlab" bench --kernels "$(selected_kernels "$sel")" --shapes "$shapes" --min-time 0.05 "$@" \
    --out "$results/$csv"
  require_in_log "$name" 'GB/s' "no kernel was timed"
}
step_bench() { bench bench bench.csv "$kernels" llama-2-7b,llama-3-8b; }
step_ffn() {  # from the host, from CUDA graphs, and as programmatic dependents
  local ffn=4096x14336,14336x4096
  bench ffn bench-ffn.csv "$kernels" $ffn --reps 7
  bench ffn-graph bench-ffn-graph.csv "$kernels" $ffn --reps 7 --gpu-graph
  bench ffn-overlap bench-ffn-overlap.csv \
    "${QMV_OVERLAP_KERNELS:-*.cuda.tma_*,q4_K.cuda.halfwarp_dp4a_q8_1,q6_K.cuda.halfwarp_dp4a_q8_1}" $ffn \
    --reps 7 --gpu-graph --gpu-overlap
}

step_batch() {  # the batch kernels at each count of vectors, beside the one-vector kernels they extend
  local sel=${QMV_BATCH_KERNELS:-*.cuda.*_batch_*,q4_K.cuda.halfwarp_dp4a_q8_1,q6_K.cuda.halfwarp_dp4a_q8_1}
  bench batch bench-batch.csv "$sel" llama-2-7b --n 1,2,3,4,5,6,7,8 --reps 5
  bench batch-graph bench-batch-graph.csv "$sel" llama-2-7b --n 1,2,4,8 --reps 5 --gpu-graph
}

step_sanitize() {  # a kernel that failed check stays in: its fault is what the tools are for
  local t sanitizer=$(find_tool compute-sanitizer /usr/local/cuda/bin/compute-sanitizer)
  [[ -n $sanitizer ]] || { missing sanitize compute-sanitizer; return 0; }
  for t in memcheck racecheck synccheck; do
    run_step "sanitize-$t" "$sanitizer" --tool "$t" --error-exitcode 3 "$qmvlab" check \
      --kernels "${QMV_SANITIZE_KERNELS:-*.cuda.tma_*,*.cuda.quarterwarp_*}" --shapes 8x256,67x512,4096x4096 --seed 7
    # racecheck ends with a summary of its own: "RACECHECK SUMMARY: 0 hazards displayed (0 errors, ..."
    require_in_log "sanitize-$t" 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors' \
      "compute-sanitizer $t did not report 0 errors"
  done
}
step_profile() {  # one launch per kernel and shape, caches flushed between replays
  local ncu=$(find_tool ncu /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu)
  local m=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
  [[ -n $ncu ]] || { missing profile ncu; return 0; }
  m+=,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed
  m+=,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active
  m+=,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size
  m+=,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
  run_step profile "$ncu" --csv --metrics "$m" --cache-control all --clock-control none "$qmvlab" check \
    --kernels "$(selected_kernels "${QMV_PROFILE_KERNELS:-q4_K.cuda.*,q6_K.cuda.*}")" --shapes 4096x14336,14336x4096 --seed 7
  require_in_log profile 'dram__throughput' "ncu read no counter"
}

step_accuracy() { run_step accuracy "$qmvlab" accuracy --kernels "$(selected_kernels)" --out "$results/accuracy.csv"; }
# The Llama-2-7B-shaped Q4_K_M model the decode, ab and peer steps read, made when missing.
model=${QMV_GPU_MODEL:-/tmp/qmv-models/llama-2-7b-q4_K_m.gguf}
make_decode_model() {
  ((dry_run)) || mkdir -p "$(dirname "$model")"
  [[ -s $model ]] || run_step make-model "$qmvlab" make-model --preset llama-2-7b --mix q4_K_m --out "$model"
}
bulk='q4_K=q4_K.cuda.tma_dp4a_q8_1,q6_K=q6_K.cuda.tma_dp4a_q8_1'
int8='q4_K=q4_K.cuda.halfwarp_dp4a_q8_1,q6_K=q6_K.cuda.halfwarp_dp4a_q8_1'
decode() {  # decode NAME [OPTIONS...]: 128 tokens of the model on the GPU, a row in decode.csv
  local name=$1 plan && shift
  for plan in "$bulk" "$int8"; do
    [[ " $* " != *" $plan "* ]] || ! plan_excluded "$plan" || { echo "gpu-run.sh: $name: not run, its plan names a kernel left out ($plan)"; return 0; }
  done
  run_step "$name" "$qmvlab" decode --model "$model" --device cuda --prompt-tokens 1,450,4996,310,278,3303,338 -n 128 \
    --ignore-eos --quiet "$@" --out "$results/decode.csv"
}

step_decode() {  # the auto plan first, so a run cut short keeps the headline
  make_decode_model
  decode decode
  # The GPU's store now holds every matvec the first decode lacked: the second times nothing.
  decode decode-again
  require_in_log decode-again 'nothing timed' "the second auto decode timed kernels again"
  decode decode-fused-attention --fuse-attention
  decode decode-separate-attention --no-fuse-attention
  decode decode-tma --plan "$bulk" --fuse-attention
  decode decode-tma-overlap --plan "$bulk" --fuse-attention --overlap-weights
  decode decode-qkv-apart --no-stack-qkv
  decode decode-apart --no-stack-gate-up
  local left_out=$(IFS=,; echo "${excluded[*]}")
  run_step plan-sweep python3 scripts/plan_sweep.py --qmvlab "$qmvlab" --model "$model" --device cuda --plans gpu \
    ${left_out:+--exclude "$left_out"} --reference-plan 'q4_K=q4_K.cpu.avx2_f32,q6_K=q6_K.cpu.avx2_f32' \
    --out "$results/decode-plans.csv" --log "$results/plan-sweep-commands.log"
  require_in_log plan-sweep 'tok/s' "no plan decoded"
  decode decode-int8 --plan "$int8"
  decode decode-routed --plan "$int8" --route-outliers
}

step_realmodel() {
  local m=${QMV_REAL_MODEL:-$(ls models/*.gguf 2>/dev/null | head -1 || true)} d
  [[ -s $m ]] || { missing realmodel "model file (QMV_REAL_MODEL or models/*.gguf)"; return 0; }
  for d in gpu cpu; do
    run_step "realmodel-$d" "$qmvlab" decode --model "$m" --prompt "The capital of France is" -n 48 --quiet \
      --device "${d/gpu/cuda}" --json "$results/realmodel-$d.json"
  done
  [[ ! -s $results/realmodel-gpu.json || ! -s $results/realmodel-cpu.json ]] || python3 scripts/greedy_agreement.py \
    "$results/realmodel-cpu.json" "$results/realmodel-gpu.json" | tee "$results/realmodel.log"
  save
}

step_ab() {
  make_decode_model
  local ab=(python3 scripts/decode_ab.py --qmvlab "$qmvlab" --model "$model" "--extra=--device cuda" -n 128
    --rounds "${QMV_AB_ROUNDS:-1}" --out "$results/decode-ab.csv") name
  run_step ab-fused-attention "${ab[@]}" --a=--no-fuse-attention --b=--fuse-attention
  run_step ab-stacked-qkv "${ab[@]}" --a=--no-stack-qkv --b=
  if plan_excluded "$bulk"; then echo "gpu-run.sh: ab-overlap: not run, its plan names a kernel left out ($bulk)"
  else run_step ab-overlap "${ab[@]}" "--a=--plan $bulk --fuse-attention" "--b=--plan $bulk --fuse-attention --overlap-weights"; fi
  for name in ab-fused-attention ab-stacked-qkv ab-overlap; do
    [[ ! -e $results/$name.log ]] || require_in_log "$name" 'tok/s' "no A/B ratio"
  done
}

needs_peer() {
  [[ -x $peer_bench ]] || echo "gpu-run.sh: peer: the bundle holds no CUDA llama-bench ($peer_bench): build it with" \
    "'scripts/install-peers.sh --isa cuda', then 'scripts/gpu-run.sh bundle'"
}
step_peer() {  # the peer's libraries for llama-bench alone: its ggml is not the one qmvlab links
  make_decode_model
  local libs
  if ! libs=$(QMV_GPU_BUNDLE=$bundle scripts/gpu-bundle.sh peer-libs) && ((dry_run == 0)); then
    missing peer "library llama-bench loads: $libs"
    return 0
  fi
  local compare=(python3 scripts/compare_llamacpp.py --device cuda --model "$model" --qmvlab "$qmvlab"
    --llama-bench "$peer_bench" --llama-bench-libs "$libs" --threads "$(nproc)" -n 64
    --rounds "${QMV_PEER_ROUNDS:-3}" --out "$results/decode-vs-llamacpp.csv")
  run_step peer "${compare[@]}"
  ((dry_run == 0)) || "${compare[@]}" --dry-run
  require_in_log peer '^\| .*\.gguf \|' "no comparison row was written"
}

device() {
  dry_run=0
  [[ ${1:-} != --dry-run ]] || { dry_run=1; shift; }
  use_bundle
  kernels=${QMV_GPU_KERNELS:-*.cuda.*}
  results=${QMV_GPU_RESULTS:-results/$gpu}
  # The GPU's tuning store lies in the results folder, so it comes back with the run.
  export QMV_TUNING_STORE=${QMV_TUNING_STORE:-$results/tuning.csv}
  IFS=, read -r -a excluded <<<"${QMV_GPU_EXCLUDE:-}"
  local steps=("$@")
  ((${#steps[@]})) || steps=(probe list peak check tests bench)
  [[ ${steps[0]} == probe ]] || steps=(probe "${steps[@]}")
  run_steps "${steps[@]}"
}

case "${1:-}" in
  bundle | bundle-peer) exec scripts/gpu-bundle.sh "$@" ;;
  device) shift; device "$@" ;;
  *) echo "usage: scripts/gpu-run.sh bundle | bundle-peer | device [--dry-run] [STEP...] (see the top)" >&2; exit 2 ;;
esac
