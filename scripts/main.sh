#!/usr/bin/env bash
# The main job on this machine: install, build, measure the read bandwidth, check
# every kernel on every default shape, time every kernel, write results/<machine>/
# (CSVs and a plot) and print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
q=build/qmvlab
$q list
$q peak --out 'results/{machine}/peak.csv'
$q check --out 'results/{machine}/check.csv'
$q bench --out 'results/{machine}/bench.csv' "$@"
machine=$($q list --machine)
.venv/bin/python scripts/plot.py "results/$machine/bench.csv"
echo
$q report "results/$machine/peak.csv" "results/$machine/bench.csv"
