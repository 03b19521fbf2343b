#!/usr/bin/env bash
# Configures and builds qmvlab (Release) into build/ (QMV_BUILD_DIR picks another).
# QMV_CUDA_ARCHS in the environment picks the CUDA archs (86;90, or all for
# 75;80;86;89;90); unset, a fresh build/ gets those of the GPUs present, else 90 alone.
# QMV_CUDA=off leaves the CUDA kernels out.
# The ggml peer kernels are built in whenever scripts/install-peers.sh's build is there
# (QMV_PEERS=off leaves them out; QMV_PEER_DIR picks another build of it, e.g.
# .peers/llama.cpp-avx2).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${QMV_BUILD_DIR:-build}
peer_dir=${QMV_PEER_DIR:-.peers/llama.cpp}
case "$peer_dir" in /*) ;; *) peer_dir=$PWD/$peer_dir ;; esac
peers=OFF
[ "${QMV_PEERS:-on}" != off ] && [ -e "$peer_dir/build/bin/libggml-cpu.so" ] && peers=ON
cuda=()
[ "${QMV_CUDA:-}" = off ] && cuda=(-DQMV_CUDA=OFF)
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DQMV_PEERS=$peers \
  -DQMV_PEER_DIR="$peer_dir" "${cuda[@]}" \
  ${QMV_CUDA_ARCHS:+"-DQMV_CUDA_ARCHS=$QMV_CUDA_ARCHS"} >/dev/null
cmake --build "$dir" -j"$(nproc)"
