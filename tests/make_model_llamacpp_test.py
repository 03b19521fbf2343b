#!/usr/bin/env python3
"""Every model `qmvlab make-model` writes loads and runs in llama.cpp: for each
architecture and weight mix, a toy-sized model (fresh seed) goes through the pinned
`llama-bench -p 0 -n 4 -t 1`, which must exit 0 and report one token-generation row
with a positive speed. Exit 77 (skipped) when the pinned build is not there.
"""
import argparse
import csv
import io
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def listed(qmvlab, option, what):
    """The names make-model accepts for an option, from its error on a name it does not."""
    given = {"--preset": "toy", "--mix": "f32", option: "?"}
    cmd = [qmvlab, "make-model", "--dry-run", "--out", "unused.gguf"] + [x for kv in given.items() for x in kv]
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(rf"\({what}: ([^)]*)\)", out.stderr)
    return [n.strip() for n in m.group(1).split(",")] if m else []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmvlab", required=True)
    ap.add_argument("--llama-bench", required=True)
    args = ap.parse_args()
    if not Path(args.llama_bench).is_file():
        print(f"peer build missing ({args.llama_bench}; scripts/install-peers.sh builds it): skipped")
        return 77
    archs = listed(args.qmvlab, "--arch", "architectures")
    all_mixes = listed(args.qmvlab, "--mix", "mixes")
    if "llama" not in archs or "q4_K_m" not in all_mixes:
        print(f"FAIL: cannot read make-model's architectures and mixes from its errors (got {archs}, {all_mixes})")
        return 1
    seed = random.SystemRandom().randrange(1, 1 << 31)
    print(f"seed {seed}; architectures {', '.join(archs)}; mixes {', '.join(all_mixes)}")
    failures = checks = 0
    with tempfile.TemporaryDirectory() as tmp:
        for arch in archs:
            for mix in all_mixes:
                checks += 1
                model = Path(tmp) / f"toy-{arch}-{mix}.gguf"
                made = subprocess.run([args.qmvlab, "make-model", "--preset", "toy", "--arch", arch, "--mix", mix,
                                       "--seed", str(seed), "--out", str(model)], capture_output=True, text=True)
                if made.returncode != 0:
                    print(f"FAIL: make-model {arch} {mix}: {made.stderr.strip()}")
                    failures += 1
                    continue
                ran = subprocess.run([args.llama_bench, "-m", str(model), "-p", "0", "-n", "4", "-t", "1", "-r", "1",
                                      "-o", "csv"], capture_output=True, text=True)
                rows = list(csv.DictReader(io.StringIO(ran.stdout))) if ran.returncode == 0 else []
                tg = [r for r in rows if r.get("n_prompt") == "0" and r.get("n_gen") == "4"]
                if ran.returncode != 0 or len(tg) != 1 or not float(tg[0].get("avg_ts") or 0) > 0:
                    tail = " | ".join(ran.stderr.strip().splitlines()[-3:])
                    print(f"FAIL: llama-bench on make-model {arch} {mix} (exit {ran.returncode}, "
                          f"{len(tg)} tg rows): {tail}")
                    failures += 1
                else:
                    print(f"ok: {arch} {mix}: {tg[0].get('model_type')}, {float(tg[0]['avg_ts']):.0f} tok/s")
                model.unlink()
    print(f"make_model_llamacpp: {checks - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
