#!/usr/bin/env python3
"""Plots a qmvlab bench CSV: GB/s of every kernel and shape against the measured
read bandwidth (the roofline of a matvec, which reads every weight once).

    .venv/bin/python scripts/plot.py results/<machine>/bench.csv [-o out.png]
"""
import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    need = {"kernel", "rows", "cols", "threads", "gbps_median", "peak_gbps", "cache"}
    if not rows or not need <= rows[0].keys():
        sys.exit(f"plot.py: {path} is not a qmvlab bench CSV (needs columns {sorted(need)})")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="bench CSV written by `qmvlab bench --out`")
    ap.add_argument("-o", "--out", help="PNG to write (default: beside the CSV, .png)")
    args = ap.parse_args()
    rows = load(args.csv)
    out = Path(args.out) if args.out else Path(args.csv).with_suffix(".png")

    threads = sorted({int(r["threads"]) for r in rows})
    shapes = sorted({(int(r["rows"]), int(r["cols"])) for r in rows})
    kernels = sorted({r["kernel"] for r in rows})
    fig, axes = plt.subplots(len(threads), 1, figsize=(min(22, max(8, 0.55 * len(kernels) + 2)), 4.5 * len(threads)),
                             squeeze=False)
    width = 0.8 / len(shapes)
    for ax, t in zip(axes[:, 0], threads):
        gbps = defaultdict(float)
        peak = 0.0
        for r in rows:
            if int(r["threads"]) != t:
                continue
            gbps[(r["kernel"], (int(r["rows"]), int(r["cols"])))] = float(r["gbps_median"])
            peak = max(peak, float(r["peak_gbps"]))
        for i, shape in enumerate(shapes):
            xs = [k + (i - (len(shapes) - 1) / 2) * width for k in range(len(kernels))]
            ax.bar(xs, [gbps[(k, shape)] for k in kernels], width, label=f"{shape[0]}x{shape[1]}")
        if peak > 0:
            ax.axhline(peak, color="black", linestyle="--", linewidth=1)
            ax.text(len(kernels) - 0.5, peak, f" measured read peak {peak:.1f} GB/s", va="bottom", ha="right", fontsize=8)
            right = ax.secondary_yaxis("right", functions=(lambda g, p=peak: 100 * g / p, lambda q, p=peak: q * p / 100))
            right.set_ylabel("% of peak")
        ax.set_xticks(range(len(kernels)))
        ax.set_xticklabels(kernels, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("GB/s (median)")
        ax.set_title(f"{t} thread{'s' if t > 1 else ''}, {rows[0]['cache']} cache, {rows[0].get('machine', '')}")
        ax.legend(fontsize=7, title="shape", title_fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
