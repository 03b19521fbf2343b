#!/usr/bin/env python3
"""Reference forward pass of a GGUF transformer in float64 numpy: the independent
baseline that qmvlab's model runner is compared against.

Every weight is dequantized by the gguf package's own dequantizers, then the model
runs in float64 with the semantics of GGUF / llama.cpp for the architectures
llama (Llama 2/3, TinyLlama, Mistral, SmolLM2), qwen2 and qwen3.

    .venv/bin/python scripts/reference_forward.py MODEL.gguf --tokens 1,2,3
    .venv/bin/python scripts/reference_forward.py MODEL.gguf --tokens 504,3575 --greedy 20
    .venv/bin/python scripts/reference_forward.py MODEL.gguf --tokens 1,2,3 --out logits.npy

Without --out or --greedy it prints, per position, the highest-scoring next token.
--out saves the logits of the given tokens, float64, shape [n_tokens, vocab].
--greedy N then appends N tokens, each the argmax of the last logits, and prints them.

From Python:
    from reference_forward import load_model, forward, greedy
    model = load_model("model.gguf")
    logits = forward(model, [1, 2, 3])        # np.ndarray [3, vocab], float64
    ids = greedy(model, [1, 2, 3], 20)        # the 20 appended token ids

Bad input (missing file, unknown architecture, missing or misshapen tensor, token id
out of range, a sequence longer than the context) raises ModelError; the command
line prints it as one line and exits 2.
"""
import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# gguf is imported inside load_model so that --help works without it.

# Which way each architecture pairs the dimensions RoPE rotates (llama.cpp's choice):
# "interleaved" rotates (x[2i], x[2i+1]); "halves" (NeoX) rotates (x[i], x[i + d/2]).
ROPE_STYLE = {"llama": "interleaved", "qwen2": "halves", "qwen3": "halves"}


class ModelError(ValueError):
    """Something wrong with the model file or the request; the message says what."""


# ----------------------------------------------------------------------------
# Configuration from GGUF metadata

@dataclass
class Config:
    arch: str
    n_layers: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rope_dim: int
    rope_base: float
    rope_style: str            # "interleaved" or "halves"
    rope_position_scale: float  # linear RoPE scaling: positions are multiplied by this
    rms_eps: float
    context_length: int
    vocab: int
    qkv_bias: bool             # qwen2: attn_q/k/v.bias
    qk_norm: bool              # qwen3: per-head RMSNorm of q and k before RoPE


def _metadata(reader, key, default=None, required=False):
    field = reader.fields.get(key)
    if field is None:
        if required:
            raise ModelError(f"missing metadata key '{key}'")
        return default
    return field.contents()


def read_config(reader, vocab):
    arch = _metadata(reader, "general.architecture", required=True)
    if arch not in ROPE_STYLE:
        raise ModelError(f"unsupported architecture '{arch}' (supported: {', '.join(ROPE_STYLE)})")
    a = arch + "."

    def whole(key, default=None):
        value = _metadata(reader, a + key, default, required=default is None)
        if int(value) <= 0:
            raise ModelError(f"metadata '{a + key}' = {value} must be positive")
        return int(value)

    n_embd = whole("embedding_length")
    n_head = whole("attention.head_count")
    n_head_kv = whole("attention.head_count_kv", n_head)
    if n_head % n_head_kv != 0:
        raise ModelError(f"{n_head} query heads cannot share {n_head_kv} key/value heads evenly")
    if _metadata(reader, a + "attention.key_length") is None and n_embd % n_head != 0:
        raise ModelError(f"width {n_embd} is not a multiple of {n_head} heads")
    head_dim = whole("attention.key_length", n_embd // n_head)
    if whole("attention.value_length", head_dim) != head_dim:
        raise ModelError("key and value head sizes differ, which this reference does not implement")
    rope_dim = whole("rope.dimension_count", head_dim)
    if rope_dim > head_dim or rope_dim % 2 != 0:
        raise ModelError(f"rope dimension {rope_dim} does not fit a head of {head_dim}")
    if int(_metadata(reader, a + "expert_count", 0)) > 0:
        raise ModelError("mixture-of-experts models are not implemented")

    scaling = _metadata(reader, a + "rope.scaling.type", "none")
    if scaling not in ("none", "linear"):
        raise ModelError(f"RoPE scaling '{scaling}' is not implemented (only none and linear)")
    scaling_factor = float(_metadata(reader, a + "rope.scaling.factor", 1.0)) if scaling == "linear" else 1.0
    if scaling_factor <= 0:
        raise ModelError(f"RoPE scaling factor {scaling_factor} must be positive")

    return Config(
        arch=arch,
        n_layers=whole("block_count"),
        n_embd=n_embd,
        n_ff=whole("feed_forward_length"),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        rope_dim=rope_dim,
        rope_base=float(_metadata(reader, a + "rope.freq_base", 10000.0)),
        rope_style=ROPE_STYLE[arch],
        rope_position_scale=1.0 / scaling_factor,
        rms_eps=float(_metadata(reader, a + "attention.layer_norm_rms_epsilon", required=True)),
        context_length=whole("context_length"),
        vocab=vocab,
        qkv_bias=arch == "qwen2",
        qk_norm=arch == "qwen3",
    )


# ----------------------------------------------------------------------------
# The model: configuration plus weights, dequantized to float64 once, on first use

class Model:
    def __init__(self, path):
        from gguf import GGUFReader

        path = Path(path)
        if not path.is_file():
            raise ModelError(f"model file '{path}' not found")
        try:
            self.reader = GGUFReader(str(path))
        except Exception as e:  # the reader raises many kinds on a malformed file
            raise ModelError(f"'{path}' is not a readable GGUF file: {e}") from e
        self.path = path
        self.tensors = {t.name: t for t in self.reader.tensors}
        embd = self.tensors.get("token_embd.weight")
        if embd is None:
            raise ModelError("missing tensor 'token_embd.weight'")
        if len(embd.shape) != 2:
            raise ModelError("tensor 'token_embd.weight' is not a matrix")
        self.config = read_config(self.reader, vocab=int(embd.shape[1]))
        self.output_name = "output.weight" if "output.weight" in self.tensors else "token_embd.weight"
        self._check_tensors()
        self._dequantized = {}

    def expected_shapes(self):
        """Every tensor the forward pass reads, with its GGUF dims (row length first)."""
        c = self.config
        e, q_width, kv_width = c.n_embd, c.n_head * c.head_dim, c.n_head_kv * c.head_dim
        shapes = {"token_embd.weight": (e, c.vocab), "output_norm.weight": (e,),
                  self.output_name: (e, c.vocab)}
        if "rope_freqs.weight" in self.tensors:
            shapes["rope_freqs.weight"] = (c.rope_dim // 2,)
        for i in range(c.n_layers):
            p = f"blk.{i}."
            shapes.update({
                p + "attn_norm.weight": (e,),
                p + "attn_q.weight": (e, q_width),
                p + "attn_k.weight": (e, kv_width),
                p + "attn_v.weight": (e, kv_width),
                p + "attn_output.weight": (q_width, e),
                p + "ffn_norm.weight": (e,),
                p + "ffn_gate.weight": (e, c.n_ff),
                p + "ffn_up.weight": (e, c.n_ff),
                p + "ffn_down.weight": (c.n_ff, e),
            })
            if c.qkv_bias:
                shapes.update({p + "attn_q.bias": (q_width,), p + "attn_k.bias": (kv_width,),
                               p + "attn_v.bias": (kv_width,)})
            if c.qk_norm:
                shapes.update({p + "attn_q_norm.weight": (c.head_dim,), p + "attn_k_norm.weight": (c.head_dim,)})
        return shapes

    def _check_tensors(self):
        for name, dims in self.expected_shapes().items():
            t = self.tensors.get(name)
            if t is None:
                raise ModelError(f"missing tensor '{name}'")
            have = tuple(int(d) for d in t.shape)
            if have != dims:
                raise ModelError(f"tensor '{name}' has dims {'x'.join(map(str, have))}, expected "
                                 f"{'x'.join(map(str, dims))} (row length first)")

    def weight(self, name):
        """The tensor as float64 numpy: a GGUF matrix with dims [cols, rows] comes back as
        rows x cols, so that y = W @ x; a vector stays a vector."""
        if name not in self._dequantized:
            from gguf.quants import dequantize

            t = self.tensors[name]
            numpy_shape = tuple(int(d) for d in reversed(t.shape))  # ggml lists the row length first
            values = dequantize(t.data, t.tensor_type)
            self._dequantized[name] = np.asarray(values, dtype=np.float64).reshape(numpy_shape)
        return self._dequantized[name]

    def output_weight(self):
        return self.weight(self.output_name)

    def rope_freq_factors(self):
        """Per-pair divisors of the RoPE angle (Llama 3.1's long-context frequencies), or None."""
        return self.weight("rope_freqs.weight") if "rope_freqs.weight" in self.tensors else None


def load_model(path):
    return Model(path)


# ----------------------------------------------------------------------------
# Building blocks

def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * weight, over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x, positions, rope_dim, base, style, freq_factors=None, position_scale=1.0):
    """Rotary position embedding of x [n_tokens, n_heads, head_dim] at the given positions.
    Pair i (of rope_dim / 2) turns by angle position * base^(-2i / rope_dim); the dims past
    rope_dim pass through. `style` says which two dims form pair i."""
    half = rope_dim // 2
    pair = np.arange(half, dtype=np.float64)
    inv_freq = base ** (-2.0 * pair / rope_dim)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors
    angle = (np.asarray(positions, dtype=np.float64) * position_scale)[:, None] * inv_freq[None, :]
    cos = np.cos(angle)[:, None, :]  # [n_tokens, 1 (broadcast over heads), half]
    sin = np.sin(angle)[:, None, :]

    if style == "interleaved":
        first, second = x[..., 0:rope_dim:2], x[..., 1:rope_dim:2]
    elif style == "halves":
        first, second = x[..., :half], x[..., half:rope_dim]
    else:
        raise ValueError(f"unknown RoPE style '{style}'")
    out = x.copy()
    rotated_first = first * cos - second * sin
    rotated_second = first * sin + second * cos
    if style == "interleaved":
        out[..., 0:rope_dim:2], out[..., 1:rope_dim:2] = rotated_first, rotated_second
    else:
        out[..., :half], out[..., half:rope_dim] = rotated_first, rotated_second
    return out


def causal_attention(q, k, v, first_position):
    """Scaled dot-product attention with a causal mask and grouped KV heads.
    q: [n_new, n_head, head_dim], the queries at positions first_position, first_position + 1, ...
    k, v: [n_total, n_head_kv, head_dim], keys and values of positions 0 .. n_total - 1.
    Query head h reads KV head h // (n_head / n_head_kv). Returns [n_new, n_head * head_dim]."""
    n_new, n_head, head_dim = q.shape
    n_total, n_head_kv, _ = k.shape
    group = n_head // n_head_kv
    kv_head_of = np.arange(n_head) // group
    k_per_head = k[:, kv_head_of, :]  # [n_total, n_head, head_dim]
    v_per_head = v[:, kv_head_of, :]

    scores = np.einsum("qhd,khd->hqk", q, k_per_head) / np.sqrt(head_dim)
    query_position = first_position + np.arange(n_new)
    future = np.arange(n_total)[None, :] > query_position[:, None]  # [n_new, n_total]
    scores = np.where(future[None, :, :], -np.inf, scores)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    out = np.einsum("hqk,khd->qhd", weights, v_per_head)
    return out.reshape(n_new, n_head * head_dim)


def silu(x):
    return x / (1.0 + np.exp(-x))


def swiglu_ffn(x, w_gate, w_up, w_down):
    return (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


# ----------------------------------------------------------------------------
# Forward pass

class KVCache:
    """Keys (after RoPE) and values of every position seen so far, per layer."""

    def __init__(self, n_layers):
        self.keys = [None] * n_layers
        self.values = [None] * n_layers
        self.n_positions = 0

    def append(self, layer, k, v):
        if self.keys[layer] is None:
            self.keys[layer], self.values[layer] = k, v
        else:
            self.keys[layer] = np.concatenate([self.keys[layer], k])
            self.values[layer] = np.concatenate([self.values[layer], v])
        return self.keys[layer], self.values[layer]


def _as_model(model_or_path):
    return model_or_path if isinstance(model_or_path, Model) else load_model(model_or_path)


def _check_tokens(config, tokens, first_position):
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or tokens.size == 0:
        raise ModelError("the token sequence must be a non-empty list of ids")
    if not np.issubdtype(tokens.dtype, np.integer):
        raise ModelError("token ids must be integers")
    bad = tokens[(tokens < 0) | (tokens >= config.vocab)]
    if bad.size:
        raise ModelError(f"token id {int(bad[0])} is out of range (vocabulary has {config.vocab} tokens)")
    if first_position + tokens.size > config.context_length:
        raise ModelError(f"{first_position + tokens.size} positions exceed the context length "
                         f"{config.context_length}")
    return tokens.astype(np.int64)


def forward(model, tokens, cache=None):
    """Logits [len(tokens), vocab] (float64) for the tokens, which follow the positions
    already in `cache` (none when cache is None); the cache then holds them too.
    `model` is a Model or the path of a GGUF file."""
    model = _as_model(model)
    c = model.config
    first_position = cache.n_positions if cache is not None else 0
    tokens = _check_tokens(c, tokens, first_position)
    n = tokens.size
    positions = first_position + np.arange(n)
    freq_factors = model.rope_freq_factors()
    W = model.weight

    x = W("token_embd.weight")[tokens]  # [n, n_embd]
    for layer in range(c.n_layers):
        p = f"blk.{layer}."

        # Attention
        h = rms_norm(x, W(p + "attn_norm.weight"), c.rms_eps)
        q = h @ W(p + "attn_q.weight").T
        k = h @ W(p + "attn_k.weight").T
        v = h @ W(p + "attn_v.weight").T
        if c.qkv_bias:
            q = q + W(p + "attn_q.bias")
            k = k + W(p + "attn_k.bias")
            v = v + W(p + "attn_v.bias")
        q = q.reshape(n, c.n_head, c.head_dim)
        k = k.reshape(n, c.n_head_kv, c.head_dim)
        v = v.reshape(n, c.n_head_kv, c.head_dim)
        if c.qk_norm:  # per head, before RoPE
            q = rms_norm(q, W(p + "attn_q_norm.weight"), c.rms_eps)
            k = rms_norm(k, W(p + "attn_k_norm.weight"), c.rms_eps)
        q = rope(q, positions, c.rope_dim, c.rope_base, c.rope_style, freq_factors, c.rope_position_scale)
        k = rope(k, positions, c.rope_dim, c.rope_base, c.rope_style, freq_factors, c.rope_position_scale)
        if cache is not None:
            k, v = cache.append(layer, k, v)
        attended = causal_attention(q, k, v, first_position)
        x = x + attended @ W(p + "attn_output.weight").T

        # Feed-forward
        h = rms_norm(x, W(p + "ffn_norm.weight"), c.rms_eps)
        x = x + swiglu_ffn(h, W(p + "ffn_gate.weight"), W(p + "ffn_up.weight"), W(p + "ffn_down.weight"))

    if cache is not None:
        cache.n_positions += n
    x = rms_norm(x, W("output_norm.weight"), c.rms_eps)
    return x @ model.output_weight().T


def greedy(model, tokens, n_new):
    """Appends n_new tokens, each the argmax of the logits after the previous one (prompt
    in one batched pass, then one position at a time with a KV cache). Returns
    (new token ids, logits of the prompt positions)."""
    model = _as_model(model)
    tokens = _check_tokens(model.config, tokens, 0)
    if n_new < 0:
        raise ModelError("the number of tokens to generate cannot be negative")
    if tokens.size + n_new > model.config.context_length:
        raise ModelError(f"{tokens.size} + {n_new} positions exceed the context length "
                         f"{model.config.context_length}")
    cache = KVCache(model.config.n_layers)
    prompt_logits = forward(model, tokens, cache)
    last = prompt_logits[-1]
    generated = []
    for step in range(n_new):
        next_id = int(np.argmax(last))
        generated.append(next_id)
        if step + 1 < n_new:  # the last one is never fed back
            last = forward(model, [next_id], cache)[-1]
    return generated, prompt_logits


# ----------------------------------------------------------------------------
# Command line

def _parse_tokens(text):
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise ModelError(f"--tokens must be comma-separated integers, got '{text}'") from None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="GGUF model file (llama, qwen2 or qwen3)")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids, e.g. 1,2,3")
    ap.add_argument("--out", help="save the logits of the given tokens here (.npy, float64, [n_tokens, vocab])")
    ap.add_argument("--greedy", type=int, metavar="N", default=0,
                    help="append N greedily chosen tokens and print their ids")
    args = ap.parse_args(argv)

    try:
        tokens = _parse_tokens(args.tokens)
        model = load_model(args.model)
        if args.greedy:
            generated, logits = greedy(model, tokens, args.greedy)
        else:
            logits = forward(model, tokens)
    except ModelError as e:
        print(f"reference_forward: {e}", file=sys.stderr)
        return 2

    if args.out:
        np.save(args.out, logits)
        print(f"logits [{logits.shape[0]}, {logits.shape[1]}] float64 saved to {args.out}")
    if args.greedy:
        print("generated:", " ".join(map(str, generated)))
    elif not args.out:
        for position, (token, row) in enumerate(zip(tokens, logits)):
            best = int(np.argmax(row))
            print(f"position {position}: token {token} -> argmax {best} (logit {row[best]:.6f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
