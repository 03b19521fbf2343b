#!/usr/bin/env bash
# The main job on this machine: install (the pinned ggml/llama.cpp peers included),
# build, measure the read bandwidth, check every kernel on every default shape, run
# the default experiment (every CPU kernel and ggml's on the Llama-2-7B and
# TinyLlama-1.1B shapes, 1 and all threads, cold), time qmvlab's default decode against
# llama.cpp (llama-bench, same threads) on a real model, its Q4_K_M requant and a
# synthetic TinyLlama Q4_K_M, set the default plan against the one `tune` finds, write
# results/<machine>/ (CSVs, the tuning store, plots, REPORT.md) and print the one-screen
# report. The peak and the sweep fill the tuning store (results/<machine>/tuning.csv)
# that the default decode picks its kernels from.
#
# On a CPU with AVX-512 it then does it all again as an AVX2-only machine would:
# qmvlab under `--cpu-features avx2,fma,f16c` against ggml and llama.cpp built for
# AVX2 (scripts/install-peers.sh --isa avx2, qmvlab in build/avx2), into
# results/<machine>-isa-avx2-fma-f16c/. QMV_AVX2_PASS=off skips that pass.
#
# Progress goes to stderr; each step's full tables to build/main-logs/<machine>/ (and
# the CSVs). Extra arguments go to the sweeps (e.g. --resume).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/install-peers.sh
mkdir -p build/main-logs
echo "== build (log: build/main-logs/build.txt)" >&2
scripts/build.sh >build/main-logs/build.txt

scripts/get-model.sh >/dev/null || echo "real model not available (no PyPI access?): its decode is skipped" >&2
tiny=models/synthetic-tinyllama-1.1b-q4_K_m.gguf
[ -s "$tiny" ] || build/qmvlab make-model --preset tinyllama-1.1b --mix q4_K_m --seed 1 --out "$tiny" >&2

# Every measurement of one qmvlab build against one llama-bench, into results/<machine>/
# (the machine name records an ISA mask).
measure() {
  local q=$1 llama_bench=$2
  shift 2
  local machine out logs
  machine=$($q list --machine)
  out=results/$machine
  logs=build/main-logs/$machine
  mkdir -p "$logs"
  # A step's stdout to its log; every 100th line of it (progress) and its last line
  # (the summary) to stderr.
  step() {
    local name=$1
    shift
    echo "== $machine $name: $*" >&2
    "$@" | tee "$logs/$name.txt" | awk 'NR % 100 == 0' >&2
    tail -n 1 "$logs/$name.txt" >&2
  }
  $q list | sed -n 1,2p >&2
  step peak $q peak --out "$out/peak.csv"
  step check $q check --out "$out/check.csv"
  step sweep $q sweep experiments/default.toml "$@"
  step plots .venv/bin/python scripts/plot.py "$out/default.csv" --kind all --check "$out/check.csv"

  rm -f "$out/decode-vs-llamacpp.csv"
  local rc=0
  echo "== $machine decode against llama.cpp" >&2
  # Five alternating rounds: the host's slow spells last a round or two, and the ratio
  # is the median's.
  .venv/bin/python scripts/compare_llamacpp.py --threads "$(nproc)" --qmvlab "$q" --llama-bench "$llama_bench" \
    --rounds 5 --out "$out/decode-vs-llamacpp.csv" >"$logs/decode.txt" || rc=$?
  # 3: the pinned llama-bench is not there (QMV_PEERS=off); the report says so.
  [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || exit "$rc"

  # The default plan (auto: per matvec the kernel fastest in this machine's tuning store,
  # which the sweep filled) against the plan `tune` finds (every kernel checked and timed
  # on the model's own matvecs), decoded in alternating rounds into decode.csv.
  local plan_file
  plan_file="$out/tune-$(basename "$tiny" .gguf).toml"
  step tune $q tune --model "$tiny" --threads "$(nproc)" --out "$plan_file" --no-decode
  rm -f "$out/decode.csv"
  step plans .venv/bin/python scripts/decode_ab.py --qmvlab "$q" --model "$tiny" --threads "$(nproc)" -n 64 \
    --rounds 3 --b "--plan $plan_file" --out "$out/decode.csv"
  $q report --summary "$out"
}

measure build/qmvlab .peers/llama.cpp/build/bin/llama-bench "$@"

if [ "${QMV_AVX2_PASS:-on}" != off ] && grep -m1 '^flags' /proc/cpuinfo | grep -qw avx512f; then
  echo "== the AVX2 pass: qmvlab as on an AVX2-only CPU, against ggml built for AVX2" >&2
  scripts/install-peers.sh --isa avx2
  QMV_BUILD_DIR=build/avx2 QMV_PEER_DIR=.peers/llama.cpp-avx2 QMV_CUDA=off scripts/build.sh \
    >build/main-logs/build-avx2.txt
  QMV_CPU_FEATURES=avx2,fma,f16c measure build/avx2/qmvlab .peers/llama.cpp-avx2/build/bin/llama-bench "$@"
fi
