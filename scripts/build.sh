#!/usr/bin/env bash
# Configures and builds qmvlab (Release) into build/.
# QMV_CUDA_ARCHS in the environment picks the CUDA archs (e.g. QMV_CUDA_ARCHS=90, as
# CI does to save time); unset, a fresh build/ gets the documented list 75;80;86;89;90.
# The ggml peer kernels are built in whenever scripts/install-peers.sh's build is there
# (QMV_PEERS=off leaves them out).
set -euo pipefail
cd "$(dirname "$0")/.."
peers=OFF
[ "${QMV_PEERS:-on}" != off ] && [ -e .peers/llama.cpp/build/bin/libggml-cpu.so ] && peers=ON
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DQMV_PEERS=$peers \
  ${QMV_CUDA_ARCHS:+"-DQMV_CUDA_ARCHS=$QMV_CUDA_ARCHS"} >/dev/null
cmake --build build -j"$(nproc)"
