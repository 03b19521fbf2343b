#!/usr/bin/env bash
# Builds the peers qmvlab is measured against: ggml and llama.cpp from the sources
# inside one pinned PyPI sdist (llama-cpp-python vendors llama.cpp, ggml included),
# so the only network it needs is PyPI. Builds the CPU backend native to this machine
# (what a user building llama.cpp here gets) plus llama-bench and llama-quantize, into
# the ignored folder .peers/llama.cpp-<version>/; .peers/llama.cpp points at it.
# A no-op when that build is there and was made on a CPU with the same features.
#
# AMX is compiled out: ggml's AMX matmul crashes (SIGSEGV in
# ggml_backend_amx_mul_mat) on CPUs that have it.
# LLAMA_CPP_PYTHON_VERSION picks another pinned version; QMV_PEERS=off skips the peers.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${QMV_PEERS:-on}" = off ] && { echo "peers: skipped (QMV_PEERS=off)"; exit 0; }

version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
prefix=.peers/llama.cpp-$version
# The build is native, so it is only valid on a CPU with the same flags.
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|f16c|amx)' | sort | tr '\n' ' ')
stamp="llama-cpp-python==$version native: $cpu_flags"
bins=(llama-bench llama-quantize)

built() {
  [ -f "$prefix/stamp" ] && [ "$(cat "$prefix/stamp")" = "$stamp" ] || return 1
  for b in "${bins[@]}"; do [ -x "$prefix/build/bin/$b" ] || return 1; done
  for l in ggml ggml-base ggml-cpu llama; do [ -e "$prefix/build/bin/lib$l.so" ] || return 1; done
}

if built; then
  echo "peers: $prefix is built ($(cat "$prefix/commit" 2>/dev/null || echo '?'))"
else
  start=$(date +%s)
  rm -rf "$prefix"
  mkdir -p "$prefix"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
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

  flags=()
  if grep -qw amx_tile /proc/cpuinfo; then
    no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    flags+=("-DCMAKE_C_FLAGS=$no_amx" "-DCMAKE_CXX_FLAGS=$no_amx")
  fi
  echo "peers: building ggml (CPU backend, native), llama-bench and llama-quantize" \
    "(about 3 minutes on 2 cores)" >&2
  cmake -S "$prefix/src" -B "$prefix/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    "${flags[@]}" >"$prefix/configure.log" 2>&1 ||
    { tail -30 "$prefix/configure.log" >&2; echo "peers: configure failed ($prefix/configure.log)" >&2; exit 1; }
  cmake --build "$prefix/build" -j"$(nproc)" --target "${bins[@]}" >"$prefix/build.log" 2>&1 ||
    { tail -30 "$prefix/build.log" >&2; echo "peers: build failed ($prefix/build.log)" >&2; exit 1; }
  echo "$stamp" >"$prefix/stamp"
  echo "peers: built in $(($(date +%s) - start)) s" >&2
fi
ln -sfn "llama.cpp-$version" .peers/llama.cpp
