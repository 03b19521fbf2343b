#!/usr/bin/env python3
"""`qmvlab make-model` files read by the reference implementation (the `gguf` Python
package) and checked against what the command promises:

- metadata: the hyperparameters of the preset (written out below from the brief, not
  taken from qmvlab), general.name / file_type, the tokenizer keys;
- tensors: the names, shapes (ggml order) and types each architecture and mix call for,
  the Q4_K_M layer rule and the row-length fallbacks worked out here independently;
- values: gguf's dequantization of every tensor equals qmvlab's (read by our reader,
  dumped by qmv_dump_tensors): bit-identical for the float and legacy types, within one
  float32 rounding of the block's terms for the K-quants; and the values follow the
  declared distributions (matrices and embeddings N(0, 1/cols), norms 1 + N(0, 0.01),
  biases N(0, 0.01));
- tokenizer: Hugging Face `tokenizers` built from the file's vocabulary and merges turns
  every merged token's text into that token, and agrees with `qmvlab tokenize`.
"""
import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T, GGUFReader, quants
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

ap = argparse.ArgumentParser()
ap.add_argument("--qmvlab", required=True)
ap.add_argument("--dump-exe", required=True)
args = ap.parse_args()

PRESETS = {
    # arch, layers, embd, ff, heads, kv heads, head dim, vocab, context, rope base, rms eps, tied
    "toy": ("llama", 2, 256, 512, 4, 2, 64, 512, 256, 10000.0, 1e-5, True),
    "qwen2.5-0.5b": ("qwen2", 24, 896, 4864, 14, 2, 64, 151936, 32768, 1e6, 1e-6, True),
}
MIX_TYPES = {"f32": T.F32, "f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1,
             "q5_0": T.Q5_0, "q5_1": T.Q5_1, "q4_K": T.Q4_K, "q5_K": T.Q5_K, "q6_K": T.Q6_K}
FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q4_K": 14,
              "q4_K_m": 15, "q5_K": 16, "q6_K": 18, "bf16": 32}
K_QUANTS = {T.Q4_K, T.Q5_K, T.Q6_K}
BITWISE = {T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1}

# (preset, arch, mix, extra options)
CASES = [
    ("toy", "llama", "q4_K_m", []),
    ("toy", "qwen2", "q4_K_m", ["--untied"]),
    ("toy", "qwen3", "q4_K_m", ["--layers", "9", "--vocab", "700", "--context", "512"]),
    ("toy", "llama", "q8_0", ["--untied", "--seed", str(random.randrange(1, 1 << 32))]),
    ("toy", "qwen2", "bf16", []),
    ("toy", "qwen3", "q5_1", ["--untied"]),
    ("toy", "llama", "q6_K", ["--layers", "3"]),
    ("toy", "qwen3", "f16", []),
    ("qwen2.5-0.5b", "qwen2", "q4_K_m", ["--layers", "2", "--vocab", "300"]),
]

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
    return cond


def option(opts, name, default):
    return type(default)(opts[opts.index(name) + 1]) if name in opts else default


def more_bits(i, n):  # llama.cpp's use_more_bits for Q4_K_M
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def fits(t, row):
    return row % GGML_QUANT_SIZES[t][0] == 0


def fallback(t, row):
    if fits(t, row):
        return t
    t = {T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0}.get(t, T.F16)
    return t if fits(t, row) else T.F16


def expected_tensors(arch, layers, e, ff, heads, kv, hd, vocab, tied, mix):
    """name -> (dims in ggml order, type, kind)"""
    out = {}

    def add(name, dims, kind, layer=-1):
        if kind in ("norm", "bias"):
            t = T.F32
        elif mix != "q4_K_m":
            t = MIX_TYPES[mix]
        elif kind == "output" or (kind == "token_embd" and tied):
            t = T.Q6_K
        elif kind in ("attn_v", "ffn_down") and more_bits(layer, layers):
            t = T.Q6_K
        else:
            t = T.Q4_K
        out[name] = (list(dims), fallback(t, dims[0]), kind)

    add("token_embd.weight", (e, vocab), "token_embd")
    add("output_norm.weight", (e,), "norm")
    if not tied:
        add("output.weight", (e, vocab), "output")
    for i in range(layers):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", (e,), "norm")
        add(p + "ffn_norm.weight", (e,), "norm")
        add(p + "attn_q.weight", (e, heads * hd), "attn_q", i)
        add(p + "attn_k.weight", (e, kv * hd), "attn_k", i)
        add(p + "attn_v.weight", (e, kv * hd), "attn_v", i)
        add(p + "attn_output.weight", (heads * hd, e), "attn_output", i)
        add(p + "ffn_gate.weight", (e, ff), "ffn_gate", i)
        add(p + "ffn_up.weight", (e, ff), "ffn_up", i)
        add(p + "ffn_down.weight", (ff, e), "ffn_down", i)
        if arch == "qwen2":
            for n, w in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
                add(p + f"attn_{n}.bias", (w,), "bias")
        if arch == "qwen3":
            add(p + "attn_q_norm.weight", (hd,), "norm")
            add(p + "attn_k_norm.weight", (hd,), "norm")
    return out


def field(r, key):
    f = r.fields.get(key)
    return None if f is None else f.contents()


def check_tokenizer(path, r, vocab, label):
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    expect(len(tokens) == vocab and len(types) == vocab, f"{label}: {len(tokens)} tokens, want {vocab}")
    expect(tokens[256:258] == ["<|bos|>", "<|eos|>"] and types[256:258] == [3, 3], f"{label}: control tokens")
    expect(all(t == 1 for i, t in enumerate(types) if i not in (256, 257)), f"{label}: token types")
    expect(len(merges) == vocab - 258, f"{label}: {len(merges)} merges for {vocab - 258} merged tokens")
    hf = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(["<|bos|>", "<|eos|>"])
    unreachable = [i for i in range(258, vocab) if hf.encode(hf.decode([i], skip_special_tokens=False)).ids != [i]]
    expect(not unreachable, f"{label}: tokens not produced from their own text: {unreachable[:10]}")
    texts = ["The library was a narrow building of grey stone.", "  two  spaces, 120 years\n\nnew lines\t",
             "café ünïcode 😀 日本", "<|bos|>hello<|eos|> world", "zebras quietly outnumber librarians"]
    for text in texts:
        out = subprocess.run([args.qmvlab, "tokenize", "--ids", "--model", str(path), text], capture_output=True,
                             text=True)
        got = [int(x) for x in out.stdout.split()] if out.returncode == 0 else out.stderr
        want = hf.encode(text).ids
        if expect(got == want, f"{label}: tokenize {text!r}: qmvlab {got}, hf {want}"):
            expect(hf.decode(got, skip_special_tokens=False) == text, f"{label}: {text!r} does not decode back")


def check_values(name, values, kind, dims):
    """The declared distributions, from the spec."""
    n = values.size
    mean, std = float(values.mean()), float(values.std())
    want_mean, want_std = 0.0, 1.0 / np.sqrt(dims[0])
    if kind == "norm":
        want_mean, want_std = 1.0, 0.1
    elif kind == "bias":
        want_std = 0.1
    expect(abs(std - want_std) <= 0.25 * want_std, f"{name}: std {std:.4g}, want {want_std:.4g}")
    expect(abs(mean - want_mean) <= 5 * want_std / np.sqrt(n), f"{name}: mean {mean:.4g}, want {want_mean}")
    if kind == "norm":
        expect(values.min() > 0, f"{name}: a norm weight is not positive")


tokenizers_checked = set()
with tempfile.TemporaryDirectory() as tmp:
    for preset, arch, mix, extra in CASES:
        p_arch, layers, e, ff, heads, kv, hd, vocab, context, rope, eps, tied = PRESETS[preset]
        layers = option(extra, "--layers", layers)
        vocab = option(extra, "--vocab", vocab)
        context = option(extra, "--context", context)
        seed = option(extra, "--seed", 1)
        tied = tied and "--untied" not in extra
        label = f"{preset} {arch} {mix} {' '.join(extra)}".strip()
        path = Path(tmp) / "model.gguf"
        cmd = [args.qmvlab, "make-model", "--preset", preset, "--mix", mix, "--arch", arch, "--out", str(path)] + extra
        out = subprocess.run(cmd, capture_output=True, text=True)
        if not expect(out.returncode == 0, f"{label}: make-model failed: {out.stdout}{out.stderr}"):
            continue
        r = GGUFReader(str(path))

        a = arch + "."
        want = {
            "general.architecture": arch,
            "general.name": f"synthetic {preset}{'' if arch == p_arch else '-' + arch} {mix} seed {seed}",
            "general.file_type": FILE_TYPES[mix],
            "general.quantization_version": 2,
            a + "block_count": layers, a + "embedding_length": e, a + "feed_forward_length": ff,
            a + "attention.head_count": heads, a + "attention.head_count_kv": kv, a + "context_length": context,
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
            "tokenizer.ggml.bos_token_id": 256, "tokenizer.ggml.eos_token_id": 257,
            "tokenizer.ggml.add_bos_token": True,
        }
        if arch == "qwen3":
            want[a + "attention.key_length"] = want[a + "attention.value_length"] = hd
        if arch == "llama":
            want[a + "rope.dimension_count"] = hd
            want[a + "vocab_size"] = vocab
        for key, value in want.items():
            expect(field(r, key) == value, f"{label}: {key} = {field(r, key)!r}, want {value!r}")
        for key, value in ((a + "rope.freq_base", rope), (a + "attention.layer_norm_rms_epsilon", eps)):
            got = field(r, key)
            expect(got is not None and abs(got - value) <= 1e-6 * value, f"{label}: {key} = {got}, want {value}")
        if arch != "qwen3":
            expect(field(r, a + "attention.key_length") is None, f"{label}: key_length where the head size is derived")

        tensors = expected_tensors(arch, layers, e, ff, heads, kv, hd, vocab, tied, mix)
        names = [t.name for t in r.tensors]
        expect(sorted(names) == sorted(tensors), f"{label}: tensors {sorted(set(names) ^ set(tensors))} differ")
        dump = Path(tmp) / "dump"
        dump.mkdir(exist_ok=True)
        d = subprocess.run([args.dump_exe, str(path), str(dump)], capture_output=True, text=True)
        if not expect(d.returncode == 0, f"{label}: qmv_dump_tensors failed: {d.stderr}"):
            continue
        for t in r.tensors:
            if t.name not in tensors:
                continue
            dims, ttype, kind = tensors[t.name]
            tag = f"{label}: {t.name}"
            expect([int(x) for x in t.shape] == dims, f"{tag}: shape {list(t.shape)}, want {dims}")
            if not expect(t.tensor_type == ttype, f"{tag}: {t.tensor_type.name}, want {ttype.name}"):
                continue
            ref = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32).ravel()
            ours = np.fromfile(dump / f"{t.name}.f32", dtype=np.float32)
            if not expect(ours.size == ref.size, f"{tag}: {ours.size} values, gguf {ref.size}"):
                continue
            if ttype in BITWISE:
                bad = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32))
            else:
                tol = 1e-6 * np.abs(ref) + 1e-6 * float(np.abs(ref).max())
                bad = np.flatnonzero(~(np.abs(ours - ref) <= tol))
            expect(bad.size == 0, f"{tag}: {bad.size} values differ from gguf's, first at {bad[:1]}")
            check_values(tag, ref, kind, dims)
        if vocab not in tokenizers_checked:
            tokenizers_checked.add(vocab)
            check_tokenizer(path, r, vocab, label)
        print(f"checked {label}: {len(r.tensors)} tensors")

for f in failures[:50]:
    print("FAIL", f)
print(f"synthetic_model: {len(CASES)} files, {len(failures)} failures")
sys.exit(1 if failures else 0)
