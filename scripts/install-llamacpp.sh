#!/usr/bin/env bash
# Optional: installs llama.cpp's Python binding (llama-cpp-python) and the gguf package
# into their own venv, .venv-llamacpp, for the token comparison of
# scripts/llamacpp_tokens.py (formerly compare_llamacpp.py --tokens). Kept apart from
# .venv so the project's own tests never depend on it; CI does not run this. A no-op
# when it is already installed.
#
# The binding is installed without its own llama.cpp build (LLAMA_BUILD=OFF: the
# package is then its Python code only, seconds to install) and loads the pinned build
# scripts/install-peers.sh makes, through LLAMA_CPP_LIB_PATH, which
# llamacpp_tokens.py sets: tokens and timings then come from the very same library.
# The two are the same version (LLAMA_CPP_PYTHON_VERSION picks another for both), so
# the binding's declarations match the library's.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
lib_dir=.peers/llama.cpp/build/bin
venv=.venv-llamacpp

scripts/install-peers.sh
if [ ! -e "$lib_dir/libllama.so" ]; then
  echo "install-llamacpp: $lib_dir/libllama.so is missing after scripts/install-peers.sh" >&2
  exit 1
fi
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"

if "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('llama-cpp-python') != '$version')" \
    2>/dev/null; then
  echo "$venv already has llama-cpp-python $version"
else
  echo "installing llama-cpp-python $version into $venv (its Python code; the library is $lib_dir's)"
  # No pip cache: a wheel cached from a build with its own library would be reused.
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" \
    "$venv/bin/python" -m pip install -q --no-cache-dir --force-reinstall "llama-cpp-python==$version"
fi
# gguf writes the dequantized reference model; the same version as .venv's.
"$venv/bin/python" -m pip install -q numpy gguf==0.19.0
LLAMA_CPP_LIB_PATH="$PWD/$lib_dir" "$venv/bin/python" -c "import llama_cpp; \
print('llama-cpp-python', llama_cpp.__version__, 'on', llama_cpp.llama_cpp._lib._name); \
print(llama_cpp.llama_print_system_info().decode())"
