#!/usr/bin/env python3
"""scripts/plot.py draws a bench CSV written by qmvlab, and refuses other CSVs clearly."""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--qmvlab", required=True)
ap.add_argument("--plot", required=True)
args = ap.parse_args()

with tempfile.TemporaryDirectory() as tmp:
    bench = Path(tmp) / "bench.csv"
    subprocess.run([args.qmvlab, "bench", "--kernels", "q4_K.cpu.scalar*", "--shapes", "4x256,8x512",
                    "--threads", "1", "--warm", "--reps", "1", "--min-time", "0.01", "--peak-reps", "1",
                    "--out", str(bench)], check=True, stdout=subprocess.DEVNULL)
    png = Path(tmp) / "bench.png"
    subprocess.run([sys.executable, args.plot, str(bench), "-o", str(png)], check=True)
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "no PNG written"

    other = Path(tmp) / "other.csv"
    other.write_text("a,b\n1,2\n")
    r = subprocess.run([sys.executable, args.plot, str(other)], capture_output=True, text=True)
    assert r.returncode != 0 and "not a qmvlab bench CSV" in r.stderr, r.stderr
print("plot_test: 2 passed, 0 failed")
