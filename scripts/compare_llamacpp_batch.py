#!/usr/bin/env python3
"""qmvlab's batch decode against llama.cpp's, on the same GGUF file and thread count.

For each batch size B of --batch: llama.cpp's pinned `llama-batched-bench`
(scripts/install-peers.sh builds it; one shared prompt of one token, B sequences, -n
tokens each: `-npp 1 -ntg N -npl B -pps`) alternating round by round with `qmvlab
decode --batch B` (the model's BOS token as the prompt, -n N, --ignore-eos; B = 1: the
plain decode); --rounds rounds, medians of the tokens/s of all the sequences together
(llama.cpp's S_TG; qmvlab's decode_tok_s, timed from each sequence's second token).
One row per model and B is appended to --out (default
results/<machine>/decode-batch-vs-llamacpp.csv), with qmvlab's tokens/s over its own
at B = 1 where 1 is in --batch; a table goes to stdout, progress to stderr.

  scripts/compare_llamacpp_batch.py --model models/synthetic-llama-2-7b-q4_K_m.gguf --batch 1,4 -n 32

Exit status: 0 done, 1 a tool failed, 2 bad input, 3 skipped: the pinned
llama-batched-bench is not there. --dry-run prints the commands and runs none.
"""
import argparse
import csv
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_llamacpp  # noqa: E402
import llamacpp_tools  # noqa: E402
from llamacpp_tools import (EXIT_FAILED, EXIT_SKIPPED, PEER_DIR, ROOT, add_shared_options, fail, median,  # noqa: E402
                            progress, run_checked, run_tool, tail)

llamacpp_tools.TOOL = "compare_llamacpp_batch"

FIELDS = ["machine", "cpu_model", "qmvlab_commit", "peer", "model_file", "threads", "batch", "tokens", "rounds",
          "qmvlab_tok_s", "llamacpp_tok_s", "ratio", "qmvlab_over_batch_1", "llamacpp_over_batch_1",
          "qmvlab_roofline_pct", "command"]


def batched_bench_command(exe, model, n, threads, batch):
    # The KV cache: the shared prompt token and every sequence's tokens.
    return [exe, "-m", model, "-c", 1 + batch * n + 16, "-b", 512, "-ub", 512, "-npp", 1, "-ntg", n, "-npl", batch, "-pps",
            "-t", threads, "-tb", threads, "--output-format", "jsonl"]


# llama-batched-bench prints its results through llama.cpp's logger, whose writer thread
# now and then has not written them when the process exits (exit 0, no output): such a
# run is made again, up to this many times in all.
BENCH_TRIES = 5


def batched_bench(exe, model, n, threads, batch):
    """llama.cpp's tokens/s of all the sequences together (S_TG)."""
    cmd = batched_bench_command(exe, model, n, threads, batch)
    for _ in range(BENCH_TRIES):
        out = run_checked(cmd, "llama-batched-bench")
        for line in out.stdout.splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if row.get("pl") == batch and row.get("tg") == n:
                return float(row["speed_tg"])
        if out.stdout.strip():
            break  # it printed something else: not the lost output
    fail(f"llama-batched-bench printed no result for {batch} sequences: {shlex.join(map(str, cmd))}\n"
         f"{tail(out.stdout + out.stderr)}", EXIT_FAILED)


def qmvlab_command(exe, model, token, n, threads, batch, plan, out_json):
    return ([exe, "decode", "--model", model, "--prompt-tokens", token, "-n", n, "--threads", threads, "--ignore-eos",
             "--quiet", "--json", out_json] + (["--batch", batch] if batch > 1 else [])
            + (["--plan", plan] if plan else []))


def qmvlab_decode(exe, model, token, n, threads, batch, plan, tmpdir):
    out_json = Path(tmpdir) / "decode.json"
    out_json.unlink(missing_ok=True)
    run_checked(qmvlab_command(exe, model, token, n, threads, batch, plan, out_json), "qmvlab decode")
    try:
        result = json.loads(out_json.read_text())
        return float(result["decode_tok_s"]), result.get("roofline_pct")
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        fail(f"qmvlab decode wrote no readable JSON ({out_json}): {e}", EXIT_FAILED)


def parse_batches(text):
    try:
        batches = sorted({int(b) for b in text.split(",")})
    except ValueError:
        fail(f"--batch {text!r}: give batch sizes as numbers, e.g. 1,4")
    if not batches or batches[0] < 1 or batches[-1] > 8:
        fail(f"--batch {text!r}: batch sizes go from 1 to 8")
    return batches


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF model")
    ap.add_argument("--batch", default="1,4", help="batch sizes, comma-separated (default 1,4)")
    ap.add_argument("-n", dest="n", type=int, default=32, help="tokens per sequence (default 32)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--batched-bench", default=str(PEER_DIR / "build/bin/llama-batched-bench"),
                    help="the peer (default: the pinned build's)")
    ap.add_argument("--out", help="append CSV rows here (default results/<machine>/decode-batch-vs-llamacpp.csv)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands a run would make, run none")
    add_shared_options(ap)
    args = ap.parse_args()
    batches = parse_batches(args.batch)
    if args.threads < 1 or args.rounds < 1 or args.n < 2:
        fail("--threads and --rounds must be at least 1, -n at least 2")
    model, bench, qmvlab = Path(args.model), Path(args.batched_bench), Path(args.qmvlab)
    if not model.is_file():
        fail(f"model {model} not found")
    meta = compare_llamacpp.gguf_metadata(model)
    if meta is None:
        fail(f"model {model}: not a GGUF file")
    token = compare_llamacpp.prompt_token(meta)
    if args.dry_run:
        for r in range(args.rounds):
            for b in batches:
                print(f"# {model.name}, {b} sequence(s), round {r + 1}/{args.rounds}")
                print(shlex.join(map(str, batched_bench_command(bench, model, args.n, args.threads, b))))
                print(shlex.join(map(str, qmvlab_command(qmvlab, model, token, args.n, args.threads, b, args.plan,
                                                         "DECODE.json"))))
        return
    if not bench.is_file():
        fail(f"peer build missing ({bench}; scripts/install-peers.sh builds it): skipped", EXIT_SKIPPED)
    if not (qmvlab.is_file() and os.access(qmvlab, os.X_OK)):
        fail(f"qmvlab executable {qmvlab} not found (build it, or pass --qmvlab)")
    machine = run_tool([qmvlab, "list", "--machine"], "qmvlab list").stdout.strip() or "unknown"
    out_path = Path(args.out) if args.out else ROOT / "results" / machine / "decode-batch-vs-llamacpp.csv"
    if out_path.is_file() and out_path.stat().st_size > 0:
        with open(out_path, newline="") as f:
            if next(csv.reader(f), []) != FIELDS:
                fail(f"{out_path}: its header is not this script's ({','.join(FIELDS[:4])},...); pass another --out")
    peer = compare_llamacpp.peer_description(bench)
    progress(f"{peer}; {model.name}; batch {','.join(map(str, batches))}; {args.threads} threads; {args.n} tokens; "
             f"{args.rounds} rounds")
    ours, theirs, roof = {b: [] for b in batches}, {b: [] for b in batches}, {b: [] for b in batches}
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmpdir:
        for r in range(args.rounds):
            for b in batches:
                theirs[b].append(batched_bench(bench, model, args.n, args.threads, b))
                speed, pct = qmvlab_decode(qmvlab, model, token, args.n, args.threads, b, args.plan, tmpdir)
                ours[b].append(speed)
                if pct is not None:
                    roof[b].append(float(pct))
                progress(f"  round {r + 1}/{args.rounds}, {b} sequence(s): llama.cpp {theirs[b][-1]:.2f} tok/s, "
                         f"qmvlab {ours[b][-1]:.2f} tok/s")
    q = {b: median(ours[b]) for b in batches}
    l = {b: median(theirs[b]) for b in batches}

    def round_ratio(top, bottom):
        """The median of the rounds' own ratios: the host's speed can move between rounds,
        not within one (compare_llamacpp.py)."""
        pairs = [t / u for t, u in zip(top, bottom) if u > 0]
        return f"{median(pairs):.3f}" if pairs else ""
    shown = model.resolve().relative_to(ROOT) if model.resolve().is_relative_to(ROOT) else model
    command = shlex.join(["scripts/compare_llamacpp_batch.py", "--model", str(shown), "--batch", args.batch,
                          "--threads", str(args.threads), "-n", str(args.n), "--rounds", str(args.rounds)]
                         + (["--plan", args.plan] if args.plan else []))
    commit = run_tool(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], "git").stdout.strip()
    cpu_model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "") if Path("/proc/cpuinfo").is_file() else ""
    rows = []
    for b in batches:
        rows.append({"machine": machine, "cpu_model": cpu_model, "qmvlab_commit": commit,
                     "peer": peer, "model_file": model.name, "threads": args.threads, "batch": b, "tokens": args.n,
                     "rounds": args.rounds, "qmvlab_tok_s": f"{q[b]:.3f}", "llamacpp_tok_s": f"{l[b]:.3f}",
                     "ratio": round_ratio(ours[b], theirs[b]),
                     "qmvlab_over_batch_1": round_ratio(ours[b], ours[1]) if 1 in ours else "",
                     "llamacpp_over_batch_1": round_ratio(theirs[b], theirs[1]) if 1 in theirs else "",
                     "qmvlab_roofline_pct": f"{median(roof[b]):.2f}" if roof[b] else "", "command": command})
    out_path.parent.mkdir(parents=True, exist_ok=True)
    new = not out_path.exists() or out_path.stat().st_size == 0
    with open(out_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerows(rows)
    print("| batch | qmvlab tok/s (all) | llama.cpp tok/s (all) | qmvlab / llama.cpp | qmvlab over batch 1 "
          "| llama.cpp over batch 1 | qmvlab % of roofline |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} | {r['qmvlab_tok_s']} | {r['llamacpp_tok_s']} | {r['ratio']} | "
              f"{r['qmvlab_over_batch_1']} | {r['llamacpp_over_batch_1']} | {r['qmvlab_roofline_pct']} |")
    print(f"medians of {args.rounds} alternating rounds of {args.n} tokens per sequence, {model.name}, "
          f"{args.threads} threads, {time.monotonic() - start:.0f} s; {peer}; appended to {out_path}")


if __name__ == "__main__":
    main()
