#!/usr/bin/env bash
# The main job on this machine: install, build, measure the read bandwidth, check
# every kernel on every default shape, run the default experiment (every CPU kernel on
# the Llama-2-7B and TinyLlama-1.1B shapes, 1 and all threads, cold), write
# results/<machine>/ (CSVs and plots) and print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
q=build/qmvlab
machine=$($q list --machine)
$q list
$q peak --out 'results/{machine}/peak.csv'
$q check --out 'results/{machine}/check.csv'
$q sweep experiments/default.toml "$@"
.venv/bin/python scripts/plot.py "results/$machine/default.csv" --kind all --check "results/$machine/check.csv"
echo
$q report "results/$machine/peak.csv" "results/$machine/default.csv"
