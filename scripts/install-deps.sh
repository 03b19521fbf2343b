#!/usr/bin/env bash
# Installs what qmvlab needs on a fresh Debian/Ubuntu machine; a no-op when all is
# there. Called by both README commands and by CI.
set -euo pipefail
cd "$(dirname "$0")/.."

# slurm-wlm and munge: the Slurm sweep test (tests/slurm_sweep_test.py) starts a one-node
# cluster of its own from them; nothing here configures or starts their services.
packages=(build-essential cmake git python3 python3-venv
          libeigen3-dev libbenchmark-dev libgtest-dev libcli11-dev libtomlplusplus-dev
          libfccp-dev libcpuinfo-dev libfmt-dev libicu-dev nlohmann-json3-dev clang libclang-rt-14-dev
          valgrind slurm-wlm munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python for the gguf cross-check (and plots): a project-local venv, pinned versions.
if ! .venv/bin/python -c "import gguf, numpy, matplotlib, tokenizers, sentencepiece" 2>/dev/null; then
  echo "creating .venv with gguf, numpy, matplotlib, tokenizers and sentencepiece"
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r scripts/requirements.txt
fi
