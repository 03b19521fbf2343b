#!/usr/bin/env bash
# The GPU run, in two halves.
#
#   scripts/gpu-run.sh bundle   here, on the build machine: builds qmvlab and qmv_tests
#                               for sm_90 (H100/H200) and copies them, with every shared
#                               library they link except the C library's own, into
#                               build/gpu-bundle/ (bin/, lib/).
#   scripts/gpu-run.sh device   on the GPU machine (nvcc and CMake but none of our Debian
#                               libraries, no network): from the bundle, qmvlab list, the
#                               GPU peak, the check of every CUDA kernel, the GPU tests and
#                               a cold bench of the CUDA kernels on the FFN shapes
#                               4096x14336 and 14336x4096; CSVs and logs go to
#                               results/<gpu>/ and, where the device tool set OUT, to
#                               $OUT/<gpu>/ so they come back.
#
#   scripts/gpu-run.sh decode   on the GPU machine: makes a Llama-2-7B-shaped Q4_K_M model
#                               there and runs scripts/plan_sweep.py over the GPU variants
#                               (results/<gpu>/decode-plans.csv), then the auto plan and an
#                               int8 plan with and without outlier routing (decode.csv).
#
# With the device tool: run `scripts/gpu-run.sh bundle` here, then
#   run(command="scripts/gpu-run.sh device", carry=["build/gpu-bundle"])
# (the bundle is about 45 MiB of the 64 MiB a call may carry).
#
# Environment: QMV_CUDA_ARCHS (default 90), QMV_GPU_BUILD_DIR (default build/gpu),
# QMV_GPU_BUNDLE (default build/gpu-bundle), QMV_GPU_CHECK_SHAPES (default "default"),
# QMV_GPU_BENCH_SHAPES (default 4096x14336,14336x4096).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${QMV_GPU_BUILD_DIR:-build/gpu}
bundle=${QMV_GPU_BUNDLE:-build/gpu-bundle}
max_bundle_mib=60

bundle() {
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DQMV_CUDA=ON \
    -DQMV_CUDA_ARCHS="${QMV_CUDA_ARCHS:-90}" >/dev/null
  cmake --build "$build_dir" -j"$(nproc)" --target qmvlab qmv_tests
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  cp "$build_dir/qmvlab" "$build_dir/tests/qmv_tests" "$bundle/bin/"
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
  local mib
  mib=$(du -sm "$bundle" | cut -f1)
  echo "bundle: $bundle, $mib MiB:"
  ls -l "$bundle/bin" "$bundle/lib"
  if ((mib > max_bundle_mib)); then
    echo "gpu-run.sh: the bundle ($mib MiB) leaves too little of the device tool's 64 MiB for the tree" >&2
    exit 1
  fi
  # The binaries must start from the bundle alone (the loader finds nothing missing).
  if LD_LIBRARY_PATH="$bundle/lib" ldd "$bundle/bin/qmvlab" "$bundle/bin/qmv_tests" | grep -q "not found"; then
    echo "gpu-run.sh: a library is still missing:" >&2
    LD_LIBRARY_PATH="$bundle/lib" ldd "$bundle/bin/qmvlab" "$bundle/bin/qmv_tests" | grep "not found" >&2
    exit 1
  fi
}

# Runs a step, its output to the terminal and to $results/<name>.log, and its time.
step() {
  local name=$1
  shift
  echo
  echo "== $name: $*"
  local start=$SECONDS status=0
  "$@" 2>&1 | tee "$results/$name.log" || status=$?
  echo "== $name: exit $status after $((SECONDS - start)) s"
  ((status == 0)) || failed+=("$name")
}

device() {
  if [[ ! -x $bundle/bin/qmvlab ]]; then
    echo "gpu-run.sh: no $bundle/bin/qmvlab: run 'scripts/gpu-run.sh bundle' on the build machine and carry $bundle" >&2
    exit 1
  fi
  export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local qmvlab=$PWD/$bundle/bin/qmvlab tests=$PWD/$bundle/bin/qmv_tests gpu
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem --format=csv ||
    echo "nvidia-smi: not available"
  # results/<gpu>/: the GPU's name as qmvlab names machines (lower case, dashes).
  gpu=$({ nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true; } | head -1 |
    tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+//; s/-+$//')
  gpu=${gpu:-unknown-gpu}
  results=results/$gpu
  mkdir -p "$results"
  failed=()

  step list "$qmvlab" list
  step peak "$qmvlab" peak --threads all --out "$results/peak.csv"
  if "$qmvlab" list --kernels '*.cuda.*' >/dev/null 2>&1; then
    step check "$qmvlab" check --kernels '*.cuda.*' --shapes "${QMV_GPU_CHECK_SHAPES:-default}" --out "$results/check.csv"
  else
    echo "no CUDA kernel is registered in this qmvlab: no check or bench of kernels"
  fi
  step gpu-tests "$tests" --gtest_filter='Cuda*:*Cuda*:Gpu*' --gtest_brief=1
  if "$qmvlab" list --kernels '*.cuda.*' >/dev/null 2>&1; then
    step bench "$qmvlab" bench --kernels '*.cuda.*' --shapes "${QMV_GPU_BENCH_SHAPES:-4096x14336,14336x4096}" \
      --threads 1 --out "$results/bench.csv"
  fi

  if [[ -n ${OUT:-} ]]; then
    mkdir -p "$OUT/$gpu"
    cp "$results"/*.csv "$results"/*.log "$OUT/$gpu/" 2>/dev/null || true
  fi
  echo
  ls -l "$results"
  if ((${#failed[@]})); then
    echo "gpu-run.sh: failed: ${failed[*]}"
    exit 1
  fi
  echo "gpu-run.sh: every step passed"
}

# The GPU decode on the device: a Llama-2-7B-shaped Q4_K_M model made there (no model
# file travels), then the plan sweep over the GPU variants (tokens/s with and without
# CUDA graphs, logits NMSE and top-1 agreement against the CPU's f32-activation plan).
decode_sweep() {
  [[ -x $bundle/bin/qmvlab ]] || { echo "gpu-run.sh: no $bundle/bin/qmvlab (run bundle here, carry it)" >&2; exit 1; }
  export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local qmvlab=$PWD/$bundle/bin/qmvlab gpu model=${QMV_GPU_MODEL:-/tmp/qmv-models/llama-2-7b-q4_K_m.gguf}
  gpu=$({ nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true; } | head -1 |
    tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+//; s/-+$//')
  results=results/${gpu:-unknown-gpu}
  mkdir -p "$results" "$(dirname "$model")"
  [[ -s $model ]] || "$qmvlab" make-model --preset llama-2-7b --mix q4_K_m --out "$model"
  python3 scripts/plan_sweep.py --qmvlab "$qmvlab" --model "$model" --device cuda --plans gpu \
    --reference-plan 'q4_K=q4_K.cpu.avx2_f32,q6_K=q6_K.cpu.avx2_f32' --out "$results/decode-plans.csv"
  local prompt=1,450,4996,310,278,3303,338
  "$qmvlab" decode --model "$model" --device cuda --prompt-tokens "$prompt" -n 128 --ignore-eos \
    --quiet --out "$results/decode.csv" | tee "$results/decode.log"
  # An int8 plan without and with outlier routing: what the device-side test and the
  # graph's if/else nodes cost per token (the routed calls are in the log).
  local route
  for route in "" "--route-outliers"; do
    "$qmvlab" decode --model "$model" --device cuda --plan 'q4_K=q4_K.cuda.hw_dp4a,q6_K=q6_K.cuda.hw_dp4a' $route \
      --prompt-tokens "$prompt" -n 128 --ignore-eos --quiet --out "$results/decode.csv" | tee -a "$results/decode.log"
  done
  if [[ -n ${OUT:-} ]]; then
    mkdir -p "$OUT/${gpu:-unknown-gpu}"
    cp "$results"/decode*.csv "$results"/decode.log "$OUT/${gpu:-unknown-gpu}/"
  fi
}

case "${1:-}" in
  bundle) bundle ;;
  device) device ;;
  decode) decode_sweep ;;
  *)
    echo "usage: scripts/gpu-run.sh bundle|device|decode (see the comment at the top)" >&2
    exit 2
    ;;
esac
