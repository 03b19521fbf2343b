#!/usr/bin/env python3
"""Decode plan sweep: for each plan, decode tokens/s (with and without CUDA graphs on
the GPU) and the logits' NMSE and top-1 agreement against a reference plan.

Standard library only (the GPU machines have Python but not our venv):

    scripts/plan_sweep.py --qmvlab build/qmvlab --model M.gguf --device cuda \\
        --plans gpu --reference-plan 'q4_K=q4_K.cpu.avx2_f32,q6_K=q6_K.cpu.avx2_f32' \\
        --out results/<gpu>/decode-plans.csv

`--plans gpu` sweeps the default plan (`auto`: each matvec the kernel the GPU's tuning
store measured fastest) and the GPU variants for the K-quant matvecs (FFN and attention
alike): warp_f32, wide_f32, vectorized_f32, warpx2_f32, warpx3_f32, warpx4_f32, dp4a_q8_1,
halfwarp_dp4a_q8_1, warpx3_dp4a_q8_1, quarterwarp_dp4a_q8_1, tma_dp4a_q8_1 (sm_90),
each with Q6_K tensors on the same family where it exists. `--plans` also takes
`;`-separated plans in decode's rule syntax. The reference's logits are computed once (on the CPU by
default, `--reference-device`), over the prompt and the tokens the reference generates.
"""
import argparse
import array
import csv
import fnmatch
import json
import os
import subprocess
import sys
import tempfile

GPU_FAMILIES = [  # (q4_K variant, q6_K variant or None for auto)
    ("warp_f32", "warp_f32"), ("wide_f32", None), ("vectorized_f32", None),
    ("warpx2_f32", "warpx2_f32"), ("warpx3_f32", "warpx3_f32"),
    ("warpx4_f32", "warpx4_f32"), ("dp4a_q8_1", "dp4a_q8_1"),
    ("halfwarp_dp4a_q8_1", "halfwarp_dp4a_q8_1"), ("warpx3_dp4a_q8_1", None),
    ("quarterwarp_dp4a_q8_1", "quarterwarp_dp4a_q8_1"), ("tma_dp4a_q8_1", "tma_dp4a_q8_1"),
]


def fail(msg):
    print(f"plan_sweep.py: {msg}", file=sys.stderr)
    sys.exit(2)


def gpu_plans():
    plans = ["auto"]  # what a plain `decode --device cuda` runs, beside each fixed family
    for q4, q6 in GPU_FAMILIES:
        rules = [f"q4_K=q4_K.cuda.{q4}", "ffn_up_gate=none"]
        if q6:
            rules.append(f"q6_K=q6_K.cuda.{q6}")
        plans.append(",".join(rules))
    return plans


def names_excluded(plan, globs):
    """Whether a plan (rules `selector=kernel`) names a kernel one of the globs matches."""
    kernels = [rule.split("=", 1)[1] for rule in plan.split(",") if "=" in rule]
    return any(fnmatch.fnmatchcase(k, g) for k in kernels for g in globs)


def read_npy_f32(path):
    """A float32 C-order .npy (what `qmvlab logits` writes): (shape, flat values)."""
    with open(path, "rb") as f:
        if f.read(6) != b"\x93NUMPY":
            fail(f"{path}: not a .npy file")
        major = f.read(2)[0]
        header_len = int.from_bytes(f.read(2 if major == 1 else 4), "little")
        header = f.read(header_len).decode("latin1")
        if "'<f4'" not in header or "'fortran_order': False" not in header:
            fail(f"{path}: expected little-endian float32 in C order, header {header.strip()}")
        shape = tuple(int(x) for x in header.split("'shape':")[1].split("(")[1].split(")")[0].split(",") if x.strip())
        values = array.array("f")
        values.frombytes(f.read())
        if sys.byteorder != "little":
            values.byteswap()
    n = 1
    for s in shape:
        n *= s
    if len(values) != n:
        fail(f"{path}: {len(values)} values for shape {shape}")
    return shape, values


def compare_logits(ref_path, path):
    """Worst and median per-position NMSE, and the share of positions with the same argmax."""
    (pos, vocab), ref = read_npy_f32(ref_path)
    shape, got = read_npy_f32(path)
    if shape != (pos, vocab):
        fail(f"{path}: shape {shape}, reference {(pos, vocab)}")
    nmses, same = [], 0
    for p in range(pos):
        r = ref[p * vocab:(p + 1) * vocab]
        g = got[p * vocab:(p + 1) * vocab]
        num = sum((a - b) ** 2 for a, b in zip(g, r))
        den = sum(b * b for b in r) or 1.0
        nmses.append(num / den)
        same += max(range(vocab), key=r.__getitem__) == max(range(vocab), key=g.__getitem__)
    nmses.sort()
    return nmses[-1], nmses[len(nmses) // 2], same / pos


class PlanFailed(Exception):
    pass


def run(cmd, log, must=True):
    """Runs cmd, its output into the log. A failure stops the sweep when `must` (the
    reference), else raises PlanFailed so the sweep goes on with the next plan."""
    print("$ " + " ".join(cmd), flush=True)
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write("$ " + " ".join(cmd) + "\n" + res.stdout + f"\n(exit {res.returncode})\n")
    log.flush()
    if res.returncode != 0:
        print(res.stdout[-3000:], file=sys.stderr)
        if must:
            fail(f"exit {res.returncode}: {' '.join(cmd)}")
        raise PlanFailed(f"exit {res.returncode}: {res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ''}")
    return res.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qmvlab", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--plans", default="gpu", help="'gpu' or ';'-separated plans in decode's rule syntax")
    ap.add_argument("--exclude", default="",
                    help="comma-separated kernel globs: plans naming a kernel they match are left out")
    ap.add_argument("--reference-plan", required=True, help="plan with f32 activations the logits are compared with")
    ap.add_argument("--reference-device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--prompt-tokens", default="1,450,4996,310,278,3303,338")
    ap.add_argument("-n", type=int, default=64, help="tokens decoded per plan")
    ap.add_argument("--logit-positions", type=int, default=16, help="positions whose logits are compared")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", required=True, help="CSV written (one row per plan and graph setting)")
    ap.add_argument("--log", help="every command and its output (default: a file in a temporary folder)")
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        fail(f"{args.model}: no such model file")
    plans = gpu_plans() if args.plans == "gpu" else [p for p in args.plans.split(";") if p]
    excluded = [g for g in args.exclude.split(",") if g]
    for plan in [p for p in plans if names_excluded(p, excluded)]:
        print(f"plan_sweep.py: left out (it names an excluded kernel): {plan}", flush=True)
        plans.remove(plan)
    if not plans:
        fail("no plans to sweep")

    work = tempfile.mkdtemp(prefix="plan-sweep-")
    log = open(args.log or os.path.join(work, "sweep.log"), "w")
    common = ["--model", args.model, "--threads", str(args.threads)]
    # The reference: its greedy tokens fix the positions every plan's logits are taken at.
    ref_json = os.path.join(work, "ref.json")
    run([args.qmvlab, "decode", *common, "--device", args.reference_device, "--plan", args.reference_plan,
         "--prompt-tokens", args.prompt_tokens, "-n", str(args.logit_positions), "--ignore-eos", "--quiet",
         "--no-peak", "--json", ref_json], log)
    with open(ref_json) as f:
        ref = json.load(f)
    tokens = ",".join(str(t) for t in (ref["prompt_tokens"] + ref["generated_tokens"])[:args.logit_positions])
    ref_npy = os.path.join(work, "ref.npy")
    run([args.qmvlab, "logits", *common, "--device", args.reference_device, "--plan", args.reference_plan,
         "--tokens", tokens, "--out", ref_npy], log)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fields = ["plan", "device", "cuda_graph", "decode_tok_s", "prompt_tok_s", "roofline_pct", "bytes_per_token",
              "logits_nmse_max", "logits_nmse_median", "top1_agreement", "positions", "reference_plan", "model",
              "plan_kernels"]
    with open(args.out, "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=fields)
        out.writeheader()
        failed = []
        speeds = {}  # (plan, graph): decode tok/s
        for i, plan in enumerate(plans):
            npy = os.path.join(work, f"plan{i}.npy")
            try:
                run([args.qmvlab, "logits", *common, "--device", args.device, "--plan", plan, "--tokens", tokens,
                     "--out", npy], log, must=False)
            except PlanFailed as e:
                failed.append(f"{plan} (logits: {e})")
                continue
            worst, median, top1 = compare_logits(ref_npy, npy)
            graph_settings = [True, False] if args.device == "cuda" else [False]
            for graph in graph_settings:
                js = os.path.join(work, f"plan{i}-{int(graph)}.json")
                cmd = [args.qmvlab, "decode", *common, "--device", args.device, "--plan", plan, "--prompt-tokens",
                       args.prompt_tokens, "-n", str(args.n), "--ignore-eos", "--quiet", "--json", js]
                if args.device == "cuda" and not graph:
                    cmd.append("--no-cuda-graph")
                try:
                    run(cmd, log, must=False)
                except PlanFailed as e:
                    failed.append(f"{plan} graph={int(graph)} ({e})")
                    continue
                with open(js) as jf:
                    d = json.load(jf)
                row = {"plan": plan, "device": args.device, "cuda_graph": int(graph),
                       "decode_tok_s": f"{d['decode_tok_s']:.3f}", "prompt_tok_s": f"{d['prompt_tok_s']:.3f}",
                       "roofline_pct": f"{d['roofline_pct']:.2f}", "bytes_per_token": int(d["bytes_per_token"]),
                       "logits_nmse_max": f"{worst:.4g}", "logits_nmse_median": f"{median:.4g}",
                       "top1_agreement": f"{top1:.3f}", "positions": args.logit_positions,
                       "reference_plan": args.reference_plan, "model": os.path.basename(args.model),
                       "plan_kernels": json.dumps(d.get("plan_kernels", {}), sort_keys=True)}
                out.writerow(row)
                f.flush()
                speeds[(plan, graph)] = d["decode_tok_s"]
                print(f"{plan} graph={int(graph)}: {row['decode_tok_s']} tok/s, {row['roofline_pct']}% of the "
                      f"roofline, logits NMSE {row['logits_nmse_max']} (worst), top-1 {row['top1_agreement']}",
                      flush=True)
    for graph in sorted({g for _, g in speeds}, reverse=True):
        auto = speeds.get(("auto", graph))
        others = {p: v for (p, g), v in speeds.items() if g == graph and p != "auto"}
        if auto and others:
            best = max(others, key=others.get)
            print(f"auto graph={int(graph)}: {auto / others[best]:.3f}x the fastest other plan's tok/s ({best})")
    print(f"wrote {args.out} (log: {log.name})")
    if failed:
        print(f"plan_sweep.py: {len(failed)} failed: " + "; ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
