#!/usr/bin/env python3
"""Decode A/B: two variants of one `qmvlab decode` run, interleaved A B B A for --rounds
rounds, each run's row appended to --out (decode's CSV, per-op times included). A shared
host drifts by tens of percent within minutes, so the comparison is made per round, A
against the B runs beside it, and the medians of those ratios are reported:

  - tok/s, B over A;
  - for each --ratio NUM/DEN (op names of the per-op columns joined by '+'), the time of
    NUM over the time of DEN within each run, B's over A's. Both sides come from one
    run, so the host's drift cancels: "ffn_up_gate+ffn_gate+ffn_up/ffn_down" sets a
    fused gate+up against two matvecs by the FFN's other matvec.

A variant may also be another build: --b-qmvlab names B's binary (a change against
the commit before it, built in a second tree).

    scripts/decode_ab.py --model models/M.gguf --threads 2 -n 64 --rounds 8 \\
        --a "--plan auto" --b "--plan ffn_up_gate=none" \\
        --ratio "ffn_up_gate+ffn_gate+ffn_up/ffn_down" --out results/<machine>/decode-ab.csv

The runs skip decode's peak measurement (--no-peak): the comparison is between runs,
not against the roofline, and each measurement would cost seconds of the host's time.
With two threads or more, each run's row holds a round trip between its threads timed
after its tokens (thread_round_trip_ns). A host that moves the threads between cores
that share a cache and cores that do not changes its speed by up to 1.6x
(results/README.md, "Two placements"): a round whose round trips differ more than 3x
met both, and the medians are then of the rounds that met one placement (all of them
where none did), saying how many.
An option string that is one option alone is written with '=' (--extra=--mmap).

Exit status 0 when every run succeeded; 1 when one failed (its output is printed) or a
--ratio names ops a run did not time; 2 on bad arguments.
"""
import argparse
import csv
import os
import shlex
import statistics
import subprocess
import sys


def parse_ratio(text):
    try:
        num, den = text.split("/")
        ops = [o.strip() for o in num.split("+")], [o.strip() for o in den.split("+")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not NUM/DEN (op names joined by '+')")
    if not all(ops[0]) or not all(ops[1]):
        raise argparse.ArgumentTypeError(f"'{text}' has an empty op name")
    return text, ops


def op_time(row, ops, path):
    """The summed ms per token of `ops` in one decode row (empty: the op did not run)."""
    total = 0.0
    for op in ops:
        column = f"{op}_ms_per_token"
        if column not in row:
            sys.exit(f"decode_ab: {path} has no column {column}: not an op of this qmvlab's decode CSV")
        if row[column]:
            total += float(row[column])
    return total


# A round trip this much longer than another: the threads were moved in between
# (harness/peak.h, kOtherPlacementRatio).
OTHER_PLACEMENT_RATIO = 3


def one_placement(round_trips_ns):
    """Whether round trips timed after several runs all met one placement of the threads
    (zeros, untimed, left out)."""
    timed = [ns for ns in round_trips_ns if ns > 0]
    return not timed or max(timed) <= OTHER_PLACEMENT_RATIO * min(timed)


def rounds_to_weigh(rounds):
    """The rounds whose runs met one placement (each round a dict with 'round_trips_ns'),
    or all of them where none did."""
    kept = [r for r in rounds if one_placement(r["round_trips_ns"])]
    return kept or rounds


def last_row(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"decode_ab: {path} has no rows after a run")
    return rows[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qmvlab", default="build/qmvlab")
    ap.add_argument("--b-qmvlab", help="variant B's qmvlab binary (default: --qmvlab)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--a", default="", help="decode options of variant A (one string)")
    ap.add_argument("--b", default="", help="decode options of variant B (one string)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("-n", type=int, default=64, help="tokens decoded per run")
    ap.add_argument("--prompt-tokens", default="1,450,4996,310,278,3303,338")
    ap.add_argument("--rounds", type=int, default=8, help="rounds of A B B A")
    ap.add_argument("--ratio", type=parse_ratio, action="append", default=[], metavar="NUM/DEN")
    ap.add_argument("--extra", default="", help="decode options both variants take (one string)")
    ap.add_argument("--out", required=True, help="decode CSV the runs append to")
    args = ap.parse_args()
    if args.rounds < 1 or args.n < 2:
        ap.error("--rounds must be >= 1 and -n >= 2 (decode times the tokens after the first)")
    binaries = {"A": args.qmvlab, "B": args.b_qmvlab or args.qmvlab}
    for side, path in binaries.items():
        if not os.access(path, os.X_OK):
            ap.error(f"{'--qmvlab' if side == 'A' or not args.b_qmvlab else '--b-qmvlab'} {path} is not an executable")

    common = ["decode", "--model", args.model, "--threads", str(args.threads), "-n", str(args.n),
              "--prompt-tokens", args.prompt_tokens, "--ignore-eos", "--quiet", "--no-peak", "--out", args.out,
              *shlex.split(args.extra)]
    variants = {"A": shlex.split(args.a), "B": shlex.split(args.b)}

    def run(side, rnd):
        cmd = [binaries[side]] + common + variants[side]
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if res.returncode != 0:
            print(res.stdout, file=sys.stderr)
            sys.exit(f"decode_ab: round {rnd} {side} failed (exit {res.returncode}): {shlex.join(cmd)}")
        row = last_row(args.out)
        threads = f", threads {float(row['thread_round_trip_ns']):.0f} ns" if row.get("thread_round_trip_ns") else ""
        print(f"round {rnd} {side}: {float(row['decode_tok_s']):.2f} tok/s{threads}", flush=True)
        return row

    per_round = []
    for rnd in range(1, args.rounds + 1):
        rows = {"A": [], "B": []}
        round_trips = []
        for side in "ABBA":
            rows[side].append(run(side, rnd))
            round_trips.append(float(rows[side][-1].get("thread_round_trip_ns") or 0))
        if not one_placement(round_trips):
            print(f"round {rnd}: the host moved the threads within the round", flush=True)
        tok = {s: statistics.mean(float(r["decode_tok_s"]) for r in rows[s]) for s in rows}
        ratios = []
        for text, (num, den) in args.ratio:
            share = {}
            for s in rows:
                times = [(op_time(r, num, args.out), op_time(r, den, args.out)) for r in rows[s]]
                if any(n <= 0 or d <= 0 for n, d in times):
                    sys.exit(f"decode_ab: round {rnd} {s}: the ops of --ratio {text} did not all run "
                             "(each side needs time in NUM and in DEN)")
                share[s] = statistics.mean(n / d for n, d in times)
            ratios.append(share["B"] / share["A"])
        per_round.append({"tok": tok["B"] / tok["A"], "ratios": ratios, "round_trips_ns": round_trips})

    def named(side, opts):
        return opts + (f" ({binaries[side]})" if args.b_qmvlab else "")

    weighed = rounds_to_weigh(per_round)
    which = ("" if len(weighed) == len(per_round) else
             f"; the {len(weighed)} of {args.rounds} rounds whose runs met one placement of the threads")
    print(f"\nB over A, per round ({args.rounds} rounds of A B B A; A: {named('A', args.a)}; "
          f"B: {named('B', args.b)}{which}):")
    tok_ratios = [r["tok"] for r in weighed]
    print(f"  tok/s: median {statistics.median(tok_ratios):.3f} (range {min(tok_ratios):.3f}-"
          f"{max(tok_ratios):.3f}; B faster in {sum(r > 1 for r in tok_ratios)} of {len(tok_ratios)})")
    for i, (text, _) in enumerate(args.ratio):
        vals = [r["ratios"][i] for r in weighed]
        print(f"  {text} time: median {statistics.median(vals):.3f} (range {min(vals):.3f}-{max(vals):.3f}; "
              f"below 1, B's share is smaller, in {sum(v < 1 for v in vals)} of {len(vals)})")
    if not any(one_placement(r["round_trips_ns"]) for r in per_round):
        print("every round met two placements of the threads; the medians are of them all")
    print(f"rows appended to {args.out}")


if __name__ == "__main__":
    main()
