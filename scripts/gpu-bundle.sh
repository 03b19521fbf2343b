#!/usr/bin/env bash
# The GPU bundle (scripts/gpu-run.sh bundle | bundle-peer runs this): what a machine with
# a CUDA driver and none of our libraries needs to run qmvlab and qmv_tests.
#
#   scripts/gpu-bundle.sh bundle       qmvlab and qmv_tests for sm_90 (H100/H200) with every
#                                      shared library they link except the C library's own, in
#                                      build/gpu-bundle/{bin,lib}; build/gpu-bundle/requires (the
#                                      driver and glibc the bundle needs); build/gpu-bundle/commit
#                                      (the commit its results rows name, through QMV_GIT_COMMIT);
#                                      build/gpu-bundle.tar.xz packs it for a runner that carries
#                                      little (ICU's data alone is 30 MiB). With the CUDA peer
#                                      built (scripts/install-peers.sh --isa cuda),
#                                      build/gpu-bundle/peer holds its llama-bench and the
#                                      llama/ggml libraries (cuBLAS is the GPU machine's own).
#   scripts/gpu-bundle.sh bundle-peer  the CUDA peer (QMV_PEER_CUDA_DIR, default
#                                      .peers/llama.cpp-cuda) into an existing bundle, repacked.
#   scripts/gpu-bundle.sh probe        on the GPU machine: the GPU, driver and glibc against
#                                      the bundle's requires; exit 1 where it cannot run
#   scripts/gpu-bundle.sh peer-libs    on the GPU machine: the loader path llama-bench needs
# gpu-run.sh sources it for use_bundle, which sets up the bundle's programs on the GPU machine.
#
# Environment: QMV_CUDA_ARCHS (default 90), QMV_GPU_BUILD_DIR (default build/gpu),
# QMV_GPU_BUNDLE (default build/gpu-bundle), QMV_PEER_CUDA_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${QMV_GPU_BUILD_DIR:-build/gpu}
bundle=${QMV_GPU_BUNDLE:-build/gpu-bundle}
# What a remote runner may carry to the GPU machine (64 MiB for the runner this was
# written for): the bundle and the working tree together.
max_carry_mib=62

bundle() {
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DQMV_CUDA=ON \
    -DQMV_CUDA_ARCHS="${QMV_CUDA_ARCHS:-90}" >/dev/null
  cmake --build "$build_dir" -j"$(nproc)" --target qmvlab qmv_tests
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  cp "$build_dir/qmvlab" "$build_dir/tests/qmv_tests" "$bundle/bin/"
  strip --strip-unneeded "$bundle/bin/qmvlab" "$bundle/bin/qmv_tests"
  # Every library the loader resolves, except the C library's family (the GPU
  # machine's own is newer, and mixing loaders breaks) and the CUDA driver (it must be
  # the machine's own).
  ldd "$bundle/bin/qmvlab" "$bundle/bin/qmv_tests" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    while read -r lib; do
      case "$(basename "$lib")" in
        libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | libresolv.so.* | ld-linux* | libcuda.so.*) ;;
        *) cp -L "$lib" "$bundle/lib/" ;;
      esac
    done
  # What the machine must have: the newest glibc symbol version any bundled file asks
  # for, and the driver the bundled CUDA runtime needs (CUDA 13 runtimes: driver 580).
  local glibc cudart_major driver=0
  glibc=$(objdump -T "$bundle"/bin/* "$bundle"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' |
    sort -uV | tail -1)
  cudart_major=$(cd "$bundle/lib" && ls libcudart.so.* 2>/dev/null | head -1 | sed -E 's/libcudart\.so\.([0-9]+).*/\1/')
  case "$cudart_major" in
    13) driver=580 ;;
    12) driver=525 ;;
  esac
  printf 'glibc %s\ndriver %s\n' "${glibc:-0}" "$driver" >"$bundle/requires"
  # The commit the results rows will name: the GPU machine's checkout, if any, is not
  # the tree this was built from.
  local commit
  commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  [[ -z $(git status --porcelain --untracked-files=no -- . ':!results' 2>/dev/null) ]] || commit+="+dirty"
  echo "$commit" >"$bundle/commit"
  bundle_peer
  pack_bundle
}

# build/gpu-bundle.tar.xz, its size against what a device call carries, and a check
# that the binaries start from the bundle alone.
pack_bundle() {
  # xz: the bundle packs to about a quarter of its size, which keeps it and the tree
  # under what a device call carries.
  tar -cJf "$bundle.tar.xz" -C "$(dirname "$bundle")" "$(basename "$bundle")"
  local mib tree_mib
  mib=$(du -sm "$bundle.tar.xz" | cut -f1)
  # The tree the GPU machine needs: the committed results/ (tens of MiB of CSVs and
  # plots) can stay behind, since the run writes results/<gpu>/ afresh.
  tree_mib=$(( $( (git ls-files -z -- ':!results'; git ls-files -z --others --exclude-standard -- ':!results') |
    du -cm --files0-from=- 2>/dev/null | tail -1 | cut -f1) ))
  echo "bundle: $bundle, $mib MiB packed in $bundle.tar.xz ($(tr '\n' ' ' <"$bundle/requires")); the tree" \
    "without results/: $tree_mib MiB"
  ls -l "$bundle/bin" "$bundle/lib"
  [[ ! -d $bundle/peer ]] || ls -l "$bundle/peer/bin" "$bundle/peer/lib"
  if ((mib + tree_mib > max_carry_mib)); then
    echo "gpu-bundle.sh: the bundle ($mib MiB) and the tree ($tree_mib MiB) exceed the $max_carry_mib MiB a device call carries" >&2
    exit 1
  fi
  # The binaries must start from the bundle alone (the loader finds nothing missing).
  if LD_LIBRARY_PATH="$bundle/lib" ldd "$bundle/bin/qmvlab" "$bundle/bin/qmv_tests" | grep -q "not found"; then
    echo "gpu-bundle.sh: a library is still missing:" >&2
    LD_LIBRARY_PATH="$bundle/lib" ldd "$bundle/bin/qmvlab" "$bundle/bin/qmv_tests" | grep "not found" >&2
    exit 1
  fi
}

# The CUDA peer, when .peers/llama.cpp-cuda holds it: llama-bench and every library it
# loads from its own build or this machine, except the C library's family, the driver
# and cuBLAS (hundreds of MiB: the GPU machine's toolkit has it). The CUDA runtime is
# the one in bundle/lib already.
peer_build=${QMV_PEER_CUDA_DIR:-.peers/llama.cpp-cuda}
bundle_peer() {
  rm -rf "$bundle/peer"
  if [[ ! -x $peer_build/build/bin/llama-bench ]]; then
    echo "bundle: no CUDA peer in $peer_build (scripts/install-peers.sh --isa cuda builds it): the peer step will refuse"
    return 0
  fi
  mkdir -p "$bundle/peer/bin" "$bundle/peer/lib"
  cp "$peer_build/build/bin/llama-bench" "$bundle/peer/bin/"
  cp "$peer_build/commit" "$bundle/peer/commit"
  ldd "$peer_build/build/bin/llama-bench" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    while read -r soname lib; do
      case "$soname" in
        libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | libresolv.so.* | ld-linux* | libcuda.so.*) ;;
        libcublas* | libcudart*) ;;
        *) cp -L "$lib" "$bundle/peer/lib/$soname" ;;
      esac
    done
  strip --strip-unneeded "$bundle/peer/bin/llama-bench" "$bundle/peer/lib/"*
}

# On the GPU machine: whether the bundle can run here (a GPU nvidia-smi sees, the driver
# and glibc `requires` names); the first line it cannot is the last, and the exit status 1.
probe() {
  echo "machine: $(uname -srm), $(nproc) cores"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem \
    --format=csv 2>&1 || true
  local driver glibc need_glibc need_driver
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | cut -d. -f1 || true)
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}' || true)
  need_glibc=$(awk '$1 == "glibc" {print $2}' "$bundle/requires" 2>/dev/null || echo 0)
  need_driver=$(awk '$1 == "driver" {print $2}' "$bundle/requires" 2>/dev/null || echo 0)
  echo "driver ${driver:-none}, glibc ${glibc:-unknown}; the bundle needs driver >= $need_driver, glibc >= $need_glibc"
  if [[ -z $driver ]]; then
    echo "gpu-bundle.sh: no CUDA device: nvidia-smi finds no GPU here, so nothing on the GPU can run"
    exit 1
  elif ((driver < need_driver)); then
    echo "gpu-bundle.sh: the bundle cannot run here: its CUDA runtime needs driver >= $need_driver, this machine has $driver"
    exit 1
  elif [[ -n $glibc && "$(printf '%s\n%s\n' "$need_glibc" "$glibc" | sort -V | head -1)" != "$need_glibc" ]]; then
    echo "gpu-bundle.sh: the bundle cannot run here: its libraries need glibc >= $need_glibc, this machine has $glibc"
    exit 1
  fi
}

# On the GPU machine: the folders holding cuBLAS, for the peer's loader: the toolkit's and
# the Python packages' (nvidia-cublas).
cublas_path() {
  local dir dirs=()
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(find /usr/local /opt /usr/lib -maxdepth 8 -name 'libcublas.so.*' -printf '%h\n' 2>/dev/null | sort -u); do
    [[ -d $dir ]] && dirs+=("$dir")
  done
  (IFS=:; echo "${dirs[*]}")
}

# On the GPU machine, sourced: the bundle unpacked if only its archive is here, its
# libraries on the loader's path, its commit for the results rows, and the paths of
# its programs in qmvlab, tests and peer_bench; gpu, the GPU's name as a folder name.
use_bundle() {
  [[ -x $bundle/bin/qmvlab || ! -s $bundle.tar.xz ]] || tar -xJf "$bundle.tar.xz" -C "$(dirname "$bundle")"
  if [[ ! -x $bundle/bin/qmvlab ]]; then
    echo "gpu-run.sh: no $bundle/bin/qmvlab: run 'scripts/gpu-run.sh bundle' on the build machine and carry" \
      "$bundle.tar.xz (or $bundle)" >&2
    exit 1
  fi
  bundle=$(cd "$bundle" && pwd)
  export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [[ ! -s $bundle/commit ]] || export QMV_GIT_COMMIT="$(cat "$bundle/commit")"
  qmvlab=$bundle/bin/qmvlab tests=$bundle/bin/qmv_tests peer_bench=$bundle/peer/bin/llama-bench
  gpu=$({ nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true; } | head -1 |
    tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+//; s/-+$//')
  gpu=${gpu:-unknown-gpu}
}

# The loader path llama-bench runs with: the peer's libraries and the machine's cuBLAS.
# Exit 1 naming what it still cannot find.
peer_libs() {
  local libs missing
  libs="$bundle/peer/lib:$(cublas_path)"
  missing=$(LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}" ldd "$bundle/peer/bin/llama-bench" | awk '/not found/ {print $1}' |
    paste -sd' ')
  [[ -z $missing ]] || { echo "$missing"; exit 1; }
  echo "$libs"
}

[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0
case "${1:-}" in
  bundle) bundle ;;
  probe) probe ;;
  peer-libs) peer_libs ;;
  bundle-peer)
    [[ -x $bundle/bin/qmvlab ]] || { echo "gpu-bundle.sh: no $bundle/bin/qmvlab: run 'scripts/gpu-run.sh bundle' first" >&2; exit 1; }
    bundle_peer
    pack_bundle
    ;;
  *) echo "usage: scripts/gpu-bundle.sh bundle | bundle-peer | probe | peer-libs (see the comment at the top)" >&2; exit 2 ;;
esac
