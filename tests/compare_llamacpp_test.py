#!/usr/bin/env python3
"""scripts/compare_llamacpp.py, the decode timing against llama-bench, on a toy model
(fresh seed):

- against a stand-in llama-bench that reports fresh random speeds and logs its
  arguments: it is called with -p 0, the given -n and -t, --repack 1 and 0 in every
  round, and the CSV row holds the medians of what it reported, the ratio (the median
  of the rounds' own ratios, from the progress lines) and the roofline shares, qmvlab's
  own speed and plan;
- a --device cuda dry run lists llama-bench -ngl 99 and qmvlab decode --device cuda
  for each round and runs neither;
- the errors: a missing model or a file that is not GGUF (exit 2), a llama-bench that
  fails (exit 1, its stderr shown), no llama-bench (exit 3, "skipped"), an --out whose
  header is another file's (exit 2, the file untouched); each one line, no traceback;
- its former --tokens mode is an alias: `--tokens --help` names scripts/llamacpp_tokens.py
  on stderr and prints that tool's help;
- with the pinned llama-bench, when it is there: a real run whose row says the model's
  weights and the peer build.
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

FIELDS = ["machine", "cpu_model", "qmvlab_commit", "peer", "model", "model_file", "weights", "threads", "tokens",
          "rounds", "qmvlab_tok_s", "llamacpp_tok_s", "llamacpp_norepack_tok_s", "ratio", "roofline_tok_s",
          "qmvlab_roofline_pct", "llamacpp_roofline_pct", "qmvlab_plan", "command"]

failures = []
checks = 0


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}")


def close(a, b, decimals=3):
    """Equal as far as the CSV's rounding to `decimals` decimals allows (and the
    rounding of the values a ratio or share was computed from)."""
    return math.isclose(float(a), float(b), rel_tol=1e-4, abs_tol=0.6 * 10 ** -decimals)


# A llama-bench stand-in: logs its arguments, prints a random speed as llama-bench's JSON.
FAKE_BENCH = r'''#!{python}
import json, random, sys
args = sys.argv[1:]
opt = dict(zip(args[::2], args[1::2]))
speed = random.uniform(10, 1000)
with open({log!r}, "a") as f:
    f.write(json.dumps({{"args": args, "speed": speed}}) + "\n")
print(json.dumps([{{"model_type": "llama ?B Q4_K - Medium", "n_prompt": int(opt["-p"]), "n_gen": int(opt["-n"]),
                    "avg_ts": speed}}]))
'''
FAILING_BENCH = "#!/bin/sh\necho 'loading the model...' >&2\necho 'error: the stand-in failed on purpose' >&2\nexit 1\n"


def script(args, *extra):
    return subprocess.run([sys.executable, args.script, "--qmvlab", args.qmvlab] + [str(x) for x in extra],
                          capture_output=True, text=True)


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def expect_error(args, what, code, needle, *extra):
    out = script(args, *extra)
    lines = out.stderr.strip().splitlines()
    check(out.returncode == code, f"{what}: exit {out.returncode}, expected {code} ({out.stderr.strip()[:200]})")
    check("Traceback" not in out.stderr, f"{what}: a traceback")
    check(any(needle in line for line in lines), f"{what}: stderr names {needle!r}: {out.stderr.strip()[:300]}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmvlab", required=True)
    ap.add_argument("--llama-bench", required=True, help="the pinned llama-bench (its absence skips the last part)")
    ap.add_argument("--script", required=True)
    args = ap.parse_args()
    seed = random.SystemRandom().randrange(1, 1 << 31)
    print(f"seed {seed}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = tmp / "toy.gguf"
        made = subprocess.run([args.qmvlab, "make-model", "--preset", "toy", "--mix", "q4_K_m", "--seed", str(seed),
                               "--out", model], capture_output=True, text=True)
        if made.returncode != 0:
            print(f"FAIL: make-model: {made.stderr.strip()}")
            return 1
        machine = subprocess.run([args.qmvlab, "list", "--machine"], capture_output=True, text=True).stdout.strip()

        # The stand-in: its speeds are what the row must hold.
        log = tmp / "bench.log"
        fake = tmp / "fake-llama-bench"
        fake.write_text(FAKE_BENCH.format(python=sys.executable, log=str(log)))
        fake.chmod(0o755)
        rounds, n = random.choice([(2, 5), (3, 4)])  # two or more: the ratio is of the rounds
        out_csv = tmp / "out.csv"
        run = script(args, "--model", model, "--threads", 1, "-n", n, "--rounds", rounds, "--llama-bench", fake,
                     "--out", out_csv)
        check(run.returncode == 0, f"timing run with the stand-in: exit {run.returncode}: {run.stderr.strip()[-400:]}")
        if run.returncode == 0:
            calls = [json.loads(line) for line in log.read_text().splitlines()]
            check(len(calls) == 2 * rounds, f"{len(calls)} llama-bench calls for {rounds} rounds")
            on, off = [], []
            for c in calls:
                opt = dict(zip(c["args"][::2], c["args"][1::2]))
                check(opt.get("-m") == str(model) and opt.get("-p") == "0" and opt.get("-n") == str(n)
                      and opt.get("-t") == "1" and opt.get("-o") == "json", f"llama-bench arguments {c['args']}")
                (on if opt.get("--repack") == "1" else off).append(c["speed"])
            check(len(on) == rounds and len(off) == rounds, "one --repack 1 and one --repack 0 call per round")
            rows = read_rows(out_csv)
            check(rows and rows[0] == FIELDS, f"header {rows[0] if rows else None}")
            check(len(rows) == 2, f"{len(rows) - 1} rows for one model")
            if len(rows) == 2 and rows[0] == FIELDS and on and off:
                r = dict(zip(FIELDS, rows[1]))
                print(f"row: {r}")
                check(r["machine"] == machine, f"machine {r['machine']} (qmvlab says {machine})")
                check(r["model_file"] == model.name and r["weights"] == "Q4_K_M",
                      f"model_file {r['model_file']}, weights {r['weights']}")
                check((r["threads"], r["tokens"], r["rounds"]) == ("1", str(n), str(rounds)),
                      f"threads/tokens/rounds {r['threads']}/{r['tokens']}/{r['rounds']}")
                check(close(r["llamacpp_tok_s"], statistics.median(on)),
                      f"llamacpp_tok_s {r['llamacpp_tok_s']} is the median of {on}")
                check(close(r["llamacpp_norepack_tok_s"], statistics.median(off)),
                      f"llamacpp_norepack_tok_s {r['llamacpp_norepack_tok_s']} is the median of {off}")
                q, roof = float(r["qmvlab_tok_s"]), float(r["roofline_tok_s"] or "nan")
                check(q > 0 and roof > 0, f"qmvlab {q} tok/s, roofline {roof} tok/s")
                # Each round's own ratio, from its progress line (speeds to 2 decimals).
                per_round = [float(m.group(2)) / float(m.group(1)) for m in re.finditer(
                    r"round \d+/\d+: llama\.cpp ([0-9.]+) tok/s.*?, qmvlab ([0-9.]+) tok/s", run.stderr)]
                check(len(per_round) == rounds, f"{len(per_round)} round lines for {rounds} rounds")
                check(per_round and math.isclose(float(r["ratio"]), statistics.median(per_round), rel_tol=0.01),
                      f"ratio {r['ratio']} is the median of the rounds' ratios {per_round}")
                check(close(r["qmvlab_roofline_pct"], 100 * q / roof, 2),
                      f"qmvlab_roofline_pct {r['qmvlab_roofline_pct']}")
                check(close(r["llamacpp_roofline_pct"], 100 * float(r["llamacpp_tok_s"]) / roof, 2),
                      f"llamacpp_roofline_pct {r['llamacpp_roofline_pct']}")
                check("q4_K" in r["qmvlab_plan"], f"qmvlab_plan {r['qmvlab_plan'][:100]}")
                check(str(model) in r["command"], f"command {r['command']}")
            # A second run appends, the header once.
            again = script(args, "--model", model, "--threads", 1, "-n", 4, "--rounds", 1, "--llama-bench", fake,
                           "--out", out_csv)
            check(again.returncode == 0 and len(read_rows(out_csv)) == 3, "a second run appends one row")

        # --device cuda, dry: each round's llama-bench offloads every layer (-ngl 99, no
        # --repack, a CPU option) and qmvlab decodes with --device cuda; nothing runs.
        calls_before = log.read_text() if log.exists() else ""
        dry = script(args, "--device", "cuda", "--dry-run", "--model", model, "--rounds", rounds, "-n", n,
                     "--llama-bench", fake, "--out", tmp / "dry.csv")
        lines = dry.stdout.splitlines()
        bench_lines = [ln for ln in lines if ln.startswith(str(fake))]
        decode_lines = [ln for ln in lines if ln.startswith(f"{args.qmvlab} decode")]
        check(dry.returncode == 0, f"dry run: exit {dry.returncode}: {dry.stderr.strip()[-300:]}")
        check(len(bench_lines) == rounds and all("-ngl 99" in ln and "--repack" not in ln for ln in bench_lines),
              f"dry run: {rounds} llama-bench -ngl 99 lines: {bench_lines}")
        check(len(decode_lines) == rounds and all("--device cuda" in ln for ln in decode_lines),
              f"dry run: {rounds} qmvlab decode --device cuda lines: {decode_lines}")
        check(not (tmp / "dry.csv").exists() and (log.read_text() if log.exists() else "") == calls_before,
              "dry run: nothing ran, nothing written")

        # The errors.
        expect_error(args, "missing model", 2, str(tmp / "nope.gguf"), "--model", tmp / "nope.gguf",
                     "--llama-bench", fake, "--out", tmp / "e.csv")
        not_gguf = tmp / "text.gguf"
        not_gguf.write_text("not a model\n")
        expect_error(args, "not GGUF", 2, "not a GGUF file", "--model", not_gguf, "--llama-bench", fake,
                     "--out", tmp / "e.csv")
        failing = tmp / "failing-llama-bench"
        failing.write_text(FAILING_BENCH)
        failing.chmod(0o755)
        expect_error(args, "llama-bench failing", 1, "the stand-in failed on purpose", "--model", model,
                     "--llama-bench", failing, "--out", tmp / "e.csv")
        out = expect_error(args, "no llama-bench", 3, "skipped", "--model", model, "--llama-bench", tmp / "none",
                           "--out", tmp / "e.csv")
        check(len(out.stderr.strip().splitlines()) == 1, f"the skip is one line: {out.stderr.strip()}")
        other = tmp / "other.csv"
        other.write_text("a,b,c\n1,2,3\n")
        expect_error(args, "another file's header", 2, str(other), "--model", model, "--llama-bench", fake,
                     "--out", other)
        check(other.read_text() == "a,b,c\n1,2,3\n", "a CSV with another header is left as it was")

        # --tokens runs scripts/llamacpp_tokens.py with the other arguments.
        alias = subprocess.run([sys.executable, args.script, "--tokens", "--help"], capture_output=True, text=True)
        check(alias.returncode == 0 and "llamacpp_tokens.py" in alias.stderr and "--golden" in alias.stdout
              and "--rounds" not in alias.stdout,
              f"--tokens --help: exit {alias.returncode}, stderr {alias.stderr.strip()[:200]!r}")

        # The pinned build itself.
        if not Path(args.llama_bench).is_file():
            print(f"{checks - len(failures)} passed, {len(failures)} failed before the real run")
            if failures:
                return 1
            print(f"peer build missing ({args.llama_bench}): skipped")
            return 77
        real_csv = tmp / "real.csv"
        run = script(args, "--model", model, "--threads", 1, "-n", 4, "--rounds", 1, "--llama-bench",
                     args.llama_bench, "--out", real_csv)
        check(run.returncode == 0, f"the pinned llama-bench: exit {run.returncode}: {run.stderr.strip()[-400:]}")
        if run.returncode == 0:
            r = dict(zip(FIELDS, read_rows(real_csv)[1]))
            commit = Path(args.llama_bench).resolve().parents[2] / "commit"
            want_peer = commit.read_text().strip() if commit.is_file() else "unknown"
            check(r["peer"] == want_peer, f"peer {r['peer']!r}, the build's commit file says {want_peer!r}")
            check(r["weights"] == "Q4_K_M", f"weights {r['weights']}")
            check(float(r["llamacpp_tok_s"]) > 0 and float(r["llamacpp_norepack_tok_s"]) > 0,
                  f"llama.cpp speeds {r['llamacpp_tok_s']}, {r['llamacpp_norepack_tok_s']}")
    print(f"compare_llamacpp: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
