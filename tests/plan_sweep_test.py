"""scripts/plan_sweep.py on the CPU with a fresh toy model: an f32-activation plan's
logits agree with the f32 reference to float rounding, an int8 plan's do not, and each
plan gets one row with its tokens/s."""
import argparse
import csv
import os
import random
import re
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--qmvlab", required=True)
ap.add_argument("--script", required=True)
args = ap.parse_args()

work = tempfile.mkdtemp(prefix="plan-sweep-test-")
model = os.path.join(work, "toy.gguf")
seed = random.randrange(1, 2**31)
subprocess.run([args.qmvlab, "make-model", "--preset", "toy", "--mix", "q4_K_m", "--seed", str(seed), "--out", model],
               check=True, stdout=subprocess.DEVNULL)
f32 = "q4_K={k}.scalar,q6_K={k6}.scalar,ffn_up_gate=none".format(k="q4_K.cpu", k6="q6_K.cpu")
reference = "q4_K=q4_K.cpu.avx2_f32,q6_K=q6_K.cpu.avx2_f32,ffn_up_gate=none"
int8 = "q4_K=q4_K.cpu.scalar_q8k,q6_K=q6_K.cpu.scalar_q8k,ffn_up_gate=none"
out = os.path.join(work, "plans.csv")
res = subprocess.run([sys.executable, args.script, "--qmvlab", args.qmvlab, "--model", model, "--device", "cpu",
                      "--plans", f"{f32};{int8}", "--reference-plan", reference, "--prompt-tokens", "1,7,42",
                      "-n", "6", "--logit-positions", "5", "--threads", "1", "--out", out],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
assert res.returncode == 0, res.stdout
rows = list(csv.DictReader(open(out)))
assert [r["plan"] for r in rows] == [f32, int8], rows
for r in rows:
    assert float(r["decode_tok_s"]) > 0 and r["positions"] == "5", r
f32_nmse, int8_nmse = float(rows[0]["logits_nmse_max"]), float(rows[1]["logits_nmse_max"])
print(f"seed {seed}: f32 plan NMSE {f32_nmse:.3g}, int8 plan NMSE {int8_nmse:.3g}")
assert f32_nmse < 1e-9, f32_nmse
assert 1e-7 < int8_nmse < 1e-1, int8_nmse
assert float(rows[0]["top1_agreement"]) == 1.0, rows[0]

# The plot of the sweep.
plot = os.path.join(os.path.dirname(args.script), "plot.py")
png = os.path.join(work, "plans.png")
subprocess.run([sys.executable, plot, out, "--plans", "-o", png], check=True, stdout=subprocess.DEVNULL)
assert os.path.getsize(png) > 10000, png

# A plan that fails (an unknown kernel) is named, the sweep goes on with the next and
# exits 1 at the end; the log keeps every command and its output.
broken = "q4_K=q4_K.cpu.no_such_kernel"
log = os.path.join(work, "commands.log")
out2 = os.path.join(work, "plans-with-a-broken-one.csv")
res = subprocess.run([sys.executable, args.script, "--qmvlab", args.qmvlab, "--model", model, "--device", "cpu",
                      "--plans", f"{broken};{f32}", "--reference-plan", reference, "--prompt-tokens", "1,7,42",
                      "-n", "4", "--logit-positions", "3", "--threads", "1", "--out", out2, "--log", log],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
assert "1 failed: " + broken in res.stderr, res.stderr
assert [r["plan"] for r in csv.DictReader(open(out2))] == [f32], open(out2).read()
logged = open(log).read()
assert "no_such_kernel" in logged and "(exit 2)" in logged, logged[-2000:]

# --exclude leaves out the plans naming a kernel it matches, and says so; excluding
# every plan is an error.
out3 = os.path.join(work, "plans-excluded.csv")
res = subprocess.run([sys.executable, args.script, "--qmvlab", args.qmvlab, "--model", model, "--device", "cpu",
                      "--plans", f"{f32};{int8}", "--exclude", "q6_K.cpu.scalar_q8k,q9_K.*", "--reference-plan",
                      reference, "--prompt-tokens", "1,7,42", "-n", "4", "--logit-positions", "3", "--threads", "1",
                      "--out", out3], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
assert res.returncode == 0, res.stdout
assert "left out (it names an excluded kernel): " + int8 in res.stdout, res.stdout
assert [r["plan"] for r in csv.DictReader(open(out3))] == [f32], open(out3).read()
res = subprocess.run([sys.executable, args.script, "--qmvlab", args.qmvlab, "--model", model, "--device", "cpu",
                      "--plans", int8, "--exclude", "*.cpu.*", "--reference-plan", reference, "--out", out3],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
assert res.returncode == 2 and "no plans to sweep" in res.stderr, res.stderr

# The default plan beside a fixed one: the sweep gives auto's tokens/s over the fastest
# other plan's. Auto times the toy's matvecs into a store of the test's own.
out4 = os.path.join(work, "plans-auto.csv")
env = dict(os.environ, QMV_TUNING_STORE=os.path.join(work, "tuning.csv"))
res = subprocess.run([sys.executable, args.script, "--qmvlab", args.qmvlab, "--model", model, "--device", "cpu",
                      "--plans", f"auto;{f32};{int8}", "--reference-plan", reference, "--prompt-tokens", "1,7,42",
                      "-n", "4", "--logit-positions", "3", "--threads", "1", "--out", out4],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
assert res.returncode == 0, res.stdout
speeds = {r["plan"]: float(r["decode_tok_s"]) for r in csv.DictReader(open(out4))}
assert sorted(speeds) == sorted(["auto", f32, int8]), speeds
fastest = max((f32, int8), key=speeds.get)
said = re.search(r"auto graph=0: ([0-9.]+)x the fastest other plan's tok/s \((.*)\)", res.stdout)
assert said and said.group(2) == fastest, res.stdout
# The CSV keeps tokens/s to 3 decimals; the ratio was taken before the rounding.
assert abs(float(said.group(1)) - speeds["auto"] / speeds[fastest]) < 2e-3, (said.group(0), speeds)
assert os.path.getsize(env["QMV_TUNING_STORE"]) > 0, "auto timed nothing into the test's store"

# Errors: a missing model is one line and exit 2.
bad = subprocess.run([sys.executable, args.script, "--qmvlab", args.qmvlab, "--model", model + ".missing",
                      "--reference-plan", reference, "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True)
assert bad.returncode == 2 and "no such model file" in bad.stderr, bad.stderr
print("ok")
