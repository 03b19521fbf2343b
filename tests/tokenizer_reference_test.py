#!/usr/bin/env python3
"""qmvlab's GPT-2 BPE tokenizer against Hugging Face `tokenizers`, both built from the
same GGUF vocabulary and merges: the real model's (SmolLM2, pre-tokenizer `smollm`:
single digits, then the GPT-2 split). Same token ids on every test string, and the
ids decode back to the text. Exit 77 (skipped) when the model is not there."""
import argparse
import subprocess
import sys
from pathlib import Path

from gguf import GGUFReader
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

ap = argparse.ArgumentParser()
ap.add_argument("--qmvlab", required=True)
ap.add_argument("--model", required=True)
args = ap.parse_args()
if not Path(args.model).exists():
    print(f"{args.model} not found (scripts/get-model.sh fetches it): skipped")
    sys.exit(77)

r = GGUFReader(args.model)


def strings(key):
    f = r.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


tokens = strings("tokenizer.ggml.tokens")
merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data]
hf = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
hf.decoder = decoders.ByteLevel()
hf.add_special_tokens([t for t, ty in zip(tokens, types) if ty == 3])

texts = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "It's 2026-11-22: 3.14159 and 1,000,000 tokens.",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\nnew\n\nlines\r\n",
    "café naïve Ærøskøbing — “quotes” ‘single’ … 😀🚀",
    "日本語のテキストと中文和한국어",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "don't can't won't I'm we'll they've she'd",
    "x = [a**2 for a in range(10)]  # comment",
    "",
    " ",
    "a",
]
failures = 0
for text in texts:
    want = hf.encode(text).ids
    out = subprocess.run([args.qmvlab, "tokenize", "--ids", "--model", args.model, text], capture_output=True,
                         text=True)
    got = [int(x) for x in out.stdout.split()] if out.returncode == 0 else None
    if got != want:
        failures += 1
        print(f"FAIL {text!r}\n  qmvlab: {got} {out.stderr.strip()}\n  hf:     {want}")
    elif hf.decode(got, skip_special_tokens=False) != text:
        failures += 1
        print(f"FAIL {text!r}: ids do not decode back")
print(f"tokenizer_reference: {len(texts) - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
