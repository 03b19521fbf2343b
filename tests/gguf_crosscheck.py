#!/usr/bin/env python3
"""Cross-check our GGUF block layouts against the `gguf` Python package.

Runs qmv_dump_blocks for every weight type (the K-quants Q4_K, Q5_K, Q6_K; the legacy
quants Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; F16, BF16, F32): it quantizes thousands of
random groups of 256 values with our quantizer and writes the raw block bytes and our
dequantized values. The bytes are then dequantized by `gguf` (the reference
implementation that ships with llama.cpp) and the two sets of values must agree. This
is the proof that our structs and dequantizers are the real GGUF layouts: a swapped
nibble, a misplaced high bit or a wrong scale packing shows up as a mismatch here.

Legacy quants and float types: bit-identical. Every product d*q is exact in float32
(an 11-bit fp16 mantissa times a quant of at most 8 bits), so the only rounding is
the + m of Q4_1/Q5_1, done alike on both sides; widening f16/bf16 is exact. For the
float types our quantizer (rounding f32 to f16/bf16) is also compared byte for byte
with gguf's, on inputs that include exact halfway cases and fp32 subnormals.

K-quants, tolerance. Both sides form the same float32 products (d*sc, dmin*m, then
scale*q - offset); these products are exact in float32 (an 11-bit fp16 mantissa times
a 6- or 8-bit scale times a quant of at most 6 bits fits in 24 bits), so only the final
subtraction rounds, and the values are normally identical. We still allow for one
rounding difference in that last multiply-add (e.g. a compiler contracting it into an
FMA), relative to the size of the *terms* of the block rather than of the result,
because the result can be a near-cancellation of two large terms:

    |ours - gguf| <= 1e-6 * max(|ours|, |gguf|) + 1e-6 * block_term_scale

where block_term_scale = max over sub-blocks of |d*sc|*qmax + |dmin*m| (Q4_K/Q5_K) or
|d*sc|*32 (Q6_K): the largest magnitude any term of the block can have. One float32
rounding is 6e-8 of that, so 1e-6 is generous yet far below any layout error (a wrong
quant changes a value by at least |d*sc|).

Coverage. The script also counts the blocks that reach each corner of the layout
(subnormal and large fp16 d, the upper bits of the 6-bit scales and mins, Q6_K scale
-128, the fifth and sixth quant bits, ...) and fails if, with 1000 blocks or more, a
corner was never reached: a pass must not come from blocks that avoid the hard parts.

Exit status: 0 when every value of every type agrees, 1 otherwise (including when
`gguf` cannot be imported: without it this check proves nothing, so it must not pass).
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from gguf import GGMLQuantizationType, quants
except ImportError as error:  # pragma: no cover - the failure path is the point
    print(
        f"FAIL: cannot import the `gguf` Python package ({error}).\n"
        "This cross-check needs it (pip install gguf numpy); without it our GGUF\n"
        "layouts are unverified, so the check fails rather than skips.",
        file=sys.stderr,
    )
    sys.exit(1)

GROUP = 256  # values per generated group (one super-block of a K-quant)
REL_TOL = 1e-6
TERM_TOL = 1e-6

T = GGMLQuantizationType
TYPES = {
    # name: (gguf type, block bytes, values per block)
    "q4_K": (T.Q4_K, 144, 256),
    "q5_K": (T.Q5_K, 176, 256),
    "q6_K": (T.Q6_K, 210, 256),
    "q4_0": (T.Q4_0, 18, 32),
    "q4_1": (T.Q4_1, 20, 32),
    "q5_0": (T.Q5_0, 22, 32),
    "q5_1": (T.Q5_1, 24, 32),
    "q8_0": (T.Q8_0, 34, 32),
    "f16": (T.F16, 2, 1),
    "bf16": (T.BF16, 2, 1),
    "f32": (T.F32, 4, 1),
}
K_QUANTS = {"q4_K", "q5_K", "q6_K"}
FLOAT_TYPES = {"f16", "bf16", "f32"}


def k4_scales_and_mins(packed):
    """The eight 6-bit scales and mins of each block from its 12 packed bytes."""
    packed = packed.astype(np.int32)
    low, high, extra = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([low & 63, (extra & 15) | ((low >> 6) << 4)], axis=1)
    mins = np.concatenate([high & 63, (extra >> 4) | ((high >> 6) << 4)], axis=1)
    return scales, mins


def block_term_scale(name, raw):
    """Largest magnitude a term of each block can reach (see the module docstring)."""
    if name == "q6_K":
        scales = raw[:, 192:208].view(np.int8).astype(np.float64)
        d = raw[:, 208:210].copy().view(np.float16).astype(np.float64)
        return np.max(np.abs(d * scales), axis=1) * 32
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float64)
    dmin = raw[:, 2:4].copy().view(np.float16).astype(np.float64)
    scales, mins = k4_scales_and_mins(raw[:, 4:16])
    qmax = 15 if name == "q4_K" else 31
    return np.max(np.abs(d * scales) * qmax + np.abs(dmin * mins), axis=1)


def legacy_quants(name, raw):
    """The unsigned quants of each legacy block, in weight order."""
    has_m = name in ("q4_1", "q5_1")
    qs = raw[:, -16:].astype(np.int32)
    q = np.concatenate([qs & 15, qs >> 4], axis=1)
    if name.startswith("q5"):
        at = 4 if has_m else 2
        qh = raw[:, at:at + 4].copy().view("<u4")[:, 0].astype(np.int64)
        q |= ((qh[:, None] >> np.arange(32)) & 1).astype(np.int32) << 4
    return q


def fp16_corners(bits, what):
    exponent = (bits >> 10) & 0x1F
    return {
        f"subnormal {what}": (exponent == 0) & ((bits & 0x3FF) != 0),
        f"large {what} (>= 1024)": (exponent >= 25) & (exponent < 31),
        f"negative {what}": (bits & 0x8000) != 0,
    }


def coverage_new_types(name, raw):
    """Corners of the legacy and float layouts the blocks reached."""
    if name in FLOAT_TYPES:
        values = raw.copy().view({"f16": "<f2", "bf16": "<u2", "f32": "<f4"}[name]).reshape(-1)
        if name == "bf16":
            values = (values.astype(np.uint32) << 16).view(np.float32)
        tiny = np.finfo(values.dtype).tiny
        corners = {
            "negative": values < 0,
            "subnormal": (values != 0) & (np.abs(values) < tiny),
            "zero": values == 0,
        }
        if name == "f16":
            corners["inf (f32 beyond the fp16 range)"] = np.isinf(values)
        else:
            corners["beyond the fp16 range"] = np.abs(values) > 65504
        return {what: int(np.count_nonzero(hit)) for what, hit in corners.items()}
    d_bits = raw[:, 0:2].copy().view("<u2")[:, 0]
    corners = fp16_corners(d_bits, "d")
    corners["zero d"] = (d_bits & 0x7FFF) == 0
    if name == "q8_0":
        q = raw[:, 2:].view(np.int8)
        corners["quant -127"] = np.any(q == -127, axis=1)
        corners["quant 127"] = np.any(q == 127, axis=1)
        del corners["negative d"]  # our Q8_0 scale is amax / 127
    else:
        q = legacy_quants(name, raw)
        top = 31 if name.startswith("q5") else 15
        corners["quant 0"] = np.any(q == 0, axis=1)
        corners[f"quant {top}"] = np.any(q == top, axis=1)
        if name.startswith("q5"):
            corners["fifth bits set"] = np.any(q >= 16, axis=1)
        if name in ("q4_1", "q5_1"):
            del corners["negative d"]  # d spans max - min >= 0
            m_bits = raw[:, 2:4].copy().view("<u2")[:, 0]
            corners["negative m"] = (m_bits & 0x8000) != 0
            corners["positive m"] = ((m_bits & 0x8000) == 0) & (m_bits != 0)
    return {what: int(np.count_nonzero(hit)) for what, hit in corners.items()}


def coverage(name, raw):
    """Which corners of the layout the blocks reached, so a pass means something."""
    if name not in K_QUANTS:
        return coverage_new_types(name, raw)
    if name == "q6_K":
        d_bits = raw[:, 208:210].copy().view(np.uint16)[:, 0]
        scales = raw[:, 192:208].view(np.int8)
        corners = {
            "negative scale": np.any(scales < 0, axis=1),
            "scale -128": np.any(scales == -128, axis=1),
            "top quant bits set": np.any(raw[:, 128:192] >= 0x40, axis=1),
        }
    else:
        d_bits = raw[:, 0:2].copy().view(np.uint16)[:, 0]
        scales, mins = k4_scales_and_mins(raw[:, 4:16])
        corners = {
            "scale >= 16 in sub-blocks 4-7": np.any(scales[:, 4:] >= 16, axis=1),
            "min >= 16 in sub-blocks 4-7": np.any(mins[:, 4:] >= 16, axis=1),
            "zero scale": np.any(scales == 0, axis=1),
            "offset 0 (dmin 0)": raw[:, 2:4].copy().view(np.uint16)[:, 0] & 0x7FFF == 0,
        }
        if name == "q5_K":
            corners["fifth bits set"] = np.any(raw[:, 16:48] != 0, axis=1)
    exponent = (d_bits >> 10) & 0x1F
    corners["subnormal d"] = (exponent == 0) & ((d_bits & 0x3FF) != 0)
    corners["large d (>= 1024)"] = exponent >= 25
    return {what: int(np.count_nonzero(hit)) for what, hit in corners.items()}


def compare_k_quant(name, data, ours, theirs, n_blocks, block_bytes):
    """Values equal up to one float32 rounding of the block's largest term."""
    ours_b = ours.reshape(n_blocks, -1).astype(np.float64)
    theirs_b = theirs.reshape(n_blocks, -1).astype(np.float64)
    term_scale = block_term_scale(name, data.reshape(n_blocks, block_bytes))[:, None]
    diff = np.abs(ours_b - theirs_b)
    magnitude = np.maximum(np.abs(ours_b), np.abs(theirs_b))
    allowed = REL_TOL * magnitude + TERM_TOL * term_scale
    finite = np.isfinite(ours_b) & np.isfinite(theirs_b)
    bad = ~finite | (diff > allowed)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(magnitude > 0, diff / magnitude, 0.0)
    max_rel = float(np.max(np.where(finite, rel, np.inf)))
    exact = int(np.count_nonzero(diff == 0))
    summary = (f"{exact} bit-identical, max rel diff {max_rel:.3g}, "
               f"max |diff| {float(np.max(diff)):.3g}")
    return bad.reshape(-1), summary, lambda i: f"allowed diff {allowed.reshape(-1)[i]:.3g}"


def compare_bits(ours, theirs):
    """Values bit for bit (so -0 vs 0, inf and subnormals must all agree)."""
    bad = ours.view(np.uint32) != theirs.view(np.uint32)
    exact = ours.size - int(np.count_nonzero(bad))
    return bad, f"{exact} bit-identical (required: all)", lambda i: "required: identical bits"


def check_type(name, dump_exe, groups, seed, workdir):
    qtype, block_bytes, block_values = TYPES[name]
    n_values = groups * GROUP
    n_blocks = n_values // block_values
    paths = {what: os.path.join(workdir, f"{name}.{what}") for what in ("blocks", "values", "inputs")}
    cmd = [dump_exe, "--type", name, "--blocks", str(groups), "--seed", str(seed),
           "--out-blocks", paths["blocks"], "--out-values", paths["values"],
           "--out-inputs", paths["inputs"]]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL {name}: {' '.join(cmd)} exited with {run.returncode}\n{run.stderr}")
        return False

    data = np.fromfile(paths["blocks"], dtype=np.uint8)
    ours = np.fromfile(paths["values"], dtype="<f4")
    if data.size != n_blocks * block_bytes or ours.size != n_values:
        print(f"FAIL {name}: expected {n_blocks * block_bytes} bytes and "
              f"{n_values} values, got {data.size} and {ours.size}")
        return False

    theirs = np.asarray(quants.dequantize(data, qtype), dtype=np.float32).reshape(-1)
    if theirs.size != ours.size:
        print(f"FAIL {name}: gguf gave {theirs.size} values, we gave {ours.size}")
        return False

    if name in K_QUANTS:
        bad, summary, allowed = compare_k_quant(name, data, ours, theirs, n_blocks, block_bytes)
    else:
        bad, summary, allowed = compare_bits(ours, theirs)
    status = "OK" if not bad.any() else "MISMATCH"
    print(f"{name}: {n_blocks} blocks, {ours.size} values, {summary} -> {status}")
    reached = coverage(name, data.reshape(n_blocks, block_bytes))
    print("  blocks reaching: " + ", ".join(f"{what} {count}" for what, count in reached.items()))
    missed = [what for what, count in reached.items() if count == 0]
    if missed and groups >= 1000:
        print(f"FAIL {name}: no block reached {', '.join(missed)}; the check would prove less")
        return False
    if bad.any():
        index = int(np.argmax(bad))
        block = index // block_values
        raw = data[block * block_bytes:(block + 1) * block_bytes]
        print(f"  first mismatch: block {block}, value {index % block_values}: "
              f"ours {float(ours[index])!r}, gguf {float(theirs[index])!r}, {allowed(index)}\n"
              f"  block bytes: {raw.tobytes().hex()}\n"
              f"  reproduce: {' '.join(cmd)}")
        return False

    if name in FLOAT_TYPES:
        # Our f32 -> f16 / bf16 rounding against gguf's (numpy's cast for f16).
        inputs = np.fromfile(paths["inputs"], dtype="<f4")
        with np.errstate(over="ignore"):
            expected = np.asarray(quants.quantize(inputs, qtype)).view(np.uint8).reshape(-1)
        differ = expected != data
        print(f"  quantizer: {data.size - int(np.count_nonzero(differ))} of {data.size} bytes "
              f"as gguf's -> {'OK' if not differ.any() else 'MISMATCH'}")
        if differ.any():
            value = int(np.argmax(differ)) // block_bytes
            print(f"  first difference: value {value}, input {float(inputs[value])!r}, "
                  f"ours {data[value * block_bytes:(value + 1) * block_bytes].tobytes().hex()}, "
                  f"gguf {expected[value * block_bytes:(value + 1) * block_bytes].tobytes().hex()}")
            return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump-exe", required=True, help="path to qmv_dump_blocks")
    parser.add_argument("--blocks", type=int, default=4000,
                        help="groups of 256 values per type (super-blocks of a K-quant)")
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh random seed")
    parser.add_argument("--types", nargs="+", default=list(TYPES), choices=list(TYPES))
    args = parser.parse_args()

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"gguf cross-check: seed {seed}, {args.blocks} groups of {GROUP} values per type")
    ok = True
    with tempfile.TemporaryDirectory(prefix="qmv_gguf_") as workdir:
        for name in args.types:
            ok = check_type(name, args.dump_exe, args.blocks, seed, workdir) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
