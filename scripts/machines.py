#!/usr/bin/env python3
"""The same matvec shapes on every machine that has results: for each shape and weight
type, each machine's fastest kernel (median GB/s and share of the highest peak measured
on that machine at its thread count), one column per machine, as a markdown table.

Reads every results CSV with the bench columns under results/<machine>/ (bench, sweep
CSVs; rows whose status is not ok are left out), so a GPU's folder joins the table as
soon as its bench CSV is committed. Cold-cache rows only, unless --cache warm. A folder
under a machine's former name (FORMER_MACHINES) joins the column of the name it has now.

    python3 scripts/machines.py [results] [--shapes 4096x14336,14336x4096] [--cache cold]
"""
import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_names import current_kernel_name  # noqa: E402

# Names machines went by before the name told CPUs apart (harness/machine.cpp keeps the
# same table): the Zen 3 EPYC's rows say amd-epyc-2c, a name a Zen 4 EPYC also had.
FORMER_MACHINES = {
    "amd-epyc-2c": "amd-zen3-2c",
}


def canonical_machine(name):
    """A former machine name, alone or with its -isa-... suffix, as the machine is called now."""
    for former, now in FORMER_MACHINES.items():
        if name == former or name.startswith(former + "-isa-"):
            return now + name[len(former):]
    return name


NEED = {"kernel", "weight_type", "backend", "rows", "cols", "threads", "cache", "gbps_median", "peak_gbps"}


def fail(msg):
    print(f"machines.py: {msg}", file=sys.stderr)
    sys.exit(2)


def best_rows(folders, cache):
    """(weight type, rows, cols) -> the fastest ok row of any CSV in the folders (one
    machine's), and the highest peak measured there per (backend, threads): a peak
    measured while the machine was busy would flatter every row timed against it."""
    best, peaks = {}, {}
    for path in sorted(p for folder in folders for p in folder.glob("*.csv")):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or not NEED <= set(reader.fieldnames):
                continue
            for r in reader:
                if r.get("status", "ok") != "ok" or r["cache"] != cache or not r["gbps_median"]:
                    continue
                if r["peak_gbps"]:
                    pk = (r["backend"], r["threads"])
                    peaks[pk] = max(peaks.get(pk, 0.0), float(r["peak_gbps"]))
                key = (r["weight_type"], int(r["rows"]), int(r["cols"]))
                r["kernel"] = current_kernel_name(r["kernel"])  # a row from before a rename: its name now
                if key not in best or float(r["gbps_median"]) > float(best[key]["gbps_median"]):
                    best[key] = r
    return best, peaks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default="results", help="folder of results/<machine>/ folders")
    ap.add_argument("--shapes", default="4096x14336,14336x4096", help="RxC list, or 'all'")
    ap.add_argument("--cache", choices=("cold", "warm"), default="cold")
    args = ap.parse_args()
    root = Path(args.results)
    if not root.is_dir():
        fail(f"{root}: no such folder")
    folders = {}
    for d in sorted(root.iterdir()):
        if d.is_dir():
            folders.setdefault(canonical_machine(d.name), []).append(d)
    machines = {m: best_rows(ds, args.cache) for m, ds in sorted(folders.items())}
    machines = {m: b for m, b in machines.items() if b[0]}
    if not machines:
        fail(f"{root}: no machine folder has a bench or sweep CSV")
    keys = sorted({k for b, _ in machines.values() for k in b})
    if args.shapes != "all":
        try:
            wanted = {tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")}
        except ValueError:
            fail(f"--shapes: '{args.shapes}' is not a list of RxC")
        keys = [k for k in keys if (k[1], k[2]) in wanted]
        if not keys:
            fail(f"no machine has results for {args.shapes}")
    names = list(machines)
    print("| weights | shape | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for w, rows, cols in keys:
        cells = []
        for m in names:
            best, peaks = machines[m]
            r = best.get((w, rows, cols))
            if not r:
                cells.append("-")
                continue
            where = "GPU" if r["backend"] == "cuda" else f"{r['threads']}T"
            peak = peaks.get((r["backend"], r["threads"]), 0.0)
            share = f", {100 * float(r['gbps_median']) / peak:.0f}% of peak" if peak else ""
            cells.append(f"`{r['kernel']}` ({where}): {float(r['gbps_median']):.1f} GB/s{share}")
        print(f"| {w} | {rows}x{cols} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
