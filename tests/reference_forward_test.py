#!/usr/bin/env python3
"""scripts/reference_forward.py against formulations written independently here:

- RMSNorm against a per-row loop; RoPE (both pairings, partial rotation, frequency
  factors, linear position scaling) against an explicit complex-number rotation, and
  the relative-position property of rotated dot products;
- causal attention with grouped KV heads: batched over all positions, one position at
  a time with a growing cache, and a plain loop over heads and keys must agree; which
  KV head each query head reads is checked on inputs that make it visible;
- tiny random models (llama, qwen2, qwen3, tied and untied output, partial RoPE, RoPE
  frequency factors) written with gguf.GGUFWriter: the reference's batched logits
  against a token-by-token forward written here from the arrays that were written
  (so the reading of GGUF dims is checked too), and against its own KV-cache path;
- the command line: --out, --greedy, and a clear error with exit 2 for each bad input.

With --real-model PATH instead: the real SmolLM2 model must continue "The capital of
France is" with " Paris", and score encyclopedic English at a language model's
perplexity. Exit 77 (skipped) when the model file is not there.
"""
import argparse
import cmath
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "reference_forward.py"
sys.path.insert(0, str(SCRIPT.parent))
import reference_forward as rf  # noqa: E402

failures = []
n_checks = 0


def check(cond, what):
    global n_checks
    n_checks += 1
    if not cond:
        failures.append(what)
        print("FAIL", what)


def max_rel_diff(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


# ----------------------------------------------------------------------------
# Independent formulations

def rms_norm_loop(vec, weight, eps):
    mean_square = math.fsum(float(v) * float(v) for v in vec) / len(vec)
    scale = 1.0 / math.sqrt(mean_square + eps)
    return np.array([float(v) * scale * float(w) for v, w in zip(vec, weight)])


def rope_complex(head, position, rope_dim, base, style, freq_factors=None, position_scale=1.0):
    """One head vector rotated pair by pair as complex numbers."""
    out = np.array(head, dtype=np.float64)
    half = rope_dim // 2
    for i in range(half):
        a, b = (2 * i, 2 * i + 1) if style == "interleaved" else (i, i + half)
        angle = position * position_scale * base ** (-2.0 * i / rope_dim)
        if freq_factors is not None:
            angle /= freq_factors[i]
        z = complex(head[a], head[b]) * cmath.exp(1j * angle)
        out[a], out[b] = z.real, z.imag
    return out


def attention_loop(q, k, v, first_position):
    """Each query head h of each new position against keys 0..its position of KV head
    h // (n_head / n_head_kv), softmax written out."""
    n_new, n_head, head_dim = q.shape
    group = n_head // k.shape[1]
    out = np.zeros((n_new, n_head, head_dim))
    for t in range(n_new):
        for h in range(n_head):
            g = h // group
            keys = range(first_position + t + 1)
            scores = [float(np.dot(q[t, h], k[s, g])) / math.sqrt(head_dim) for s in keys]
            top = max(scores)
            exps = [math.exp(s - top) for s in scores]
            total = math.fsum(exps)
            for s, e in zip(keys, exps):
                out[t, h] += (e / total) * v[s, g]
    return out.reshape(n_new, n_head * head_dim)


# ----------------------------------------------------------------------------
# Building blocks

def test_rms_norm(rng):
    for n in (1, 7, 64, 576):
        x = rng.standard_normal((5, n)) * rng.uniform(0.01, 100)
        w = rng.standard_normal(n)
        eps = 10 ** rng.uniform(-7, -4)
        want = np.stack([rms_norm_loop(row, w, eps) for row in x])
        check(max_rel_diff(rf.rms_norm(x, w, eps), want) < 1e-12, f"rms_norm n={n}")


def test_rope(rng):
    cases = [(8, 8), (16, 8), (64, 64), (128, 32), (12, 12)]  # (head_dim, rope_dim)
    for style in ("interleaved", "halves"):
        for head_dim, rope_dim in cases:
            n_tokens, n_heads = 5, 3
            x = rng.standard_normal((n_tokens, n_heads, head_dim))
            positions = rng.integers(1, 5000, size=n_tokens)
            base = float(10 ** rng.uniform(3, 6.5))
            for freq_factors, position_scale in ((None, 1.0), (rng.uniform(0.5, 8, rope_dim // 2), 1.0),
                                                 (None, rng.uniform(0.1, 1.0))):
                got = rf.rope(x, positions, rope_dim, base, style, freq_factors, position_scale)
                want = np.stack([[rope_complex(x[t, h], positions[t], rope_dim, base, style, freq_factors,
                                               position_scale) for h in range(n_heads)] for t in range(n_tokens)])
                what = (f"rope {style} head_dim={head_dim} rope_dim={rope_dim} "
                        f"factors={'yes' if freq_factors is not None else 'no'} scale={position_scale:.3f}")
                # The two formulations round the angle differently: an angle of magnitude A
                # carries about A * eps of float64 rounding, which the sine and cosine pass
                # on; a wrong pair, sign or frequency moves the result by order one.
                max_angle = float(np.max(positions)) * position_scale * (
                    1.0 / float(np.min(freq_factors)) if freq_factors is not None else 1.0)
                tolerance = 1e-12 + 16 * max_angle * np.finfo(np.float64).eps
                check(max_rel_diff(got, want) < tolerance, what + ": against the complex rotation")
                check(np.array_equal(got[..., rope_dim:], x[..., rope_dim:]), what + ": unrotated dims untouched")
                check(not np.allclose(got[..., :rope_dim], x[..., :rope_dim]), what + ": rotated dims moved")

        # A rotated query and key meet at an angle that depends only on their distance.
        head_dim = 32
        q, k = rng.standard_normal((1, 1, head_dim)), rng.standard_normal((1, 1, head_dim))
        m, n, shift = rng.integers(0, 1000, size=3)

        def dot(a, b):
            return float(np.sum(rf.rope(q, [a], head_dim, 1e4, style) * rf.rope(k, [b], head_dim, 1e4, style)))

        check(abs(dot(m, n) - dot(m + shift, n + shift)) < 1e-9 * head_dim,
              f"rope {style}: q.k depends only on the distance of positions")


def test_attention(rng):
    for n_head, n_head_kv, head_dim in ((4, 4, 8), (6, 2, 16), (8, 1, 4), (9, 3, 64)):
        n = 7
        q = rng.standard_normal((n, n_head, head_dim)) * 2
        k = rng.standard_normal((n, n_head_kv, head_dim)) * 2
        v = rng.standard_normal((n, n_head_kv, head_dim))
        what = f"attention n_head={n_head} n_head_kv={n_head_kv} head_dim={head_dim}"
        batched = rf.causal_attention(q, k, v, 0)
        one_at_a_time = np.concatenate([rf.causal_attention(q[t:t + 1], k[:t + 1], v[:t + 1], t) for t in range(n)])
        check(max_rel_diff(batched, attention_loop(q, k, v, 0)) < 1e-12, what + ": batched against the loop")
        check(max_rel_diff(one_at_a_time, batched) < 1e-12, what + ": one position at a time against batched")
        # New positions after a cached prefix: queries 4..6 against keys 0..6.
        check(max_rel_diff(rf.causal_attention(q[4:], k, v, 4), batched[4:]) < 1e-12,
              what + ": queries after a cached prefix")
        # Causality: what comes later cannot change an earlier position.
        k2, v2 = k.copy(), v.copy()
        k2[4:] = rng.standard_normal(k2[4:].shape)
        v2[4:] = rng.standard_normal(v2[4:].shape)
        check(np.array_equal(rf.causal_attention(q, k2, v2, 0)[:4], batched[:4]), what + ": causal")


def test_gqa_mapping(rng):
    """Keys that make each KV head pick out one position, values that name the position
    and the KV head: each query head's output says which KV head it read."""
    n = 8
    for n_head, n_head_kv in ((6, 2), (8, 4), (6, 3), (4, 1), (3, 3)):
        group = n_head // n_head_kv
        head_dim = n + 1
        u = rng.standard_normal(head_dim)
        u *= 8.0 / np.linalg.norm(u)  # the chosen key (4u) scores 256 / sqrt(head_dim), the others 0
        q = np.broadcast_to(u, (1, n_head, head_dim)).copy()
        chosen = rng.permutation(n)[:n_head_kv]  # the position KV head g points at
        k = np.zeros((n, n_head_kv, head_dim))
        v = np.zeros((n, n_head_kv, head_dim))
        for g in range(n_head_kv):
            k[chosen[g], g] = u * 4
            for s in range(n):
                v[s, g, s] = 1.0
                v[s, g, n] = g + 1  # which KV head
        out = rf.causal_attention(q, k, v, n - 1).reshape(n_head, head_dim)
        for h in range(n_head):
            g = h // group
            check(int(np.argmax(out[h, :n])) == chosen[g] and abs(out[h, n] - (g + 1)) < 1e-6,
                  f"GQA n_head={n_head} n_head_kv={n_head_kv}: query head {h} reads KV head {g}")


# ----------------------------------------------------------------------------
# Tiny random models

SPECS = [
    dict(name="llama", arch="llama", n_embd=32, n_head=4, n_head_kv=2, head_dim=8, n_ff=48, n_layers=2,
         vocab=50, rope_dim=8, tied=False),
    dict(name="llama tied, partial rope, rope_freqs", arch="llama", n_embd=24, n_head=3, n_head_kv=3, head_dim=8,
         n_ff=40, n_layers=3, vocab=37, rope_dim=4, tied=True, rope_freqs=True),
    dict(name="qwen2 tied", arch="qwen2", n_embd=32, n_head=4, n_head_kv=1, head_dim=8, n_ff=64, n_layers=2,
         vocab=45, rope_dim=8, tied=True),
    dict(name="qwen3 head_dim 12", arch="qwen3", n_embd=32, n_head=4, n_head_kv=2, head_dim=12, n_ff=56,
         n_layers=2, vocab=41, rope_dim=12, tied=False),
]
CONTEXT = 16


def make_weights(spec, rng):
    """numpy arrays as the model uses them: a matrix is rows x cols, y = W @ x."""
    e, hd, ff = spec["n_embd"], spec["head_dim"], spec["n_ff"]
    qw, kvw = spec["n_head"] * hd, spec["n_head_kv"] * hd

    def matrix(rows, cols):
        return (rng.standard_normal((rows, cols)) / math.sqrt(cols)).astype(np.float32)

    def norm(n):
        return rng.uniform(0.6, 1.4, n).astype(np.float32)

    w = {"token_embd.weight": rng.standard_normal((spec["vocab"], e)).astype(np.float32),
         "output_norm.weight": norm(e)}
    if not spec["tied"]:
        w["output.weight"] = matrix(spec["vocab"], e)
    if spec.get("rope_freqs"):
        w["rope_freqs.weight"] = rng.uniform(1, 8, spec["rope_dim"] // 2).astype(np.float32)
    for i in range(spec["n_layers"]):
        p = f"blk.{i}."
        w.update({p + "attn_norm.weight": norm(e), p + "attn_q.weight": matrix(qw, e),
                  p + "attn_k.weight": matrix(kvw, e), p + "attn_v.weight": matrix(kvw, e),
                  p + "attn_output.weight": matrix(e, qw), p + "ffn_norm.weight": norm(e),
                  p + "ffn_gate.weight": matrix(ff, e), p + "ffn_up.weight": matrix(ff, e),
                  p + "ffn_down.weight": matrix(e, ff)})
        if spec["arch"] == "qwen2":
            for t, n in (("q", qw), ("k", kvw), ("v", kvw)):
                w[p + f"attn_{t}.bias"] = (rng.standard_normal(n) * 0.5).astype(np.float32)
        if spec["arch"] == "qwen3":
            w[p + "attn_q_norm.weight"] = norm(hd)
            w[p + "attn_k_norm.weight"] = norm(hd)
    return w


def write_model(path, spec, weights, rope_base=10000.0, eps=1e-5, arch=None, skip=()):
    from gguf import GGUFWriter

    arch = arch or spec["arch"]
    writer = GGUFWriter(str(path), arch)
    a = arch + "."
    writer.add_uint32(a + "block_count", spec["n_layers"])
    writer.add_uint32(a + "context_length", CONTEXT)
    writer.add_uint32(a + "embedding_length", spec["n_embd"])
    writer.add_uint32(a + "feed_forward_length", spec["n_ff"])
    writer.add_uint32(a + "attention.head_count", spec["n_head"])
    writer.add_uint32(a + "attention.head_count_kv", spec["n_head_kv"])
    if spec["head_dim"] != spec["n_embd"] // spec["n_head"]:
        writer.add_uint32(a + "attention.key_length", spec["head_dim"])
        writer.add_uint32(a + "attention.value_length", spec["head_dim"])
    if spec["rope_dim"] != spec["head_dim"]:
        writer.add_uint32(a + "rope.dimension_count", spec["rope_dim"])
    writer.add_float32(a + "rope.freq_base", rope_base)
    writer.add_float32(a + "attention.layer_norm_rms_epsilon", eps)
    for name, array in weights.items():
        if name not in skip:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def forward_token_by_token(spec, w, tokens, rope_base, eps):
    """The model as the brief states it, one position at a time, from the written arrays."""
    W = {name: array.astype(np.float64) for name, array in w.items()}
    n_head, n_kv, hd, rope_dim = spec["n_head"], spec["n_head_kv"], spec["head_dim"], spec["rope_dim"]
    style = "interleaved" if spec["arch"] == "llama" else "halves"
    freq_factors = W.get("rope_freqs.weight")
    lm_head = W.get("output.weight", W["token_embd.weight"])
    keys = [[] for _ in range(spec["n_layers"])]
    values = [[] for _ in range(spec["n_layers"])]
    logits = []
    for pos, token in enumerate(tokens):
        x = W["token_embd.weight"][token].copy()
        for i in range(spec["n_layers"]):
            p = f"blk.{i}."
            h = rms_norm_loop(x, W[p + "attn_norm.weight"], eps)
            q, k, v = (W[p + f"attn_{t}.weight"] @ h for t in "qkv")
            if spec["arch"] == "qwen2":
                q, k, v = q + W[p + "attn_q.bias"], k + W[p + "attn_k.bias"], v + W[p + "attn_v.bias"]
            q, k, v = q.reshape(n_head, hd), k.reshape(n_kv, hd), v.reshape(n_kv, hd)
            if spec["arch"] == "qwen3":
                q = np.stack([rms_norm_loop(head, W[p + "attn_q_norm.weight"], eps) for head in q])
                k = np.stack([rms_norm_loop(head, W[p + "attn_k_norm.weight"], eps) for head in k])
            q = np.stack([rope_complex(head, pos, rope_dim, rope_base, style, freq_factors) for head in q])
            k = np.stack([rope_complex(head, pos, rope_dim, rope_base, style, freq_factors) for head in k])
            keys[i].append(k)
            values[i].append(v)
            attended = attention_loop(q[None], np.stack(keys[i]), np.stack(values[i]), pos)[0]
            x = x + W[p + "attn_output.weight"] @ attended
            h = rms_norm_loop(x, W[p + "ffn_norm.weight"], eps)
            gate = W[p + "ffn_gate.weight"] @ h
            up = W[p + "ffn_up.weight"] @ h
            x = x + W[p + "ffn_down.weight"] @ (gate / (1.0 + np.exp(-gate)) * up)
        logits.append(lm_head @ rms_norm_loop(x, W["output_norm.weight"], eps))
    return np.stack(logits)


def test_tiny_models(rng, tmp):
    for spec in SPECS:
        weights = make_weights(spec, rng)
        # GGUF stores both as float32: the forward here must use the stored values.
        rope_base = float(np.float32(10 ** rng.uniform(3, 6)))
        eps = float(np.float32(10 ** rng.uniform(-6, -4)))
        path = tmp / f"{spec['arch']}_{len(spec['name'])}.gguf"
        write_model(path, spec, weights, rope_base, eps)
        model = rf.load_model(path)
        tokens = rng.integers(0, spec["vocab"], size=9)
        what = f"tiny {spec['name']}"

        batched = rf.forward(model, tokens)
        check(batched.shape == (len(tokens), spec["vocab"]) and batched.dtype == np.float64, what + ": logits shape")
        want = forward_token_by_token(spec, weights, tokens, rope_base, eps)
        check(max_rel_diff(batched, want) < 1e-10, what + ": batched against the token-by-token forward here")
        check(np.std(want) > 0.1, what + ": logits are not flat")

        cache = rf.KVCache(model.config.n_layers)
        incremental = np.concatenate([rf.forward(model, [t], cache) for t in tokens])
        check(max_rel_diff(incremental, batched) < 1e-12, what + ": one token at a time with the KV cache")
        cache = rf.KVCache(model.config.n_layers)
        chunks = np.concatenate([rf.forward(model, tokens[:4], cache), rf.forward(model, tokens[4:], cache)])
        check(max_rel_diff(chunks, batched) < 1e-12, what + ": prompt in two chunks with the KV cache")
        check(max_rel_diff(rf.forward(str(path), tokens[:5]), batched[:5]) < 1e-12,
              what + ": a prefix sees the same logits (and forward takes a path)")

        generated, _ = rf.greedy(model, tokens[:3], 5)
        sequence = list(tokens[:3])
        for _ in range(5):  # recomputed from scratch every step, no cache
            sequence.append(int(np.argmax(rf.forward(model, sequence)[-1])))
        check(generated == sequence[3:], what + f": greedy {generated} against recomputation {sequence[3:]}")


# ----------------------------------------------------------------------------
# Command line

def run_cli(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_cli(rng, tmp):
    spec = SPECS[0]
    weights = make_weights(spec, rng)
    good = tmp / "cli.gguf"
    write_model(good, spec, weights)
    tokens = rng.integers(0, spec["vocab"], size=6)
    token_arg = ",".join(map(str, tokens))

    out = tmp / "logits.npy"
    r = run_cli(good, "--tokens", token_arg, "--out", out)
    check(r.returncode == 0 and out.exists(), f"--out runs: {r.stderr.strip()}")
    if out.exists():
        check(max_rel_diff(np.load(out), rf.forward(good, tokens)) == 0.0, "--out saves the forward's logits")

    r = run_cli(good, "--tokens", token_arg, "--greedy", 4)
    printed = r.stdout.split("generated:")[-1].split() if r.returncode == 0 else None
    check(printed == list(map(str, rf.greedy(good, tokens, 4)[0])), f"--greedy prints the ids: {r.stdout!r}")

    r = run_cli(good, "--tokens", token_arg)
    check(r.returncode == 0 and len(r.stdout.splitlines()) == len(tokens), "no --out or --greedy: one line a position")
    check(run_cli("--help").returncode == 0, "--help")

    unknown = tmp / "gpt2.gguf"
    write_model(unknown, spec, weights, arch="gpt2")
    missing = tmp / "missing_tensor.gguf"
    write_model(missing, spec, weights, skip=("blk.1.ffn_up.weight",))
    misshapen = tmp / "misshapen.gguf"
    write_model(misshapen, spec, {**weights, "blk.0.attn_k.weight": weights["blk.0.attn_q.weight"]})
    not_gguf = tmp / "not.gguf"
    not_gguf.write_bytes(rng.integers(0, 256, 1000, dtype=np.uint8).tobytes())

    too_long = ",".join(["1"] * (CONTEXT + 1))
    bad_cases = [
        ((tmp / "absent.gguf", "--tokens", "1,2"), "not found"),
        ((not_gguf, "--tokens", "1,2"), "not a readable GGUF"),
        ((good, f"--tokens=1,{spec['vocab']}"), "out of range"),
        ((good, "--tokens=-1,2"), "out of range"),
        ((good, "--tokens", "1,x"), "comma-separated integers"),
        ((good, "--tokens", ","), "non-empty"),
        ((good, "--tokens", too_long), "context length"),
        ((good, "--tokens", "1,2", "--greedy", CONTEXT), "context length"),
        ((unknown, "--tokens", "1,2"), "unsupported architecture 'gpt2'"),
        ((missing, "--tokens", "1,2"), "missing tensor 'blk.1.ffn_up.weight'"),
        ((misshapen, "--tokens", "1,2"), "tensor 'blk.0.attn_k.weight' has dims"),
    ]
    for args, message in bad_cases:
        r = run_cli(*args)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and message in lines[0] and "Traceback" not in r.stderr,
              f"{' '.join(map(str, args[1:]))[:60]}: exit 2 with '{message}', got {r.returncode}: {r.stderr.strip()}")


# ----------------------------------------------------------------------------
# The real model

def hf_tokenizer(path):
    """Hugging Face tokenizers built from the GGUF's own vocabulary and merges."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(str(path))

    def strings(key):
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    vocab = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(vocab)}, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    return tok


def test_real_model(path):
    tok = hf_tokenizer(path)
    start = time.time()
    model = rf.load_model(path)
    prompt = tok.encode("The capital of France is").ids
    generated, _ = rf.greedy(model, prompt, 8)
    text = tok.decode(generated)
    print(f"real model: greedy continuation {generated} = {text!r} ({time.time() - start:.1f} s with loading)")
    check(" Paris" in text, f"'The capital of France is' continues with ' Paris', got {text!r}")

    # Mean negative log-likelihood of the next token over a Wikipedia-style passage. A
    # working 135M model sits near 2 nats (perplexity about 7); a broken forward (the
    # wrong RoPE pairing, say) lands near 3.7 on this text.
    passage = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
               "It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
               "from 1887 to 1889. Locally nicknamed the Iron Lady, it was constructed as the centrepiece "
               "of the 1889 World's Fair.")
    ids = np.array(tok.encode(passage).ids)
    logits = rf.forward(model, ids)
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    nll = -float(np.mean(log_probs[np.arange(len(ids) - 1), ids[1:]]))
    print(f"real model: mean next-token NLL {nll:.3f} nats over {len(ids)} tokens")
    check(nll < 2.8, f"next-token NLL {nll:.3f} on encyclopedic text is a language model's (< 2.8)")


def guarded(test, *args):
    """Runs one test; an exception is its failure, and the others still run."""
    try:
        test(*args)
    except Exception:
        traceback.print_exc()
        check(False, f"{test.__name__} raised")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--real-model", help="run only the real-model checks on this GGUF (exit 77 if absent)")
    args = ap.parse_args()

    if args.real_model:
        if not Path(args.real_model).is_file():
            print(f"{args.real_model} not found (scripts/get-model.sh fetches it): skipped")
            return 77
        guarded(test_real_model, Path(args.real_model))
    else:
        seed = int(os.environ.get("QMV_TEST_SEED") or np.random.SeedSequence().entropy)
        print(f"seed {seed} (replay: QMV_TEST_SEED={seed})")
        rng = np.random.default_rng(seed)
        with tempfile.TemporaryDirectory() as tmp:
            for test in (test_rms_norm, test_rope, test_attention, test_gqa_mapping):
                guarded(test, rng)
            guarded(test_tiny_models, rng, Path(tmp))
            guarded(test_cli, rng, Path(tmp))
    print(f"reference_forward: {n_checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
