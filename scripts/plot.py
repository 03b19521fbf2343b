#!/usr/bin/env python3
"""Plots qmvlab results CSVs (bench CSVs, or sweep CSVs with the bench columns; rows
whose `status` is not ok are left out).

One results CSV, --kind picks the plot (PNGs go beside the CSV unless -o is given):
  bench        GB/s of every kernel and shape against the measured read bandwidth
               (the roofline of a matvec, which reads every weight once)   -> <csv>.png
  leaderboard  share of the measured peak per kernel (rows, best first) and shape
               (columns), the best thread count per cell                  -> <csv>-leaderboard.png
  roofline     GB/s against bytes moved per call, with the measured peak per thread
               count as the roof; with --windows results/<gpu>/peak.csv also the GPU's
               ceiling of one launch per matrix (`qmvlab peak --gpu-windows`: its
               cuda-read-window rows, launched and from a graph)          -> <csv>-roofline.png
  accuracy     end-to-end NMSE (log) against % of peak, one point per kernel and
               shape; needs check columns in the CSV (a sweep's nmse_e2e_gaussian/outliers, or check_nmse_e2e) or --check
               results/<machine>/check.csv (joined on kernel, rows, cols; the worst
               NMSE over its activations)                                 -> <csv>-accuracy.png
  batch        batch kernels (a bench with --n): time per call against the number of
               activation vectors n, one panel per weight type and shape, each kernel
               with its compute line (n times its cost per vector, from its two largest
               n) and the memory roof (the weights read once at the measured peak); the
               crossover n, where the two lines meet, marked per kernel; --crossover CSV
               also writes them, with each n's time over the one-vector time and the
               first n more than 1.3 times slower than one vector
                                                                          -> <csv>-batch.png
  all          every one of the above that the data allows

A decode plan sweep (scripts/plan_sweep.py's CSV), --plans: tokens/s per plan (with
and without CUDA graphs) beside the logits' worst NMSE against the f32 reference
                                                                          -> <csv>.png

Several results CSVs from different machines, --compare: grouped bars per kernel and
shape found in at least two of them, one colour per machine (best thread count).

    .venv/bin/python scripts/plot.py results/<machine>/bench.csv [--kind all] [--check results/<machine>/check.csv]
    .venv/bin/python scripts/plot.py results/a/bench.csv results/b/bench.csv --compare -o compare.png
"""
import argparse
import csv
import math
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_names import current_kernel_name  # noqa: E402
from machines import canonical_machine  # noqa: E402

BENCH_COLUMNS = {"kernel", "rows", "cols", "threads", "gbps_median", "peak_gbps", "cache"}
KINDS = ("bench", "leaderboard", "roofline", "accuracy", "batch")


def fail(message):
    sys.exit(f"plot.py: {message}")


def number(row, column, path, line):
    try:
        return float(row[column])
    except (TypeError, ValueError):
        fail(f"{path}: line {line}: column {column}: {row[column]!r} is not a number")


def load(path, need=BENCH_COLUMNS):
    """Rows of a results CSV with numbers parsed; only status-ok rows of a sweep CSV."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = set(reader.fieldnames or [])
            raw = list(reader)
    except OSError as e:
        fail(f"{path}: cannot read: {e.strerror}")
    except (UnicodeDecodeError, csv.Error) as e:
        fail(f"{path}: not a CSV: {e}")
    if not need <= header:
        fail(f"{path} is not a qmvlab bench CSV (needs columns {sorted(need)}; missing {sorted(need - header)})")
    rows = []
    for line, r in enumerate(raw, start=2):
        if "status" in r and r["status"] != "ok":
            continue
        # A row timed before its kernel was renamed is the kernel's under its name now.
        r["kernel"] = current_kernel_name(r["kernel"])
        for c in ("rows", "cols", "threads"):
            r[c] = int(number(r, c, path, line))
        # Files from before batch kernels have no n: one vector.
        r["n"] = int(number(r, "n", path, line)) if r.get("n") not in (None, "") else 1
        for c in ("gbps_median", "peak_gbps", "peak_pct", "bytes_per_call", "check_nmse_e2e", "nmse_e2e_gaussian",
                  "nmse_e2e_outliers"):
            if r.get(c) not in (None, ""):
                r[c] = number(r, c, path, line)
        # A sweep CSV has the end-to-end NMSE per activation case: the worst counts.
        cases = [r[c] for c in ("nmse_e2e_gaussian", "nmse_e2e_outliers") if isinstance(r.get(c), float)]
        if cases and not isinstance(r.get("check_nmse_e2e"), float):
            r["check_nmse_e2e"] = max(cases)
        if "peak_pct" not in header or r.get("peak_pct") in (None, ""):
            r["peak_pct"] = 100 * r["gbps_median"] / r["peak_gbps"] if r["peak_gbps"] > 0 else float("nan")
        rows.append(r)
    if not rows:
        fail(f"{path}: no rows to plot" + (" with status ok" if "status" in header else ""))
    return rows


def shape(r):
    return (r["rows"], r["cols"])


def shape_text(s):
    return f"{s[0]}x{s[1]}"


def machine_of(rows, path):
    """The machine by the name it has now, whatever name its rows were written under."""
    return canonical_machine(rows[0].get("machine") or Path(path).parent.name)


def on_gpu(rows):
    return all(r.get("backend") == "cuda" for r in rows)


def where(rows):
    """The title's machine: the GPU for CUDA rows (the host's name is its CPU's)."""
    if on_gpu(rows) and rows[0].get("gpu_name"):
        return rows[0]["gpu_name"]
    return canonical_machine(rows[0].get("machine", ""))


def threads_text(rows, t):
    return "GPU" if on_gpu(rows) else f"{t} thread{'s' if t > 1 else ''}"


def plot_bench(rows, out):
    threads = sorted({r["threads"] for r in rows})
    shapes = sorted({shape(r) for r in rows})
    kernels = sorted({r["kernel"] for r in rows})
    fig, axes = plt.subplots(len(threads), 1, figsize=(min(22, max(8, 0.55 * len(kernels) + 2)), 4.5 * len(threads)),
                             squeeze=False)
    width = 0.8 / len(shapes)
    for ax, t in zip(axes[:, 0], threads):
        gbps = defaultdict(float)
        peak = 0.0
        for r in rows:
            if r["threads"] != t:
                continue
            key = (r["kernel"], shape(r))
            gbps[key] = max(gbps[key], r["gbps_median"])
            peak = max(peak, r["peak_gbps"])
        for i, s in enumerate(shapes):
            xs = [k + (i - (len(shapes) - 1) / 2) * width for k in range(len(kernels))]
            ax.bar(xs, [gbps[(k, s)] for k in kernels], width, label=shape_text(s))
        if peak > 0:
            ax.axhline(peak, color="black", linestyle="--", linewidth=1)
            ax.text(len(kernels) - 0.5, peak, f" measured read peak {peak:.1f} GB/s", va="bottom", ha="right", fontsize=8)
            right = ax.secondary_yaxis("right", functions=(lambda g, p=peak: 100 * g / p, lambda q, p=peak: q * p / 100))
            right.set_ylabel("% of peak")
        ax.set_xticks(range(len(kernels)))
        ax.set_xticklabels(kernels, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("GB/s (median)")
        ax.set_title(f"{threads_text(rows, t)}, {rows[0]['cache']} cache, {where(rows)}")
        ax.legend(fontsize=7, title="shape", title_fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    save(fig, out)


def best_by(rows, key, value="peak_pct"):
    """The row with the highest `value` per key(row)."""
    best = {}
    for r in rows:
        k = key(r)
        if k not in best or r[value] > best[k][value]:
            best[k] = r
    return best


def leaderboard(rows):
    """Kernels best first (by mean % of peak over the shapes each was measured on), the
    shapes, each kernel's score and the best row per (kernel, shape)."""
    best = best_by(rows, lambda r: (r["kernel"], shape(r)))
    shapes = sorted({s for _, s in best})
    kernels = sorted({k for k, _ in best})
    score = {k: sum(best[(k, s)]["peak_pct"] for s in shapes if (k, s) in best) /
             sum(1 for s in shapes if (k, s) in best) for k in kernels}
    kernels.sort(key=lambda k: -score[k])
    return kernels, shapes, score, best


def plot_leaderboard(rows, out):
    kernels, shapes, score, best = leaderboard(rows)
    grid = [[best[(k, s)]["peak_pct"] if (k, s) in best else math.nan for s in shapes] for k in kernels]
    fig, ax = plt.subplots(figsize=(2.2 + 1.4 * len(shapes) + 0.05 * max(len(k) for k in kernels),
                                    1.2 + 0.32 * len(kernels)))
    im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=max(100, max(score.values())))
    gpu = on_gpu(rows)  # a GPU row has no thread count to show
    for i, k in enumerate(kernels):
        for j, s in enumerate(shapes):
            if (k, s) in best:
                r = best[(k, s)]
                v = r["peak_pct"]
                ax.text(j, i, f"{v:.0f}%" if gpu else f"{v:.0f}% ({r['threads']}t)", ha="center", va="center",
                        fontsize=7, color="white" if v < 60 else "black")
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([shape_text(s) for s in shapes], fontsize=8)
    ax.set_yticks(range(len(kernels)))
    ax.set_yticklabels([f"{k}  ({score[k]:.0f}%)" for k in kernels], fontsize=7)
    ax.set_xlabel("shape (rows x cols)")
    ax.set_title(f"Share of measured read peak, best thread count per cell; {where(rows)}, "
                 f"{rows[0]['cache']} cache\nkernels best first (mean over shapes in brackets)", fontsize=9)
    fig.colorbar(im, ax=ax, label="% of measured peak", fraction=0.04)
    save(fig, out)


WINDOW_DEVICES = {"cuda-read-window": "one read per launch, launched", "cuda-read-window-graph": "one read per launch, from a graph"}


def load_windows(path):
    """{label: [(MiB, GB/s median)]} from a peak CSV's window-read rows."""
    if not Path(path).is_file():
        fail(f"{path}: no such file")
    curves = defaultdict(list)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"device", "buffer_bytes", "gbps_median"} - set(reader.fieldnames or [])
        if missing:
            fail(f"{path}: not a peak CSV with GPU rows (missing {', '.join(sorted(missing))})")
        for line, r in enumerate(reader, start=2):
            if r["device"] in WINDOW_DEVICES:
                curves[WINDOW_DEVICES[r["device"]]].append(
                    (number(r, "buffer_bytes", path, line) / 2**20, number(r, "gbps_median", path, line)))
    if not curves:
        fail(f"{path}: no cuda-read-window rows (qmvlab peak --gpu-windows writes them)")
    return {k: sorted(v) for k, v in curves.items()}


def plot_roofline(rows, out, windows=None):
    if any("bytes_per_call" not in r or r["bytes_per_call"] == "" for r in rows):
        fail("roofline needs the bytes_per_call column")
    threads = sorted({r["threads"] for r in rows})
    kernels = sorted({r["kernel"] for r in rows})
    cmap = plt.get_cmap("tab20")
    markers = "o^sDv<>pX*h"
    fig, axes = plt.subplots(1, len(threads), figsize=(7 * len(threads) + 3, 5.5), squeeze=False, sharey=True)
    for ax, t in zip(axes[0], threads):
        sub = [r for r in rows if r["threads"] == t]
        for i, k in enumerate(kernels):
            pts = sorted((r["bytes_per_call"], r["gbps_median"]) for r in sub if r["kernel"] == k)
            if pts:
                ax.plot([p[0] / 2**20 for p in pts], [p[1] for p in pts], marker=markers[i // 20 % len(markers)],
                        color=cmap(i % 20), linewidth=0.8, markersize=5, label=k)
        peak = max(r["peak_gbps"] for r in sub)
        ax.axhline(peak, color="black", linestyle="--", linewidth=1.2)
        ax.text(0.01, peak, f"measured read peak {peak:.1f} GB/s", transform=ax.get_yaxis_transform(),
                va="bottom", fontsize=8)
        for (label, pts), style in zip(sorted((windows or {}).items()), ("-", ":")):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color="black", linestyle=style, linewidth=1.6,
                    marker="x", markersize=6, label=label)
        ax.set_xscale("log")
        ax.set_xlabel("MiB moved per call (weights + activations + output)")
        ax.set_title(f"{threads_text(rows, t)}, {rows[0]['cache']} cache, {where(rows)}")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("GB/s (median)")
    axes[0][-1].legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5), ncol=1 + len(kernels) // 30)
    save(fig, out)


def accuracy_points(rows, check_path):
    """(kernel, shape) -> (best % of peak, worst NMSE e2e, passed) from check columns or a check CSV."""
    speed = best_by(rows, lambda r: (r["kernel"], shape(r)))
    nmse, passed = {}, {}
    if check_path:
        if not Path(check_path).is_file():
            fail(f"{check_path}: no such file")
        with open(check_path, newline="") as f:
            reader = csv.DictReader(f)
            need = {"kernel", "rows", "cols", "nmse_e2e", "passed"}
            if not need <= set(reader.fieldnames or []):
                fail(f"{check_path} is not a qmvlab check CSV (needs columns {sorted(need)})")
            for line, c in enumerate(reader, start=2):
                if c.get("activation") == "skipped":  # not checked: nothing to plot
                    continue
                k = (current_kernel_name(c["kernel"]),
                     (int(number(c, "rows", check_path, line)), int(number(c, "cols", check_path, line))))
                if k in speed:
                    nmse[k] = max(nmse.get(k, 0.0), number(c, "nmse_e2e", check_path, line))
                    passed[k] = passed.get(k, True) and c["passed"] in ("1", "true", "True")
    else:
        for r in rows:
            if isinstance(r.get("check_nmse_e2e"), float):
                k = (r["kernel"], shape(r))
                nmse[k] = max(nmse.get(k, 0.0), r["check_nmse_e2e"])
                passed[k] = passed.get(k, True) and r.get("check_passed", "1") in ("1", "true", "True", "")
    return {k: (speed[k]["peak_pct"], nmse[k], passed[k]) for k in nmse}


def plot_accuracy(rows, out, check_path):
    points = accuracy_points(rows, check_path)
    if not points:
        fail("accuracy needs check results: a CSV with check_nmse_e2e columns, or --check results/<machine>/check.csv "
             "with rows for the same kernels and shapes")
    kernels = sorted({k for k, _ in points})
    positive = [v[1] for v in points.values() if v[1] > 0]
    floor = min(positive) / 10 if positive else 1e-30
    cmap = plt.get_cmap("tab20")
    markers = "o^sDv<>pX*h"
    fig, ax = plt.subplots(figsize=(11, 6.5))
    for i, k in enumerate(kernels):
        pts = [(v[0], max(v[1], floor), v[2]) for (kk, _), v in points.items() if kk == k]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=cmap(i % 20), marker=markers[i // 20 % len(markers)],
                   s=28, label=k, edgecolors=["red" if not p[2] else "none" for p in pts])
    ax.set_yscale("log")
    ax.set_xlabel("% of measured read peak (best thread count)")
    ax.set_ylabel("NMSE end-to-end (worst activation set; lower is better)")
    failed = sum(1 for v in points.values() if not v[2])
    ax.set_title(f"Accuracy beside speed, one point per kernel and shape; {where(rows)}"
                 + (f"; {failed} failed checks circled red" if failed else ""), fontsize=9)
    if any(v[1] <= 0 for v in points.values()):
        ax.axhline(floor, color="gray", linestyle=":", linewidth=1)
        ax.text(0.01, floor, "exact (NMSE 0)", transform=ax.get_yaxis_transform(), va="bottom", fontsize=7)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5), ncol=1 + len(kernels) // 30)
    save(fig, out)


def plot_compare(paths, out, metric):
    files = [(p, load(p)) for p in paths]
    names = [machine_of(rows, p) for p, rows in files]
    if len(set(names)) < len(names):  # the same machine twice: tell the files apart
        names = [f"{n} ({Path(p).name})" for n, (p, _) in zip(names, files)]
    best = [best_by(rows, lambda r: (r["kernel"], shape(r)), value="gbps_median") for _, rows in files]
    keys = sorted({k for b in best for k in b}, key=lambda k: (k[0], k[1]))
    keys = [k for k in keys if sum(k in b for b in best) >= 2]
    if not keys:
        fail("--compare: no kernel and shape is in two or more of the CSVs")
    label = {"gbps": "GB/s (median)", "peak_pct": "% of each machine's measured peak"}[metric]
    value = "gbps_median" if metric == "gbps" else "peak_pct"
    fig, ax = plt.subplots(figsize=(min(40, max(8, 0.45 * len(keys) * len(files) + 2)), 5.5))
    width = 0.8 / len(files)
    for i, (name, b) in enumerate(zip(names, best)):
        xs = [x + (i - (len(files) - 1) / 2) * width for x in range(len(keys))]
        ax.bar(xs, [b[k][value] if k in b else 0 for k in keys], width, label=name)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"{k} {shape_text(s)}" for k, s in keys], rotation=40, ha="right", fontsize=7)
    ax.set_ylabel(label)
    ax.set_title("The same kernels on several machines (best thread count; missing bar: not measured there)",
                 fontsize=9)
    ax.legend(fontsize=8, title="machine")
    ax.grid(axis="y", alpha=0.3)
    save(fig, out)


def plot_plans(path, out):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    need = {"plan", "cuda_graph", "decode_tok_s", "logits_nmse_max"}
    if not rows or not need <= set(rows[0]):
        fail(f"{path}: not a plan sweep CSV (needs columns {', '.join(sorted(need))})")
    plans = list(dict.fromkeys(r["plan"] for r in rows))
    speed = {(r["plan"], r["cuda_graph"]): float(r["decode_tok_s"]) for r in rows}
    nmse = {r["plan"]: float(r["logits_nmse_max"]) for r in rows}
    graphs = sorted({r["cuda_graph"] for r in rows}, reverse=True)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(max(9, 1.1 * len(plans) + 4), 5),
                                  gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(graphs)
    for i, g in enumerate(graphs):
        xs = [x + (i - (len(graphs) - 1) / 2) * width for x in range(len(plans))]
        ax.bar(xs, [speed.get((p, g), 0) for p in plans], width,
               label="CUDA graph" if g == "1" else ("launch by launch" if rows[0].get("device") == "cuda" else "CPU"))
    labels = [p.replace(",ffn_up_gate=none", "") for p in plans]
    for a in (ax, ax2):
        a.set_xticks(range(len(plans)))
        a.set_xticklabels(labels, rotation=40, ha="right", fontsize=7)
        a.grid(axis="y", alpha=0.3, which="both")
    ax.set_ylabel("decode tokens/s")
    ax.legend(fontsize=8)
    ax.set_title(f"{rows[0].get('model', '')}: decode speed per plan", fontsize=9)
    ax2.bar(range(len(plans)), [max(nmse[p], 1e-16) for p in plans], color="tab:red")
    ax2.set_yscale("log")
    ax2.set_ylabel("logits NMSE vs f32 reference (worst position)")
    ax2.set_title("accuracy", fontsize=9)
    save(fig, out)


# A batch call counts as slower than one vector's from 30% more time on.
SLOWER_THAN_ONE = 1.3


def batch_crossovers(rows):
    """Per (kernel, weight type, shape, threads) of kernels timed at several n: the time
    per call at each n, the memory roof (the weight bytes at the measured peak), the
    cost per vector (the slope between the two largest n, both past the roof) and the
    crossover n where n times that cost reaches the roof (inf when the time does not
    grow with n; when the second largest n is still under the roof the slope, and the
    crossover, read low). Beside the model, measured: each n's time over the one-vector
    time, and the first n more than SLOWER_THAN_ONE times slower."""
    groups = defaultdict(dict)
    for r in rows:
        if "time_median_us" not in r or r["time_median_us"] in (None, ""):
            fail("batch needs the time_median_us column")
        key = (r["kernel"], r.get("weight_type", r["kernel"].split(".")[0]), shape(r), r["threads"])
        groups[key][r["n"]] = r
    out = []
    for (kernel, wtype, s, t), by_n in sorted(groups.items()):
        ns = sorted(by_n)
        if len(ns) < 2:
            continue
        times = {n: float(by_n[n]["time_median_us"]) for n in ns}
        a, b = ns[-2], ns[-1]
        if any(by_n[n].get("bytes_per_call") in (None, "") for n in (a, b)):
            fail("batch needs the bytes_per_call column")
        # bytes(n) = weights + n * (activation + output): the weights are what n = 0 would move.
        bytes_a, bytes_b = float(by_n[a]["bytes_per_call"]), float(by_n[b]["bytes_per_call"])
        weight_bytes = bytes_a - a * (bytes_b - bytes_a) / (b - a)
        peak = float(by_n[ns[0]]["peak_gbps"])
        memory_us = weight_bytes / peak / 1e3 if peak > 0 else float("nan")
        per_vector_us = (times[b] - times[a]) / (b - a)
        crossover = memory_us / per_vector_us if per_vector_us > 0 else math.inf
        base = times.get(1)
        over_one = {n: times[n] / base for n in ns} if base else {}
        # Measured, without the model: the first n whose call takes 30% more than one vector's.
        slower = [n for n in ns if over_one.get(n, 0) > SLOWER_THAN_ONE]
        out.append({"kernel": kernel, "weight_type": wtype, "rows": s[0], "cols": s[1], "threads": t, "ns": ns,
                    "times_us": times, "memory_us": memory_us, "per_vector_us": per_vector_us,
                    "crossover_n": crossover, "over_one": over_one, "first_slower_n": slower[0] if slower else None})
    if not out:
        fail("no kernel was timed at two or more n (qmvlab bench --n 1,2,4,8 times batch kernels at several)")
    return out


def write_crossovers(crossovers, path):
    ns = sorted({n for c in crossovers for n in c["ns"]})
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "weight_type", "rows", "cols", "threads", "memory_roof_us", "per_vector_us", "crossover_n",
                    "first_n_over_1.3x"] + [f"time_n{n}_over_n1" for n in ns])
        for c in crossovers:
            w.writerow([c["kernel"], c["weight_type"], c["rows"], c["cols"], c["threads"], f"{c['memory_us']:.3f}",
                        f"{c['per_vector_us']:.3f}", f"{c['crossover_n']:.2f}", c["first_slower_n"] or ""]
                       + [f"{c['over_one'][n]:.3f}" if n in c["over_one"] else "" for n in ns])
    print(f"wrote {path}")


def plot_batch(rows, out, crossover_csv=None):
    crossovers = batch_crossovers(rows)
    if crossover_csv:
        write_crossovers(crossovers, crossover_csv)
    panels = sorted({(c["weight_type"], (c["rows"], c["cols"]), c["threads"]) for c in crossovers})
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.5 * cols + 2, 4.5 * nrows), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, panel in zip(axes.flat, panels):
        sub = [c for c in crossovers if (c["weight_type"], (c["rows"], c["cols"]), c["threads"]) == panel]
        n_max = max(max(c["ns"]) for c in sub)
        for i, c in enumerate(sub):
            colour = cmap(i % 10)
            ax.plot(c["ns"], [c["times_us"][n] for n in c["ns"]], marker="o", color=colour, label=c["kernel"])
            line = [1, n_max]
            ax.plot(line, [n * c["per_vector_us"] for n in line], linestyle=":", color=colour, linewidth=1)
            if 1 <= c["crossover_n"] <= n_max:
                ax.axvline(c["crossover_n"], color=colour, linestyle="--", linewidth=0.8)
                ax.text(c["crossover_n"], c["memory_us"], f" n*={c['crossover_n']:.1f}", color=colour, fontsize=7,
                        va="bottom")
        roof = min(c["memory_us"] for c in sub)
        ax.axhline(roof, color="black", linestyle="--", linewidth=1.2)
        ax.text(0.01, roof, f"memory roof: the weights at the measured peak ({roof:.0f} us)",
                transform=ax.get_yaxis_transform(), va="bottom", fontsize=7)
        wtype, s, t = panel
        ax.set_title(f"{wtype} {shape_text(s)}, {threads_text(rows, t)}, {where(rows)}", fontsize=9)
        ax.set_xlabel("activation vectors per call (n)")
        ax.set_ylabel("time per call (us, median)")
        ax.set_xticks(sorted({n for c in sub for n in c["ns"]}))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    save(fig, out)


def save(fig, out):
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")


def default_out(csv_path, kind):
    p = Path(csv_path)
    return p.with_suffix(".png") if kind == "bench" else p.with_name(f"{p.stem}-{kind}.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="results CSV(s) written by `qmvlab bench --out` or `qmvlab sweep`")
    ap.add_argument("--kind", choices=KINDS + ("all",), default="bench", help="which plot of one CSV (default bench)")
    ap.add_argument("--check", help="check CSV for --kind accuracy (joined on kernel, rows, cols)")
    ap.add_argument("--windows", help="peak CSV with GPU window reads for --kind roofline (qmvlab peak --gpu-windows)")
    ap.add_argument("--compare", action="store_true", help="several CSVs, one per machine: grouped bars")
    ap.add_argument("--plans", action="store_true", help="a decode plan sweep CSV (scripts/plan_sweep.py)")
    ap.add_argument("--metric", choices=("gbps", "peak_pct"), default="gbps", help="bar height for --compare")
    ap.add_argument("--crossover", help="for --kind batch: also write each kernel's crossover n to this CSV")
    ap.add_argument("-o", "--out", help="PNG to write (default: beside the CSV); not with --kind all")
    args = ap.parse_args()

    if args.plans:
        if len(args.csv) != 1:
            fail("--plans takes one CSV")
        plot_plans(args.csv[0], Path(args.out) if args.out else default_out(args.csv[0], "bench"))
        return
    if args.compare:
        if len(args.csv) < 2:
            fail("--compare needs two or more CSVs")
        plot_compare(args.csv, Path(args.out) if args.out else default_out(args.csv[0], "compare"), args.metric)
        return
    if len(args.csv) > 1:
        fail("several CSVs need --compare")
    if args.kind == "all" and args.out:
        fail("-o names one PNG; --kind all writes several beside the CSV")
    rows = load(args.csv[0])
    windows = load_windows(args.windows) if args.windows else None
    kinds = KINDS if args.kind == "all" else (args.kind,)
    for kind in kinds:
        out = Path(args.out) if args.out else default_out(args.csv[0], kind)
        if kind == "bench":
            plot_bench(rows, out)
        elif kind == "leaderboard":
            plot_leaderboard(rows, out)
        elif kind == "roofline":
            plot_roofline(rows, out, windows)
        elif kind == "batch":
            if args.kind == "all" and len({r["n"] for r in rows}) < 2:
                print("no kernel timed at several n: batch plot skipped")
                continue
            plot_batch(rows, out, args.crossover)
        elif kind == "accuracy":
            has_check = args.check or any(isinstance(r.get("check_nmse_e2e"), float) for r in rows)
            if args.kind == "all" and not has_check:
                print("no check columns and no --check: accuracy plot skipped")
                continue
            plot_accuracy(rows, out, args.check)


if __name__ == "__main__":
    main()
