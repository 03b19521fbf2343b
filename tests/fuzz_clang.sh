#!/usr/bin/env bash
# Compiler and linker launcher of the parser fuzzer (tests/CMakeLists.txt): CMake hands
# it the project compiler's command line, and it runs clang instead with libFuzzer and
# the sanitizers, so the fuzzer gets every flag, include and library CMake works out.
#   fuzz_clang.sh CLANG compile|link PROJECT_COMPILER ARGS...
set -euo pipefail
clang=$1 mode=$2
shift 3
# Bounds-checked standard containers and optionals, on top of ASan and UBSan.
checks=(-fsanitize=address,undefined -fno-sanitize-recover=undefined -D_GLIBCXX_ASSERTIONS -g
        -Wno-unknown-warning-option)
if [[ $mode == compile ]]; then
  exec "$clang" "$@" "${checks[@]}" -fsanitize=fuzzer-no-link -O1
fi
# The gcc-built libraries call libgomp, which the link line names; clang's -fopenmp
# would add its own runtime beside it.
args=()
for a in "$@"; do [[ $a == -fopenmp ]] || args+=("$a"); done
exec "$clang" "${args[@]}" "${checks[@]}" -fsanitize=fuzzer
