#!/usr/bin/env bash
# Optional: installs llama.cpp's Python binding (llama-cpp-python, which builds
# llama.cpp from source) and the gguf package into their own venv, .venv-llamacpp, for
# scripts/compare_llamacpp.py. Kept apart from .venv so the project's own tests never
# depend on it; CI does not run this. A no-op when it is already installed.
#
# The build is tuned for this CPU (GGML_NATIVE: AVX-512, VNNI, ... where there are some),
# as a user building llama.cpp here would get, except for AMX: ggml's AMX matmul
# crashes (SIGSEGV in ggml_backend_amx_mul_mat) on CPUs that have it, so it is compiled
# out. The build compiles llama.cpp, so it takes minutes.
# LLAMA_CPP_PYTHON_VERSION pins a version (default: the one this project compared with);
# CMAKE_ARGS replaces the build options.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
venv=.venv-llamacpp
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"

if "$venv/bin/python" -c "import sys, llama_cpp; sys.exit(llama_cpp.__version__ != '$version')" 2>/dev/null; then
  echo "$venv already has llama-cpp-python $version"
else
  if [ -z "${CMAKE_ARGS:-}" ]; then
    CMAKE_ARGS="-DGGML_NATIVE=ON"
    if grep -qw amx_tile /proc/cpuinfo; then
      no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
      CMAKE_ARGS+=" -DCMAKE_C_FLAGS='$no_amx' -DCMAKE_CXX_FLAGS='$no_amx'"
    fi
  fi
  echo "building llama-cpp-python $version into $venv with $CMAKE_ARGS (about 10 minutes on 2 cores)"
  # No pip cache: a wheel cached from other build options would be reused silently.
  CMAKE_ARGS="$CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$venv/bin/python" -m pip install -q --no-cache-dir --force-reinstall "llama-cpp-python==$version"
fi
# gguf writes the dequantized reference model; the same version as .venv's.
"$venv/bin/python" -m pip install -q numpy gguf==0.19.0
"$venv/bin/python" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__); \
print(llama_cpp.llama_print_system_info().decode())"
