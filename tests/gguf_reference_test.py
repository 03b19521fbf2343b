#!/usr/bin/env python3
"""A GGUF file written by the reference writer (PyPI gguf.GGUFWriter), with metadata of
every kind and tensors of several types, must read back through `qmvlab gguf`: same
keys and values, same tensor names, types and dimensions."""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter

ap = argparse.ArgumentParser()
ap.add_argument("--qmvlab", required=True)
args = ap.parse_args()
rng = np.random.default_rng()
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "ref.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", 22)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>", "hello, world"])
    w.add_bool("general.quantized", True)
    w.add_int32("test.negative", -7)
    # Tensors: (name, numpy shape outer-first, ggml type, bytes per row of `cols`)
    tensors = [("token_embd.weight", (8, 64), T.F32), ("blk.0.attn_q.weight", (16, 512), T.Q4_K),
               ("blk.0.ffn_down.weight", (4, 256), T.Q6_K), ("blk.0.attn_v.weight", (3, 96), T.Q8_0),
               ("output_norm.weight", (64,), T.F16)]
    sizes = {T.F32: (1, 4), T.F16: (1, 2), T.Q4_K: (256, 144), T.Q6_K: (256, 210), T.Q8_0: (32, 34)}
    for name, shape, ttype in tensors:
        elems, nbytes = sizes[ttype]
        cols = shape[-1]
        rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        raw = rng.integers(0, 256, size=rows * cols // elems * nbytes, dtype=np.uint8)
        if ttype in (T.F32, T.F16):
            w.add_tensor(name, rng.standard_normal(shape).astype(np.float32 if ttype == T.F32 else np.float16))
        else:
            w.add_tensor(name, raw.reshape(rows, -1), raw_dtype=ttype)  # byte shape -> logical shape
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    r = subprocess.run([args.qmvlab, "gguf", str(path), "--tensors"], capture_output=True, text=True)
    expect(r.returncode == 0, f"qmvlab gguf failed: {r.stderr}")
    out = r.stdout
    for line in ["llama.block_count (uint32) = 22", 'tokenizer.ggml.model (string) = "llama"',
                 'tokenizer.ggml.tokens (array) = string[4] ["<unk>", "<s>", "</s>", "hello, world"]',
                 "general.quantized (bool) = true", "test.negative (int32) = -7",
                 "general.architecture (string) = \"llama\""]:
        expect(line in out, f"missing line: {line}")
    for name, shape, ttype in tensors:
        dims = "x".join(str(d) for d in reversed(shape))  # ggml order: row length first
        expect(any(l.split("|")[1:4] == [f" {name} ", f" {ttype.name} ", f" {dims} "] or
                   [c.strip() for c in l.split("|")[1:4]] == [name, ttype.name, dims] for l in out.splitlines()),
               f"tensor {name} {ttype.name} {dims} not listed")

for f in failures:
    print("FAIL", f)
if failures:
    print(out if "out" in dir() else "")
print(f"gguf_reference: {6 + 5 - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
