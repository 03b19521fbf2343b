#!/usr/bin/env python3
"""Our forward pass against the independent float64 reference (scripts/reference_forward.py).

For synthetic models of every architecture (`qmvlab make-model`, fresh seed each run) and
several weight mixes, `qmvlab logits` runs a random token sequence under two plans:
  - f32 activations (every matvec on a kernel that reads float activations): the logits
    must match the reference position by position, NMSE below F32_NMSE_BOUND;
  - the default `auto` plan (int8 Q8_K / Q8_1 activations where a kernel takes them),
    without timing (`--no-tune`: the store's picks, else the static order): top-1
    agreement and NMSE are reported; the bounds only catch a broken kernel.
Prints a table and exits 1 on any failure.
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from reference_forward import forward  # noqa: E402

F32_NMSE_BOUND = 1e-8
# Int8 activations on random weights lose ~1e-3 of NMSE; an order of magnitude more is
# a broken kernel, not rounding. Random models have near-flat logits, so top-1 flips
# between near-ties are expected: a flip is only an error when the token we chose is
# well below the reference's best (by more than Q8_REGRET_BOUND of the logits' spread).
Q8_NMSE_BOUND = 1e-2
Q8_REGRET_BOUND = 0.25

# (arch, mix): every architecture, float and quantized mixes, the legacy quants.
CASES = [
    ("llama", "f32"), ("llama", "q4_K_m"), ("llama", "q8_0"), ("llama", "q4_1"), ("llama", "q5_K"),
    ("qwen2", "f16"), ("qwen2", "q4_K_m"), ("qwen3", "bf16"), ("qwen3", "q4_K_m"), ("qwen3", "q5_0"),
    ("llama", "q4_0"), ("llama", "q5_1"),
]
ALL_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_K", "q5_K", "q6_K"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{p.stdout}{p.stderr}")
    return p.stdout


def f32_plan(qmvlab):
    """A rule per weight type naming a kernel that reads f32 activations."""
    listing = run([qmvlab, "list"])
    rules = []
    for t in ALL_TYPES:
        for variant in ("avx2_f32", "avx2", "scalar_f32", "scalar"):
            name = f"{t}.cpu.{variant}"
            if any(line.startswith(f"| {name} ") and "| yes" in line for line in listing.splitlines()):
                rules.append(f"{t}={name}")
                break
    return ",".join(rules + ["ffn_up_gate=none"])


def nmse(ours, ref):
    return ((ours - ref) ** 2).sum(axis=1) / (ref ** 2).sum(axis=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--qmvlab", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--positions", type=int, default=12)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    print(f"seed {seed} (rerun with --seed {seed})")
    rng = random.Random(seed)
    plans = {"f32": f32_plan(args.qmvlab), "auto": "auto"}
    failures = []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch, mix in CASES:
            model = os.path.join(tmp, f"{arch}-{mix}.gguf")
            run([args.qmvlab, "make-model", "--preset", "toy", "--arch", arch, "--mix", mix,
                 "--seed", str(rng.randrange(1, 2**31)), "--out", model])
            # Random tokens from the whole vocabulary, BOS first as a prompt would be.
            tokens = [256] + [rng.randrange(0, 512) for _ in range(args.positions - 1)]
            ref = forward(model, tokens)
            for plan_name, plan in plans.items():
                out = os.path.join(tmp, "logits.npy")
                # --no-tune: the accuracy of the kernels auto picks, not the time to pick
                # them (each mix's toy shapes would be timed first: most of this test).
                run([args.qmvlab, "logits", "--model", model, "--tokens", ",".join(map(str, tokens)),
                     "--plan", plan, "--threads", "2", "--out", out] + (["--no-tune"] if plan == "auto" else []))
                ours = np.load(out).astype(np.float64)
                if ours.shape != ref.shape:
                    failures.append(f"{arch} {mix} {plan_name}: shape {ours.shape} vs {ref.shape}")
                    continue
                e = nmse(ours, ref)
                top1 = float((ours.argmax(axis=1) == ref.argmax(axis=1)).mean())
                chosen = ref[np.arange(len(tokens)), ours.argmax(axis=1)]
                regret = float(((ref.max(axis=1) - chosen) / ref.std(axis=1)).max())
                rows.append((arch, mix, plan_name, e.max(), top1, regret))
                if not np.isfinite(ours).all():
                    failures.append(f"{arch} {mix} {plan_name}: non-finite logits")
                elif plan_name == "f32" and e.max() > F32_NMSE_BOUND:
                    failures.append(f"{arch} {mix} f32 plan: NMSE {e.max():.2e} at position {int(e.argmax())} "
                                    f"> {F32_NMSE_BOUND:.0e}")
                elif plan_name == "auto" and (e.max() > Q8_NMSE_BOUND or regret > Q8_REGRET_BOUND):
                    failures.append(f"{arch} {mix} auto plan: NMSE {e.max():.2e}, top-1 agreement {top1:.2f}, "
                                    f"worst chosen token {regret:.2f} sd below the reference's best")
    print("| arch | mix | plan | max NMSE over positions | top-1 agreement | worst top-1 regret (sd) |")
    print("|---|---|---|---|---|---|")
    for arch, mix, plan_name, e, top1, regret in rows:
        print(f"| {arch} | {mix} | {plan_name} | {e:.2e} | {top1:.2f} | {regret:.3f} |")
    print(f"f32 plan: {plans['f32']}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
