#!/usr/bin/env python3
"""Cross-check our K-quant block layouts against the `gguf` Python package.

Runs qmv_dump_blocks for Q4_K, Q5_K and Q6_K: it quantizes thousands of random
super-blocks with our quantizer and writes the raw block bytes and our dequantized
values. The bytes are then dequantized by `gguf` (the reference implementation that
ships with llama.cpp) and the two sets of values must agree. This is the proof that
our structs and dequantizers are the real GGUF layouts: a swapped nibble, a misplaced
high bit or a wrong scale packing shows up as a mismatch here.

Tolerance. Both sides form the same float32 products (d*sc, dmin*m, then
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

SUPER_BLOCK = 256
REL_TOL = 1e-6
TERM_TOL = 1e-6

TYPES = {
    # name: (gguf type, block bytes)
    "q4_K": (GGMLQuantizationType.Q4_K, 144),
    "q5_K": (GGMLQuantizationType.Q5_K, 176),
    "q6_K": (GGMLQuantizationType.Q6_K, 210),
}


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


def coverage(name, raw):
    """Which corners of the layout the blocks reached, so a pass means something."""
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


def check_type(name, dump_exe, blocks, seed, workdir):
    qtype, block_bytes = TYPES[name]
    blocks_path = os.path.join(workdir, f"{name}.blocks")
    values_path = os.path.join(workdir, f"{name}.values")
    cmd = [dump_exe, "--type", name, "--blocks", str(blocks), "--seed", str(seed),
           "--out-blocks", blocks_path, "--out-values", values_path]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL {name}: {' '.join(cmd)} exited with {run.returncode}\n{run.stderr}")
        return False

    data = np.fromfile(blocks_path, dtype=np.uint8)
    ours = np.fromfile(values_path, dtype="<f4")
    if data.size != blocks * block_bytes or ours.size != blocks * SUPER_BLOCK:
        print(f"FAIL {name}: expected {blocks * block_bytes} bytes and "
              f"{blocks * SUPER_BLOCK} values, got {data.size} and {ours.size}")
        return False

    theirs = np.asarray(quants.dequantize(data, qtype), dtype=np.float32).reshape(-1)
    if theirs.size != ours.size:
        print(f"FAIL {name}: gguf gave {theirs.size} values, we gave {ours.size}")
        return False

    ours_b = ours.reshape(blocks, SUPER_BLOCK).astype(np.float64)
    theirs_b = theirs.reshape(blocks, SUPER_BLOCK).astype(np.float64)
    term_scale = block_term_scale(name, data.reshape(blocks, block_bytes))[:, None]
    diff = np.abs(ours_b - theirs_b)
    magnitude = np.maximum(np.abs(ours_b), np.abs(theirs_b))
    allowed = REL_TOL * magnitude + TERM_TOL * term_scale
    finite = np.isfinite(ours_b) & np.isfinite(theirs_b)
    bad = ~finite | (diff > allowed)

    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(magnitude > 0, diff / magnitude, 0.0)
    max_rel = float(np.max(np.where(finite, rel, np.inf)))
    exact = int(np.count_nonzero(diff == 0))
    status = "OK" if not bad.any() else "MISMATCH"
    print(f"{name}: {blocks} blocks, {ours.size} values, {exact} bit-identical, "
          f"max rel diff {max_rel:.3g}, max |diff| {float(np.max(diff)):.3g} -> {status}")
    reached = coverage(name, data.reshape(blocks, block_bytes))
    print("  blocks reaching: " + ", ".join(f"{what} {count}" for what, count in reached.items()))
    missed = [what for what, count in reached.items() if count == 0]
    if missed and blocks >= 1000:
        print(f"FAIL {name}: no block reached {', '.join(missed)}; the check would prove less")
        return False
    if bad.any():
        block, index = np.argwhere(bad)[0]
        raw = data[block * block_bytes:(block + 1) * block_bytes]
        print(f"  first mismatch: block {block}, value {index}: ours {float(ours_b[block, index])!r}, "
              f"gguf {float(theirs_b[block, index])!r}, allowed diff {allowed[block, index]:.3g}\n"
              f"  block bytes: {raw.tobytes().hex()}\n"
              f"  reproduce: {' '.join(cmd)}")
        return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump-exe", required=True, help="path to qmv_dump_blocks")
    parser.add_argument("--blocks", type=int, default=4000, help="super-blocks per type")
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh random seed")
    parser.add_argument("--types", nargs="+", default=list(TYPES), choices=list(TYPES))
    args = parser.parse_args()

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"gguf cross-check: seed {seed}, {args.blocks} blocks per type")
    ok = True
    with tempfile.TemporaryDirectory(prefix="qmv_gguf_") as workdir:
        for name in args.types:
            ok = check_type(name, args.dump_exe, args.blocks, seed, workdir) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
