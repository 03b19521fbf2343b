"""scripts/decode_ab.py on the CPU with a fresh toy model: every round runs A B B A, each
run appends its decode row, the per-round ratios are printed; a --ratio naming an op
the CSV lacks, an op a run did not time, and a failing variant each stop it with a
message and exit 1. The printed medians are recomputed from the rows. With two threads
each row holds the round trip timed after its tokens, and the rounds weighed are those
whose round trips met one placement of the threads."""
import argparse
import csv
import importlib.util
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--qmvlab", required=True)
ap.add_argument("--script", required=True)
args = ap.parse_args()

work = tempfile.mkdtemp(prefix="decode-ab-test-")
model = os.path.join(work, "toy.gguf")
seed = int(os.environ.get("QMV_TEST_SEED") or random.randrange(1, 2**31))
print(f"toy model seed {seed} (replay: QMV_TEST_SEED={seed})", flush=True)
subprocess.run([args.qmvlab, "make-model", "--preset", "toy", "--mix", "q8_0", "--seed", str(seed), "--out", model],
               check=True, stdout=subprocess.DEVNULL)
out = os.path.join(work, "ab.csv")
base = [sys.executable, args.script, "--qmvlab", args.qmvlab, "--model", model, "--threads", "1", "-n", "4",
        "--prompt-tokens", "1,7,42", "--extra=--mmap", "--out", out]
apart, scalar = "--plan ffn_up_gate=none", "--plan ffn_up_gate=none,q8_0=q8_0.cpu.scalar_f32"


def run(*extra):
    return subprocess.run(base + list(extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


res = run("--a", apart, "--b", scalar, "--rounds", "2", "--ratio", "ffn_gate+ffn_up/ffn_down",
          "--ratio", "attn_q/lm_head")
assert res.returncode == 0, res.stdout
rows = list(csv.DictReader(open(out)))
plans = [r["plan"] for r in rows]
assert len(rows) == 8, plans
a_plan, b_plan = plans[0], plans[1]
assert a_plan != b_plan, plans
assert plans == [a_plan, b_plan, b_plan, a_plan] * 2, plans  # A B B A, twice
assert all(r["op_timed_tokens"] == "3" for r in rows), [r["op_timed_tokens"] for r in rows]


def printed_median(label):
    m = re.search(re.escape(label) + r": median (\d+\.\d+) ", res.stdout)
    assert m, f"no '{label}: median' line:\n{res.stdout}"
    return float(m.group(1))


def op_ms(row, ops):
    return sum(float(row[f"{op}_ms_per_token"]) for op in ops.split("+"))


# Each round's ratios from its rows (A B B A), B's over A's; the medians as printed.
rounds = [{"A": [rows[i], rows[i + 3]], "B": [rows[i + 1], rows[i + 2]]} for i in (0, 4)]
expected = {"tok/s": [statistics.mean(float(r["decode_tok_s"]) for r in rd["B"]) /
                      statistics.mean(float(r["decode_tok_s"]) for r in rd["A"]) for rd in rounds]}
for text in ("ffn_gate+ffn_up/ffn_down", "attn_q/lm_head"):
    num, den = text.split("/")
    share = [{s: statistics.mean(op_ms(r, num) / op_ms(r, den) for r in rd[s]) for s in rd} for rd in rounds]
    expected[f"{text} time"] = [sh["B"] / sh["A"] for sh in share]
for label, values in expected.items():
    got, want = printed_median(label), statistics.median(values)
    assert abs(got - want) <= 0.0011, f"{label}: printed median {got}, the rows give {want:.4f}\n{res.stdout}"

# Two threads: each run's row and line carry the round trip timed after its tokens.
before = len(rows)
res = run("--a", apart, "--b", apart, "--rounds", "1", "--threads", "2")
assert res.returncode == 0, res.stdout
two = list(csv.DictReader(open(out)))[before:]
round_trips = [r["thread_round_trip_ns"] for r in two]
assert len(two) == 4 and all(float(ns) > 0 for ns in round_trips), round_trips
assert len(re.findall(r"round 1 [AB]: \d+\.\d+ tok/s, threads \d+ ns", res.stdout)) == 4, res.stdout

# The rounds weighed: those whose round trips met one placement, all where none did.
spec = importlib.util.spec_from_file_location("decode_ab", args.script)
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)
rng = random.Random(seed)
for _ in range(20):
    short = rng.uniform(40, 400)
    same = [short, short * rng.uniform(1, 2.99), short * rng.uniform(1, 2.99), 0.0]
    rng.shuffle(same)
    moved = same + [short * rng.uniform(3.01, 8)]
    rng.shuffle(moved)
    assert ab.one_placement(same) and not ab.one_placement(moved), (same, moved)
    rounds = [{"tok": rng.uniform(0.5, 2), "round_trips_ns": rng.choice([same, moved])} for _ in range(5)]
    kept = ab.rounds_to_weigh(rounds)
    want = [r for r in rounds if r["round_trips_ns"] is same] or rounds
    assert kept == want, (kept, want)
assert ab.one_placement([]) and ab.rounds_to_weigh([]) == []

res = run("--a", apart, "--b", apart, "--rounds", "1", "--ratio", "ffn_sideways/ffn_down")
assert res.returncode == 1 and "no column ffn_sideways_ms_per_token" in res.stdout, res.stdout
res = run("--a", apart, "--b", apart, "--rounds", "1", "--ratio", "ffn_up_gate/ffn_down")
assert res.returncode == 1 and "did not all run" in res.stdout, res.stdout
res = run("--a", apart, "--b", "--plan q8_0=q8_0.cpu.no_such_kernel", "--rounds", "1")
assert res.returncode == 1 and "round 1 B failed" in res.stdout and "no_such_kernel" in res.stdout, res.stdout
res = run("--a", apart, "--b", apart, "--b-qmvlab", os.path.join(work, "no-such-qmvlab"))
assert res.returncode == 2 and "--b-qmvlab" in res.stdout and "is not an executable" in res.stdout, res.stdout
res = run("--a", apart, "--b", apart, "--ratio", "ffn_down")
assert res.returncode == 2 and "is not NUM/DEN" in res.stdout, res.stdout
print(f"seed {seed}: A B B A rows and ratios as expected; bad ratios and a failing variant refused")
