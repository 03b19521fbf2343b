#!/usr/bin/env python3
"""scripts/compare_llamacpp_batch.py, qmvlab decode --batch against llama-batched-bench,
on a toy model (fresh seed):

- against a stand-in llama-batched-bench that reports fresh random speeds as its JSONL
  and logs its arguments: each round runs it with -npp 1 -ntg N -npl B -pps and the
  thread count, for every B of --batch, and the CSV rows hold the medians of what it
  reported and qmvlab's, and their ratio and each over batch 1 as the median of the
  rounds' own ratios (from the progress lines);
- a dry run lists both commands per round and batch, and runs neither;
- the errors: a missing model, a bad --batch (exit 2), no peer (exit 3, "skipped"), a
  failing peer (exit 1); one line each, no traceback; a run whose output the peer lost
  (exit 0, nothing printed) is made again;
- with the pinned llama-batched-bench, when it is there: a real run of two rounds.
Exit 77 only when all but the last passed and the pinned build is not there.
"""
import argparse
import csv
import json
import math
import random
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

failures = []
checks = 0


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}")


FAKE = r'''#!{python}
import json, random, sys
args = sys.argv[1:]
opt = {{flag: args[i + 1] for i, flag in enumerate(args[:-1]) if flag.startswith("-")}}
speed = random.uniform(10, 1000)
with open({log!r}, "a") as f:
    f.write(json.dumps({{"args": args, "speed": speed}}) + "\n")
if {fail!r}:
    print("stand-in failure", file=sys.stderr)
    sys.exit(4)
if {lose_first!r} and sum(1 for _ in open({log!r})) == 1:
    sys.exit(0)  # llama.cpp's logger losing the output: exit 0, nothing printed
print("llama_model_load: noise")
print(json.dumps({{"pp": 1, "tg": int(opt["-ntg"]), "pl": int(opt["-npl"]), "speed_tg": speed}}))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmvlab", required=True)
    ap.add_argument("--script", required=True)
    ap.add_argument("--batched-bench", required=True, help="the pinned llama-batched-bench (may be missing)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = tmp / "toy.gguf"
        subprocess.run([a.qmvlab, "make-model", "--preset", "toy", "--arch", "llama", "--mix", "q4_K_m", "--seed",
                        str(random.SystemRandom().randrange(1, 1 << 30)), "--out", model], check=True,
                       capture_output=True)

        def script(*argv, bench):
            return subprocess.run([sys.executable, a.script, "--model", model, "--qmvlab", a.qmvlab, "--threads", "2",
                                   "--batched-bench", bench, *map(str, argv)], capture_output=True, text=True)

        def one_line_error(r, code, text, what):
            check(r.returncode == code and text in r.stderr and "Traceback" not in r.stderr
                  and len(r.stderr.strip().splitlines()) == 1, f"{what}: exit {r.returncode}, stderr {r.stderr!r}")

        log = tmp / "bench.log"
        fake = tmp / "fake-batched-bench"
        fake.write_text(FAKE.format(python=sys.executable, log=str(log), fail=False, lose_first=False))
        fake.chmod(0o755)
        out = tmp / "rows.csv"
        r = script("--batch", "1,2", "-n", "4", "--rounds", "3", "--out", out, bench=fake)
        check(r.returncode == 0, f"stand-in run: exit {r.returncode}: {r.stderr[-500:]}")
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        check(len(calls) == 6, f"want 3 rounds x 2 batch sizes of the peer, got {len(calls)}")
        def value(args, flag):
            return args[args.index(flag) + 1] if flag in args[:-1] else None

        for c in calls:
            args = c["args"]
            check(value(args, "-npp") == "1" and value(args, "-ntg") == "4" and value(args, "-t") == "2"
                  and "-pps" in args, f"peer arguments {args}")
        rows = list(csv.DictReader(open(out))) if out.exists() else []
        check([row["batch"] for row in rows] == ["1", "2"], f"want a row per batch size, got {rows}")
        # Each round's speeds, from its progress line (to 2 decimals): {batch: [(llama.cpp, qmvlab)]}.
        rounds = {}
        for m in re.finditer(r"round \d+/\d+, (\d+) sequence\(s\): llama\.cpp ([0-9.]+) tok/s, qmvlab ([0-9.]+) tok/s",
                             r.stderr):
            rounds.setdefault(int(m.group(1)), []).append((float(m.group(2)), float(m.group(3))))
        check(sorted(rounds) == [1, 2] and all(len(v) == 3 for v in rounds.values()), f"round lines {rounds}")

        def near(value, want):
            return want > 0 and math.isclose(float(value), want, rel_tol=0.01)

        for row in rows:
            b = int(row["batch"])
            theirs = statistics.median(c["speed"] for c in calls if value(c["args"], "-npl") == str(b))
            check(abs(float(row["llamacpp_tok_s"]) - theirs) < 1e-3, f"batch {b}: llama.cpp {row['llamacpp_tok_s']}, "
                  f"the stand-in's median {theirs:.3f}")
            per_round = [q / l for l, q in rounds.get(b, [])]
            check(per_round and near(row["ratio"], statistics.median(per_round)),
                  f"batch {b}: ratio {row['ratio']}, the rounds' {per_round}")
        if len(rows) == 2 and sorted(rounds) == [1, 2]:
            over = [two[1] / one[1] for one, two in zip(rounds[1], rounds[2])]
            check(near(rows[1]["qmvlab_over_batch_1"], statistics.median(over)),
                  f"qmvlab over batch 1: {rows[1]['qmvlab_over_batch_1']}, the rounds' {over}")
            check(rows[0]["qmvlab_over_batch_1"] == "1.000", f"batch 1 over itself: {rows[0]['qmvlab_over_batch_1']}")

        r = script("--batch", "1,4", "--rounds", "2", "--dry-run", bench=tmp / "nowhere")
        check(r.returncode == 0 and r.stdout.count("-npl 4") == 2 and r.stdout.count("--batch 4") == 2
              and r.stdout.count("decode --model") == 4, f"dry run: {r.stdout}")
        one_line_error(script("--batch", "0", bench=fake), 2, "batch sizes go from 1 to 8", "--batch 0")
        one_line_error(script("--batch", "x", bench=fake), 2, "give batch sizes as numbers", "--batch x")
        one_line_error(script(bench=tmp / "nowhere"), 3, "skipped", "no peer")
        bad = tmp / "failing-batched-bench"
        bad.write_text(FAKE.format(python=sys.executable, log=str(tmp / "bad.log"), fail=True, lose_first=False))
        bad.chmod(0o755)
        r = script("--batch", "2", "-n", "4", "--rounds", "1", "--out", tmp / "x.csv", bench=bad)
        check(r.returncode == 1 and "stand-in failure" in r.stderr and "Traceback" not in r.stderr,
              f"failing peer: exit {r.returncode}: {r.stderr}")
        # A run whose output the peer's logger lost is made again.
        lossy_log = tmp / "lossy.log"
        lossy = tmp / "lossy-batched-bench"
        lossy.write_text(FAKE.format(python=sys.executable, log=str(lossy_log), fail=False, lose_first=True))
        lossy.chmod(0o755)
        r = script("--batch", "2", "-n", "4", "--rounds", "1", "--out", tmp / "lossy.csv", bench=lossy)
        check(r.returncode == 0 and len(lossy_log.read_text().splitlines()) == 2,
              f"lost output not run again: exit {r.returncode}, {r.stderr[-300:]}")
        r = subprocess.run([sys.executable, a.script, "--model", tmp / "missing.gguf", "--batched-bench", fake],
                           capture_output=True, text=True)
        one_line_error(r, 2, "not found", "missing model")

        print(f"compare_llamacpp_batch: {checks - len(failures)} of {checks} checks passed")
        if failures:
            return 1
        if not Path(a.batched_bench).is_file():
            print(f"SKIP: the pinned {a.batched_bench} is not there (scripts/install-peers.sh builds it)")
            return 77
        real = tmp / "real.csv"
        r = script("--batch", "1,2", "-n", "4", "--rounds", "2", "--out", real, bench=a.batched_bench)
        check(r.returncode == 0, f"real run: exit {r.returncode}: {r.stderr[-800:]}")
        rows = list(csv.DictReader(open(real))) if real.exists() else []
        check(len(rows) == 2 and all(float(row["llamacpp_tok_s"]) > 0 and float(row["qmvlab_tok_s"]) > 0
                                     and "llama.cpp" in row["peer"] for row in rows), f"real rows: {rows}")
        print(f"with the pinned peer: {len(failures)} failed")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
