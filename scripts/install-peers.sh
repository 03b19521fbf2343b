#!/usr/bin/env bash
# Builds the peers qmvlab is measured against: ggml and llama.cpp from the sources
# inside one pinned PyPI sdist (llama-cpp-python vendors llama.cpp, ggml included),
# so the only network it needs is PyPI. Builds the CPU backend native to this machine
# (what a user building llama.cpp here gets) plus llama-bench, llama-batched-bench and
# llama-quantize, into the ignored folder .peers/llama.cpp-<version>/; .peers/llama.cpp
# points at it.
# A no-op when that build is there and was made on a CPU with the same features.
# ggml and libllama build as Release (-O3); llama.cpp's `common` library, which nothing
# llama-bench times, at -O1 (scripts/llamacpp-untimed-O1.cmake), to build quicker.
#
# AMX is compiled out: ggml's AMX matmul crashes (SIGSEGV in
# ggml_backend_amx_mul_mat) on CPUs that have it.
#
# --isa avx2 builds instead the CPU backend an AVX2-only machine runs (ggml's own
# "haswell" level: AVX2, FMA, F16C, BMI2; no AVX-512), into .peers/llama.cpp-<version>-avx2
# with the link .peers/llama.cpp-avx2: the peer for runs under
# `--cpu-features avx2,fma,f16c` on a machine with more.
#
# --isa cuda builds llama-bench with ggml's CUDA backend for one architecture
# (QMV_PEER_CUDA_ARCH, default 90: the H100 and H200), flash-attention kernels and
# NCCL off, the CPU backend at the AVX2 level so it runs on whichever host the GPU
# sits in, into .peers/llama.cpp-<version>-cuda (link .peers/llama.cpp-cuda): the GPU
# peer that scripts/gpu-run.sh bundles and runs on a lent GPU machine. It needs nvcc,
# not a GPU; the binaries use the CUDA runtime and cuBLAS of the machine they run on.
# LLAMA_CPP_PYTHON_VERSION picks another pinned version; QMV_PEERS=off skips the peers;
# CUDACXX names the nvcc of --isa cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${QMV_PEERS:-on}" = off ] && { echo "peers: skipped (QMV_PEERS=off)"; exit 0; }

isa=native
case "${1:-}" in
  "") ;;
  --isa) isa=${2:-} ;;
  --isa=*) isa=${1#--isa=} ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "install-peers.sh: unknown argument '$1' (usage: install-peers.sh [--isa native|avx2|cuda])" >&2; exit 2 ;;
esac
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
case "$isa" in
  native)
    prefix=.peers/llama.cpp-$version
    link=llama.cpp
    # The build is native, so it is only valid on a CPU with the same flags.
    cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|f16c|amx)' | sort | tr '\n' ' ')
    stamp="llama-cpp-python==$version native: $cpu_flags"
    isa_flags=(-DGGML_NATIVE=ON)
    ;;
  avx2)
    prefix=.peers/llama.cpp-$version-avx2
    link=llama.cpp-avx2
    for f in avx2 fma f16c bmi2; do
      grep -m1 '^flags' /proc/cpuinfo | grep -qw "$f" ||
        { echo "install-peers.sh: --isa avx2 needs a CPU with $f" >&2; exit 2; }
    done
    stamp="llama-cpp-python==$version avx2: avx2 fma f16c bmi2"
    isa_flags=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
      -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
      -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
    ;;
  cuda)
    cuda_arch=${QMV_PEER_CUDA_ARCH:-90}
    prefix=.peers/llama.cpp-$version-cuda
    link=llama.cpp-cuda
    # CUDACXX, as CMake reads it, else nvcc on the PATH, else the toolkit's usual place.
    nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
    [ -x "$nvcc" ] || { echo "install-peers.sh: --isa cuda needs nvcc, the CUDA toolkit's compiler ($nvcc is not there)" >&2; exit 2; }
    stamp="llama-cpp-python==$version cuda: sm_$cuda_arch, CPU backend avx2"
    isa_flags=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
      -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
      -DGGML_AMX_BF16=OFF -DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$cuda_arch" -DGGML_CUDA_FA=OFF
      -DGGML_CUDA_NCCL=OFF
      # libggml-cuda calls the driver (libcuda.so.1), which a machine without a GPU
      # lacks: the executables link without resolving it; the GPU machine's loader does.
      "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined")
    isa_flags+=("-DCMAKE_CUDA_COMPILER=$nvcc")
    ;;
  *) echo "install-peers.sh: unknown --isa '$isa' (native, avx2 or cuda)" >&2; exit 2 ;;
esac
# llama-batched-bench: the peer of `qmvlab decode --batch` (scripts/compare_llamacpp.py --batch).
bins=(llama-bench llama-quantize llama-batched-bench)
[ "$isa" = cuda ] && bins=(llama-bench)
backend_libs=(ggml ggml-base ggml-cpu llama)
[ "$isa" = cuda ] && backend_libs+=(ggml-cuda)

built() {
  [ -f "$prefix/stamp" ] && [ "$(cat "$prefix/stamp")" = "$stamp" ] || return 1
  for b in "${bins[@]}"; do [ -x "$prefix/build/bin/$b" ] || return 1; done
  for l in "${backend_libs[@]}"; do [ -e "$prefix/build/bin/lib$l.so" ] || return 1; done
}

# A build of this stamp that lacks only some of the tools (one added since it was made):
# those are built in it, not the whole peer again.
missing=()
if [ -f "$prefix/stamp" ] && [ "$(cat "$prefix/stamp")" = "$stamp" ] && [ -f "$prefix/build/CMakeCache.txt" ]; then
  for b in "${bins[@]}"; do [ -x "$prefix/build/bin/$b" ] || missing+=("$b"); done
fi
if ((${#missing[@]})) && [ ${#missing[@]} -lt ${#bins[@]} ]; then
  echo "peers: building ${missing[*]} in $prefix" >&2
  cmake --build "$prefix/build" -j"$(nproc)" --target "${missing[@]}" >>"$prefix/build.log" 2>&1 ||
    { tail -30 "$prefix/build.log" >&2; echo "peers: build failed ($prefix/build.log)" >&2; exit 1; }
fi
if built; then
  echo "peers: $prefix is built ($(cat "$prefix/commit" 2>/dev/null || echo '?'))"
else
  start=$(date +%s)
  rm -rf "$prefix"
  mkdir -p "$prefix"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  native_src=.peers/llama.cpp-$version/src
  if [ "$isa" != native ] && [ -f "$native_src/CMakeLists.txt" ] && [ -f ".peers/llama.cpp-$version/commit" ]; then
    # The same pinned sources as the native build: no second download.
    cp -r "$native_src" "$prefix/src"
    cp ".peers/llama.cpp-$version/commit" "$prefix/commit"
  else
    echo "peers: fetching llama-cpp-python==$version (sdist, about 75 MB) from PyPI" >&2
    python3 -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
      "llama-cpp-python==$version" -d "$tmp" 2>/dev/null ||
      python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$tmp"
    tar -xzf "$tmp"/llama_cpp_python-"$version".tar.gz -C "$tmp"
    vendored="$tmp/llama_cpp_python-$version/vendor/llama.cpp"
    # The sdist carries llama.cpp as a git submodule, so its commit can be read.
    commit=$(git -C "$vendored" rev-parse --short HEAD 2>/dev/null || echo unknown)
    mv "$vendored" "$prefix/src"
    rm -f "$prefix/src/.git"
    echo "llama.cpp $commit (vendored by llama-cpp-python==$version), ggml $(
      sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))/\2/p' "$prefix/src/ggml/CMakeLists.txt" |
      paste -sd.)" >"$prefix/commit"
  fi
  [ "$isa" = native ] || sed -i "1s/\$/, $isa build/" "$prefix/commit"

  flags=("${isa_flags[@]}")
  if [ "$isa" = native ] && grep -qw amx_tile /proc/cpuinfo; then
    no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    flags+=("-DCMAKE_C_FLAGS=$no_amx" "-DCMAKE_CXX_FLAGS=$no_amx")
  fi
  if [ "$isa" = cuda ]; then
    echo "peers: building ggml (CUDA backend, sm_$cuda_arch) and llama-bench (about 30 minutes on 2 cores)" >&2
  else
    echo "peers: building ggml (CPU backend, $isa), llama-bench, llama-batched-bench and llama-quantize" \
      "(about 3 minutes on 2 cores)" >&2
  fi
  # scripts/llamacpp-untimed-O1.cmake: what llama-bench does not time builds at -O1.
  cmake -S "$prefix/src" -B "$prefix/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    "-DCMAKE_PROJECT_INCLUDE=$PWD/scripts/llamacpp-untimed-O1.cmake" \
    -DGGML_OPENMP=ON -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    "${flags[@]}" >"$prefix/configure.log" 2>&1 ||
    { tail -30 "$prefix/configure.log" >&2; echo "peers: configure failed ($prefix/configure.log)" >&2; exit 1; }
  cmake --build "$prefix/build" -j"$(nproc)" --target "${bins[@]}" >"$prefix/build.log" 2>&1 ||
    { tail -30 "$prefix/build.log" >&2; echo "peers: build failed ($prefix/build.log)" >&2; exit 1; }
  echo "$stamp" >"$prefix/stamp"
  echo "peers: built in $(($(date +%s) - start)) s" >&2
fi
ln -sfn "$(basename "$prefix")" ".peers/$link"
