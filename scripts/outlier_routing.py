#!/usr/bin/env python3
"""Outlier routing on a real model: what it routes, what it saves, what it costs.

For a model and a text, with `qmvlab logits`: the logits of the f32-activation plan
(--f32-plan), of the default int8 plan, and of the int8 plan with --route-outliers=K for
each K; per position the NMSE against the f32 plan and whether the top token agrees;
the share of int8 matvec calls each K routed, per op. Then decode speed, in alternating
rounds of `qmvlab decode` (medians): the int8 plan, the int8 plan routed at the first K,
and the f32 plan. Prints a markdown table and, with --out, writes a CSV.

  scripts/outlier_routing.py --qmvlab build/qmvlab --model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --f32-plan q4_1=q4_1.cpu.avx2_f32,q8_0=q8_0.cpu.avx2_f32 --ks 8,12,16,24
"""
import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

DEFAULT_TEXT = (
    "The history of the Roman Empire spans more than a thousand years. It began when Augustus became the "
    "first emperor in 27 BC, and in the west it ended in 476 AD when the last emperor was deposed. During that "
    "time, Roman law, roads, aqueducts and the Latin language spread across Europe, North Africa and the Middle "
    "East. Historians still argue about why the western empire fell: economic troubles, military defeats, "
    "political instability and pressure from migrating peoples all played a part.")


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stdout}{out.stderr}")
    return out.stdout


def routed_shares(stdout):
    """Per op: (int8 calls, routed) from the routing table `qmvlab logits` prints."""
    shares = {}
    table = stdout[stdout.find("outlier routing"):] if "outlier routing" in stdout else ""
    for m in re.finditer(r"^\| (\w+)\s*\| (\d+)\s*\| (\d+)\s*\|", table, re.M):
        shares[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return shares


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--qmvlab", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--f32-plan", required=True, help="plan rules whose kernels all read f32 activations")
    p.add_argument("--text", default=DEFAULT_TEXT)
    p.add_argument("--tokens", help="token ids instead of --text, comma separated")
    p.add_argument("--ks", default="8,12,16,24")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--decode-rounds", type=int, default=5)
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--out", help="CSV to write")
    a = p.parse_args()
    ks = [k for k in a.ks.split(",") if k]
    if not ks:
        sys.exit("--ks: give at least one k")

    if a.tokens:
        ids = a.tokens
    else:
        ids = ",".join(run([a.qmvlab, "tokenize", "--model", a.model, "--ids", a.text]).split())
    n_tokens = len(ids.split(","))
    tmp = tempfile.mkdtemp(prefix="outlier-routing-")

    def logits(extra, name):
        path = os.path.join(tmp, name + ".npy")
        stdout = run([a.qmvlab, "logits", "--model", a.model, "--tokens", ids, "--threads", str(a.threads),
                      "--out", path] + extra)
        return np.load(path).astype(np.float64), routed_shares(stdout)

    f32, _ = logits(["--plan", a.f32_plan], "f32")
    runs = [("no routing", [])] + [(k, ["--route-outliers=" + k]) for k in ks]
    rows = []
    for k, extra in runs:
        x, shares = logits(extra, "k" + str(k))
        nmse = ((x - f32) ** 2).sum(1) / (f32 ** 2).sum(1)
        calls = sum(c for c, _ in shares.values())
        routed = sum(r for _, r in shares.values())
        rows.append({"k": k, "routed_share": routed / calls if calls else 0.0,
                     "per_op": {op: r / c for op, (c, r) in shares.items() if c},
                     "nmse_median": float(np.median(nmse)), "nmse_max": float(nmse.max()),
                     "top1": float((x.argmax(1) == f32.argmax(1)).mean())})

    decode = {"int8": [], f"routed k={ks[0]}": [], "f32": []}
    plans = {"int8": [], f"routed k={ks[0]}": ["--route-outliers=" + ks[0]], "f32": ["--plan", a.f32_plan]}
    prompt = ",".join(ids.split(",")[:8])
    for _ in range(a.decode_rounds):
        for name, extra in plans.items():
            js = os.path.join(tmp, "decode.json")
            run([a.qmvlab, "decode", "--model", a.model, "--prompt-tokens", prompt, "-n", str(a.decode_tokens),
                 "--ignore-eos", "--quiet", "--no-peak", "--threads", str(a.threads), "--json", js] + extra)
            with open(js) as f:
                decode[name].append(json.load(f)["decode_tok_s"])

    ops = sorted({op for r in rows for op in r["per_op"]})
    print(f"{os.path.basename(a.model)}: {n_tokens} tokens, logits against the f32 plan ({a.f32_plan}), "
          f"{a.threads} thread(s)\n")
    print("| k | int8 calls routed | " + " | ".join(ops) + " | logits NMSE (median) | max | top-1 agreement |")
    print("|---" * (len(ops) + 5) + "|")
    for r in rows:
        per = " | ".join(f"{100 * r['per_op'].get(op, 0):.1f}%" for op in ops)
        print(f"| {r['k']} | {100 * r['routed_share']:.1f}% | {per} | {r['nmse_median']:.2e} | {r['nmse_max']:.2e} | "
              f"{100 * r['top1']:.0f}% |")
    print(f"\ndecode, {a.decode_rounds} alternating rounds of {a.decode_tokens} tokens, medians:")
    for name, v in decode.items():
        print(f"  {name}: {statistics.median(v):.2f} tok/s (min {min(v):.2f}, max {max(v):.2f})")

    if a.out:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        with open(a.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["model", "tokens", "threads", "f32_plan", "k", "routed_share"] + [f"routed_{op}" for op in ops]
                       + ["logits_nmse_median", "logits_nmse_max", "top1_agreement", "decode_tok_s_int8",
                          f"decode_tok_s_routed_k{ks[0]}", "decode_tok_s_f32", "command"])
            speeds = [f"{statistics.median(v):.3f}" for v in decode.values()]
            for r in rows:
                w.writerow([os.path.basename(a.model), n_tokens, a.threads, a.f32_plan, r["k"],
                            f"{r['routed_share']:.4f}"] + [f"{r['per_op'].get(op, 0):.4f}" for op in ops]
                           + [f"{r['nmse_median']:.4e}", f"{r['nmse_max']:.4e}", f"{r['top1']:.4f}"] + speeds
                           + [" ".join(sys.argv)])
        print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
