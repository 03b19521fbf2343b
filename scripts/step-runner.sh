# shellcheck shell=bash
# Steps with a budget, sourced by scripts/gpu-run.sh: each step's command runs under a time
# limit, its output to the terminal and to $results/<step>.log, and $results is packed
# into $OUT/$gpu.tar.gz after every step (where OUT is set: a folder a remote runner
# copies back), so a run stopped at a time limit keeps what finished.
#
# The caller sets results, gpu and dry_run (1: print each command, run none), defines a
# step_<NAME> function per step, and calls run_steps. QMV_GPU_STEP_TIMEOUT: seconds per
# step (default 420); QMV_GPU_BUDGET: seconds for the whole call, counted from the script's
# start: each step's limit is cut to what is left, keeping budget_reserve_s for the last
# packing; a step with less than min_step_s left is not started but named. A runner that
# kills the call at its own limit loses the step it cuts and the summary; a budget a little
# under that limit does not. QMV_GPU_BUDGET_RESERVE sets that reserve (default 15 s).
budget_reserve_s=${QMV_GPU_BUDGET_RESERVE:-15}
min_step_s=10

check_step_limits() {
  local var
  for var in QMV_GPU_BUDGET QMV_GPU_STEP_TIMEOUT; do
    if [[ -n ${!var:-} && ! ${!var} =~ ^[1-9][0-9]*$ ]]; then
      echo "gpu-run.sh: $var must be a whole number of seconds, not '${!var}'" >&2
      exit 2
    fi
  done
  if [[ ! $budget_reserve_s =~ ^[0-9]+$ ]]; then
    echo "gpu-run.sh: QMV_GPU_BUDGET_RESERVE must be a whole number of seconds, not '$budget_reserve_s'" >&2
    exit 2
  fi
}

# Packs $results into $OUT, written under another name and renamed; a failed packing is
# reported, not fatal: the steps after it still run.
save() {
  ((dry_run == 0)) && [[ -n ${OUT:-} ]] || return 0
  tar -czf "$OUT/.partial.tar.gz" -C "$(dirname "$results")" "$(basename "$results")" &&
    mv "$OUT/.partial.tar.gz" "$OUT/$gpu.tar.gz" ||
    echo "gpu-run.sh: could not pack $results into $OUT/$gpu.tar.gz" >&2
}

# The seconds a command may run now; 0 when too little is left to start anything.
step_seconds() {
  local limit=${QMV_GPU_STEP_TIMEOUT:-420}
  if [[ -n ${QMV_GPU_BUDGET:-} ]]; then
    local left=$((QMV_GPU_BUDGET - SECONDS - budget_reserve_s))
    ((left >= limit)) || limit=$left
    ((limit >= min_step_s)) || limit=0
  fi
  echo "$limit"
}

# run_step NAME COMMAND...: runs it with the step's limit; records a failure under NAME.
run_step() {
  local name=$1
  shift
  echo
  echo "== $name: $*"
  ((dry_run == 0)) || return 0
  local limit start=$SECONDS status=0
  limit=$(step_seconds)
  if ((limit == 0)); then
    echo "== $name: not started, the call's budget is spent (QMV_GPU_BUDGET=$QMV_GPU_BUDGET s, $SECONDS s gone)" |
      tee "$results/$name.log"
    unfinished+=("$name")
    failed+=("$name (not started: budget spent)")
    return 0
  fi
  timeout --signal=INT --kill-after=10 "$limit" "$@" 2>&1 | tee "$results/$name.log" || status=${PIPESTATUS[0]}
  echo "== $name: exit $status after $((SECONDS - start)) s"
  if ((status == 124 || status == 137)); then  # timeout's: stopped at the limit
    unfinished+=("$name")
    failed+=("$name (stopped at its $limit s limit)")
  elif ((status != 0)); then
    failed+=("$name (exit $status)")
  fi
  save
}

is_unfinished() { [[ " ${unfinished[*]:-} " == *" $1 "* ]]; }

# require_in_log NAME REGEX WHY: fails the step when its log has no match (an extended
# regex), unless it is unfinished: nothing passes by running nothing.
require_in_log() {
  local name=$1 pattern=$2 why=$3
  ((dry_run == 0)) && ! is_unfinished "$name" || return 0
  if ! grep -Eq "$pattern" "$results/$name.log"; then
    echo "gpu-run.sh: $name: $why"
    failed+=("$name ($why)")
  fi
}

# rerun_alone NAME TEST_BINARY: each GoogleTest test that failed in step NAME runs again
# alone (at most 30, each within 120 s and the budget), into $results/NAME-alone.log: a
# test that faulted takes the tests after it down with its CUDA context, and "fails
# alone" tells the culprit from those that only followed it.
rerun_alone() {
  local name=$1 binary=$2 t reruns=0 limit log=$results/$1-alone.log
  ((dry_run == 0)) || return 0
  rm -f "$log"
  for t in $(grep -oE '^\[  FAILED  \] [A-Za-z0-9_]+\.[A-Za-z0-9_/]+' "$results/$name.log" | awk '{print $NF}' | sort -u); do
    limit=$(step_seconds)
    ((limit <= 120)) || limit=120
    if ((++reruns > 30 || limit == 0)); then
      echo "gpu-run.sh: $name: more than 30 failed or the budget is spent; the rest not run again alone" | tee -a "$log"
      break
    fi
    if timeout --signal=INT --kill-after=10 "$limit" "$binary" --gtest_filter="$t" >>"$log" 2>&1; then
      echo "gpu-run.sh: $name: passes alone: $t (it failed after an earlier test's fault)" | tee -a "$log"
    else
      echo "gpu-run.sh: $name: fails alone: $t" | tee -a "$log"
    fi
  done
  save
}

# missing NAME WHAT: step NAME cannot run here, for want of WHAT; a failure, never a skip.
missing() {
  local why="gpu-run.sh: $1: no $2 on this machine"
  echo "$why"
  ((dry_run)) || echo "$why" >"$results/$1.log"
  failed+=("$1 (no $2)")
}

# A tool on PATH, or the first of the other places it is installed (globs).
find_tool() { command -v "$1" || ls "${@:2}" 2>/dev/null | head -1 || true; }

# run_steps STEP...: each step's function step_<STEP>, in order, once every name is known
# and each step's needs_<STEP> (where there is one) printed nothing: what it prints is why
# the step cannot run, refused before any time is spent; then the summary: exit 1 naming
# every failure, or the steps that all passed.
run_steps() {
  local s why
  check_step_limits
  for s in "$@"; do
    [[ $(type -t "step_$s") == function ]] || { echo "gpu-run.sh: unknown step '$s'" >&2; exit 2; }
    why=
    [[ $(type -t "needs_$s") != function ]] || why=$("needs_$s")
    [[ -z $why ]] || { echo "$why" >&2; exit 2; }
  done
  failed=() unfinished=()
  ((dry_run)) || mkdir -p "$results"
  for s in "$@"; do "step_$s"; done
  ((dry_run == 0)) || { echo; echo "gpu-run.sh: dry run of $*: nothing was run"; return 0; }
  save
  echo
  ls -l "$results"
  ((${#failed[@]} == 0)) || { echo "gpu-run.sh: FAILED: ${failed[*]}"; exit 1; }
  echo "gpu-run.sh: every step passed: $*"
}
