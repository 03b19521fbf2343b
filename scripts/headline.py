#!/usr/bin/env python3
"""The README's headline table, made from results/: one row per machine folder, its
read peak (peak.csv) and its decode against llama.cpp (decode-vs-llamacpp.csv), each
row linking the machine's REPORT.md. The table sits in README.md between the lines
`<!-- headline -->` and `<!-- /headline -->`.

  scripts/headline.py                 print the table
  scripts/headline.py --write README.md   put it into the README
  scripts/headline.py --check README.md   exit 1 when the README's table is not what
                                          results/ gives (a test runs this)

Exit status: 0 done, 1 the README's table is stale (--check), 2 bad input (a CSV
without the columns read, a README without the markers).
"""
import argparse
import csv
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- headline -->", "<!-- /headline -->"


def fail(message):
    print(f"headline: {message}", file=sys.stderr)
    sys.exit(2)


def read_csv(path, needed):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError) as e:
        fail(f"{path}: {e}")
    missing = [c for c in needed if rows and c not in rows[0]]
    if missing:
        fail(f"{path}: no column {', '.join(missing)}")
    return rows


def number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def read_peak(folder):
    """'24.6 GB/s, 2 threads' (the CPU's, at its most threads) or '3094 GB/s, GPU read'."""
    path = folder / "peak.csv"
    if not path.is_file():
        return "-", ""
    rows = read_csv(path, ["threads", "gbps_median"])
    gpu = [number(r["gbps_median"]) for r in rows if r.get("device") == "cuda-read"]
    gpu = [g for g in gpu if g]
    if gpu:
        return f"{max(gpu):.0f} GB/s, GPU read", rows[0].get("gpu", "").split(" sm_")[0]
    cpu = [(int(number(r["threads"]) or 0), number(r["gbps_median"])) for r in rows
           if r.get("device", "cpu") in ("", "cpu") and number(r["gbps_median"])]
    if not cpu:
        return "-", ""
    threads = max(t for t, _ in cpu)
    best = max(g for t, g in cpu if t == threads)
    return f"{best:.1f} GB/s, {threads} thread{'s' if threads != 1 else ''}", rows[0].get("cpu_model", "")


def short_model(row):
    name = Path(row.get("model_file") or row["model"]).stem
    for prefix in ("synthetic-",):
        name = name.removeprefix(prefix)
    return name


def read_decode(folder):
    """Per model (the last row of each model at the most threads): 'model: N.NNx', the
    row's ratio (the median of its rounds' own ratios, compare_llamacpp.py), or for a row
    without one the ratio of its two speeds."""
    path = folder / "decode-vs-llamacpp.csv"
    if not path.is_file():
        return "-"
    rows = read_csv(path, ["model", "threads", "qmvlab_tok_s", "llamacpp_tok_s"])
    last = {}
    for r in rows:
        q, l, ratio = number(r["qmvlab_tok_s"]), number(r["llamacpp_tok_s"]), number(r.get("ratio") or "")
        if ratio or (q and l):
            last[(short_model(r), r["threads"])] = ratio or q / l
    if not last:
        return "-"
    most = {}
    for (model, threads), ratio in last.items():
        t = int(number(threads) or 0)
        if model not in most or t > most[model][0]:
            most[model] = (t, ratio)
    return ", ".join(f"{model} {ratio:.2f}x" for model, (_, ratio) in sorted(most.items()))


def table(results):
    lines = ["| machine | processor | read peak | decode, qmvlab / llama.cpp tok/s (same threads, same run) |",
             "|---|---|---|---|"]
    for folder in sorted(p for p in results.iterdir() if p.is_dir()):
        if not any((folder / f).is_file() for f in ("peak.csv", "decode-vs-llamacpp.csv")):
            continue
        peak, processor = read_peak(folder)
        decode = read_decode(folder)
        page = folder / "REPORT.md"
        target = page if page.is_file() else folder
        link = target.relative_to(results.parent).as_posix()
        lines.append(f"| [{folder.name}]({link}) | {processor or '-'} | {peak} | {decode} |")
    return "\n".join(lines) + "\n"


def split_readme(path):
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"{path}: {e}")
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        fail(f"{path}: want one '{BEGIN}' line and one '{END}' line after it")
    head, rest = text.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    return head + BEGIN + "\n", body.lstrip("\n"), END + tail


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=str(ROOT / "results"), help="the results folder (default results/)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="README", help="replace the table between the markers in README")
    group.add_argument("--check", metavar="README", help="exit 1 when README's table is not the one results/ gives")
    args = ap.parse_args()
    results = Path(args.results)
    if not results.is_dir():
        fail(f"{results}: not a folder")
    made = table(results)
    if args.write:
        head, _, tail = split_readme(Path(args.write))
        tmp = Path(args.write + ".tmp")
        tmp.write_text(head + made + tail)
        tmp.replace(args.write)
        print(f"headline: wrote the table of {made.count(chr(10)) - 2} machines into {args.write}")
    elif args.check:
        _, body, _ = split_readme(Path(args.check))
        if body != made:
            print(f"headline: the table in {args.check} is stale; scripts/headline.py --write {args.check} makes it "
                  f"from {results}:\n{made}", file=sys.stderr)
            sys.exit(1)
        print(f"headline: the table in {args.check} is the one {results} gives")
    else:
        sys.stdout.write(made)


if __name__ == "__main__":
    main()
