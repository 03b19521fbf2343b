#!/usr/bin/env python3
"""scripts/outlier_routing.py on a fresh toy model: at k = 0 every int8 call is routed and
the logits are the f32 plan's (NMSE 0); at k = 1e6 nothing is routed and the logits are
the int8 plan's; the CSV has a row per k."""
import argparse
import csv
import os
import random
import subprocess
import sys
import tempfile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--qmvlab", required=True)
    p.add_argument("--script", required=True)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="outlier-routing-test-")
    model = os.path.join(tmp, "toy.gguf")
    seed = random.randint(1, 10**6)
    print(f"toy model seed {seed}")
    subprocess.run([a.qmvlab, "make-model", "--preset", "toy", "--mix", "q4_K_m", "--seed", str(seed), "--out", model],
                   check=True, capture_output=True)
    out_csv = os.path.join(tmp, "routing.csv")
    r = subprocess.run([sys.executable, a.script, "--qmvlab", a.qmvlab, "--model", model, "--f32-plan",
                        "q4_K=q4_K.cpu.scalar_f32,q6_K=q6_K.cpu.scalar_f32,ffn_up_gate=none", "--tokens",
                        ",".join(str(random.randint(0, 511)) for _ in range(12)), "--ks", "0,1000000",
                        "--decode-rounds", "1", "--decode-tokens", "3", "--out", out_csv],
                       capture_output=True, text=True)
    print(r.stdout, r.stderr)
    if r.returncode != 0:
        sys.exit("the script failed")
    rows = {row["k"]: row for row in csv.DictReader(open(out_csv))}
    failures = []
    if set(rows) != {"no routing", "0", "1000000"}:
        failures.append(f"rows {sorted(rows)}")
    # Auto's default order always finds an int8 kernel for Q4_K (scalar_q8k at worst).
    if float(rows["0"]["routed_share"]) != 1.0:
        failures.append(f"k = 0 routed {rows['0']['routed_share']}, not every call")
    # The f32 siblings auto picks read f32 like the f32 plan, but may be other kernels
    # (avx2_f32 against scalar): float rounding apart.
    if float(rows["0"]["logits_nmse_median"]) > 1e-10:
        failures.append(f"k = 0 logits NMSE {rows['0']['logits_nmse_median']} against the f32 plan")
    if float(rows["no routing"]["logits_nmse_median"]) < 1e-9:
        failures.append("the int8 plan matches the f32 plan: nothing was lost to route around")
    if float(rows["1000000"]["routed_share"]) != 0.0:
        failures.append(f"k = 1e6 routed {rows['1000000']['routed_share']}")
    if rows["1000000"]["logits_nmse_median"] != rows["no routing"]["logits_nmse_median"]:
        failures.append("k = 1e6 changed the logits")
    if failures:
        sys.exit("FAIL: " + "; ".join(failures))
    print("ok")


if __name__ == "__main__":
    main()
