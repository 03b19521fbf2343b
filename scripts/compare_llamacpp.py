#!/usr/bin/env python3
"""qmvlab's decode against llama.cpp's, on the same GGUF files and thread counts.

llama.cpp is timed with the pinned `llama-bench` that scripts/install-peers.sh builds (token generation only, `-p 0 -n N -t T -r 1`), once
with its weight repacking on (`--repack 1`, what a llama.cpp user gets) and once with
it off, alternating round by round with `qmvlab decode` (-n N, --threads T,
--ignore-eos, the plan given by --plan, default auto); --rounds rounds, medians. The
ratio is the median of the rounds' own ratios: a round's two runs are seconds apart,
while the host's memory speed can move between rounds, and a ratio of two medians would
then divide a fast round's speed by a slow one's. The
roofline is qmvlab's: its measured read bandwidth over the bytes one decode step reads
(weights and KV cache), and both engines' speeds are given as a share of it. One row
per model is appended to --out (default results/<machine>/decode-vs-llamacpp.csv),
a table goes to stdout, progress to stderr.

On a GPU (--device cuda) the peer is the CUDA llama-bench that `scripts/install-peers.sh
--isa cuda` builds (every layer offloaded, -ngl 99; no repacking, a CPU feature) against
`qmvlab decode --device cuda`, and the row's machine is the GPU's results folder
(nvidia-h200). --dry-run prints the commands, round by round, and runs none.

  scripts/compare_llamacpp.py --threads 2
  scripts/compare_llamacpp.py --device cuda --model M.gguf --llama-bench PEER/bin/llama-bench --out results/<gpu>/x.csv
  scripts/compare_llamacpp.py --model models/M.gguf --threads 4 -n 128 --rounds 5 --out /tmp/x.csv

Without --model it runs the models it finds of the three the project measures:
SmolLM2-135M-Instruct Q4_1 and its Q4_K_M requant (scripts/get-model.sh) and the
synthetic TinyLlama-1.1B Q4_K_M (`qmvlab make-model --preset tinyllama-1.1b --mix
q4_K_m`). Exit status: 0 done, 1 a tool failed (its stderr's last lines are printed),
2 bad input, 3 skipped: the pinned llama-bench is not there.

llama-bench decodes from position 0 with a token each step; qmvlab decode is given the
model's BOS token as a one-token prompt, and both count only the generated tokens
(qmvlab times from the second one). Neither run depends on the tokens' values.

Greedy tokens against llama.cpp's (through llama-cpp-python) are scripts/llamacpp_tokens.py's;
`--tokens` here still runs it, with the other arguments.
"""
import argparse
import csv
import json
import math
import os
import shlex
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llamacpp_tools  # noqa: E402
from llamacpp_tools import (EXIT_FAILED, EXIT_SKIPPED, PEER_DIR, ROOT, add_shared_options, fail,  # noqa: E402
                            median, progress, run_checked, run_tool, tail)

llamacpp_tools.TOOL = "compare_llamacpp"
TOKENS_TOOL = Path(__file__).resolve().parent / "llamacpp_tokens.py"

DEFAULT_MODELS = ["models/SmolLM2-135M-Instruct.Q4_1.gguf", "models/SmolLM2-135M-Instruct.Q4_K_M.gguf",
                  "models/synthetic-tinyllama-1.1b-q4_K_m.gguf"]
TIMING_FIELDS = ["machine", "cpu_model", "qmvlab_commit", "peer", "model", "model_file", "weights", "threads",
                 "tokens", "rounds", "qmvlab_tok_s", "llamacpp_tok_s", "llamacpp_norepack_tok_s", "ratio",
                 "roofline_tok_s", "qmvlab_roofline_pct", "llamacpp_roofline_pct", "qmvlab_plan", "command"]
# llama.cpp's file types (enum llama_ftype), by the names its quantize tool takes.
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
              18: "Q6_K", 32: "BF16"}


def gguf_metadata(path):
    """The scalar metadata of a GGUF file (arrays skipped), read with the stdlib so this
    tool needs no package. None when the file is not GGUF."""
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    with open(path, "rb") as f:
        def read(fmt):
            data = f.read(struct.calcsize(fmt))
            if len(data) != struct.calcsize(fmt):
                raise ValueError("truncated")
            return struct.unpack(fmt, data)[0]

        def string():
            return f.read(read("<Q")).decode("utf-8", "replace")

        def value(vtype):
            if vtype == 8:
                return string()
            if vtype == 9:
                item, count = read("<I"), read("<Q")
                if item in scalar:
                    f.seek(struct.calcsize(scalar[item]) * count, 1)
                else:
                    for _ in range(count):
                        value(item)
                return None
            if vtype not in scalar:
                raise ValueError(f"unknown metadata value type {vtype}")
            return read(scalar[vtype])

        if f.read(4) != b"GGUF":
            return None
        try:
            if read("<I") < 2:
                return None
            read("<Q")  # tensor count
            meta = {}
            for _ in range(read("<Q")):
                key = string()
                meta[key] = value(read("<I"))
            return meta
        except (ValueError, struct.error, UnicodeDecodeError):
            return None


def weights_of(meta, model_type):
    """The model's quantization: its GGUF file type, else what llama-bench calls it
    ("llama 256M Q4_K - Medium" -> Q4_K_M)."""
    if meta.get("general.file_type") in FILE_TYPES:
        return FILE_TYPES[meta["general.file_type"]]
    name = " ".join(model_type.split()[2:])
    for long, short in ((" - Small", "_S"), (" - Medium", "_M"), (" - Large", "_L")):
        name = name.replace(long, short)
    return name or "unknown"


def llama_bench_command(exe, model, n, threads, repack, device):
    """llama-bench's token-generation command: on the CPU with its weight repacking on or
    off, on CUDA with every layer offloaded (-ngl 99; repacking is a CPU feature)."""
    cmd = [exe, "-m", model, "-p", "0", "-n", n, "-t", threads, "-r", "1"]
    cmd += ["-ngl", "99"] if device == "cuda" else ["--repack", int(repack)]
    return cmd + ["-o", "json"]


def llama_bench(exe, model, n, threads, repack, device="cpu", library_path=None):
    """One llama-bench token-generation run: (tok/s, its model_type)."""
    cmd = llama_bench_command(exe, model, n, threads, repack, device)
    out = run_checked(cmd, "llama-bench", library_path)
    try:
        rows = json.loads(out.stdout)
        row = next(r for r in rows if r.get("n_prompt") == 0 and r.get("n_gen") == n)
        return float(row["avg_ts"]), str(row.get("model_type", ""))
    except (json.JSONDecodeError, StopIteration, KeyError, TypeError, ValueError):
        fail(f"llama-bench printed no tg{n} result: {shlex.join(map(str, cmd))}\n{tail(out.stdout + out.stderr)}",
             EXIT_FAILED)


def qmvlab_decode_command(exe, model, token, n, threads, plan, device, out_json, out_csv):
    # No plan given: qmvlab's default command, the plan it picks from this machine's measurements.
    return ([exe, "decode", "--model", model, "--prompt-tokens", token, "-n", n, "--threads", threads]
            + (["--device", device] if device != "cpu" else [])
            + ["--ignore-eos", "--quiet", "--json", out_json, "--out", out_csv] + (["--plan", plan] if plan else []))


def qmvlab_timed_decode(exe, model, token, n, threads, plan, tmpdir, device="cpu"):
    """One `qmvlab decode` run: its JSON and its results CSV row (which names the
    machine, the CPU, the GPU and the commit the binary was built from)."""
    out_json, out_csv = Path(tmpdir) / "decode.json", Path(tmpdir) / "decode.csv"
    out_json.unlink(missing_ok=True)
    out_csv.unlink(missing_ok=True)
    cmd = qmvlab_decode_command(exe, model, token, n, threads, plan, device, out_json, out_csv)
    run_checked(cmd, "qmvlab decode")
    try:
        result = json.loads(out_json.read_text())
        with open(out_csv, newline="") as f:
            row = next(csv.DictReader(f))
    except (OSError, json.JSONDecodeError, StopIteration) as e:
        fail(f"qmvlab decode wrote no readable results ({out_json}, {out_csv}): {e}", EXIT_FAILED)
    missing = [k for k in ("decode_tok_s", "bytes_per_token", "peak_gbps", "plan_kernels") if k not in result]
    if missing:
        fail(f"qmvlab decode's JSON has no {', '.join(missing)}", EXIT_FAILED)
    return result, row


def peer_description(llama_bench_exe):
    """The contents of the pinned build's `commit` file (.peers/llama.cpp/commit)."""
    for d in Path(llama_bench_exe).resolve().parents:
        if (d / "commit").is_file():
            return (d / "commit").read_text().strip()
    return "unknown"


def gpu_machine(decode_row):
    """The results folder of the GPU a CUDA decode ran on: its name as scripts/gpu-run.sh
    spells it ("NVIDIA H200 sm_90 132SMs ..." -> nvidia-h200)."""
    name = decode_row.get("gpu", "").split(" sm_")[0].lower()
    return "-".join(w for w in "".join(c if c.isalnum() else " " for c in name).split()) or "unknown-gpu"


def prompt_token(meta):
    """The one-token prompt qmvlab decodes from: the model's BOS token, else 0."""
    token = (meta or {}).get("tokenizer.ggml.bos_token_id")
    return token if isinstance(token, int) and token >= 0 else 0


def print_dry_run(args, models, n, bench, qmvlab):
    """The commands one call would run, round by round, and where its row would go."""
    for m in models:
        token = prompt_token(gguf_metadata(m) if m.is_file() else None)
        env = f"LD_LIBRARY_PATH={shlex.quote(args.llama_bench_libs)}:... " if args.llama_bench_libs else ""
        for r in range(args.rounds):
            print(f"# {m.name}, round {r + 1}/{args.rounds}")
            print(env + shlex.join(map(str, llama_bench_command(bench, m, n, args.threads, True, args.device))))
            if args.device == "cpu":
                print(env + shlex.join(map(str, llama_bench_command(bench, m, n, args.threads, False, args.device))))
            print(shlex.join(map(str, qmvlab_decode_command(qmvlab, m, token, n, args.threads, args.plan, args.device,
                                                            "DECODE.json", "DECODE.csv"))))
    print(f"# medians appended to {args.out or 'results/<machine>/decode-vs-llamacpp.csv'}")


def timing_main(args):
    n = 64 if args.n is None else args.n
    if args.threads < 1 or n < 2 or args.rounds < 1:
        fail("--threads and --rounds must be at least 1, -n at least 2")
    bench = Path(args.llama_bench)
    if args.dry_run:
        models = [Path(m) for m in args.model] if args.model else [ROOT / m for m in DEFAULT_MODELS]
        print_dry_run(args, models, n, bench, Path(args.qmvlab))
        return
    if not bench.is_file():
        fail(f"peer build missing ({bench}; scripts/install-peers.sh builds it): skipped", EXIT_SKIPPED)
    qmvlab = Path(args.qmvlab)
    if not (qmvlab.is_file() and os.access(qmvlab, os.X_OK)):
        fail(f"qmvlab executable {qmvlab} not found (build it, or pass --qmvlab)")

    if args.model:
        models = [Path(m) for m in args.model]
    else:
        models = [ROOT / m for m in DEFAULT_MODELS if (ROOT / m).is_file()]
        for m in DEFAULT_MODELS:
            if not (ROOT / m).is_file():
                progress(f"{m} not there: not measured (scripts/get-model.sh, qmvlab make-model make it)")
        if not models:
            fail("none of the default models is there: pass --model (scripts/get-model.sh fetches one)")
    metas = {}
    for m in models:
        if not m.is_file():
            fail(f"model {m} not found")
        meta = gguf_metadata(m)
        if meta is None:
            fail(f"model {m}: not a GGUF file")
        metas[m] = meta

    machine = run_tool([qmvlab, "list", "--machine"], "qmvlab list").stdout.strip() or "unknown"
    out_path = Path(args.out) if args.out else ROOT / "results" / machine / "decode-vs-llamacpp.csv"
    check_csv_header(out_path)
    peer = peer_description(bench)
    progress(f"{peer}; {len(models)} model(s); {args.threads} threads; {n} tokens; {args.rounds} rounds")

    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        for m in models:
            meta = metas[m]
            token = prompt_token(meta)
            start = time.monotonic()
            on, off, ours, roof = [], [], [], []
            model_type, first = "", None
            for r in range(args.rounds):
                speed, model_type = llama_bench(bench, m, n, args.threads, True, args.device, args.llama_bench_libs)
                on.append(speed)
                if args.device == "cpu":
                    off.append(llama_bench(bench, m, n, args.threads, False, library_path=args.llama_bench_libs)[0])
                result, decode_row = qmvlab_timed_decode(qmvlab, m, token, n, args.threads, args.plan, tmpdir,
                                                         args.device)
                first = first or (result, decode_row)
                ours.append(result["decode_tok_s"])
                if result["peak_gbps"] > 0 and result["bytes_per_token"] > 0:
                    roof.append(result["peak_gbps"] * 1e9 / result["bytes_per_token"])
                no_repack = f" (no repack {off[-1]:.2f})" if off else ""
                progress(f"  {m.name} round {r + 1}/{args.rounds}: llama.cpp {on[-1]:.2f} tok/s{no_repack}, "
                         f"qmvlab {ours[-1]:.2f} tok/s")
            q, l, lo, rf = median(ours), median(on), median(off) if off else math.nan, median(roof)
            round_ratios = [mine / peer for mine, peer in zip(ours, on) if peer > 0]
            ratio = median(round_ratios) if round_ratios else math.nan
            shown = m.resolve().relative_to(ROOT) if m.resolve().is_relative_to(ROOT) else m
            command = shlex.join(["scripts/compare_llamacpp.py", "--model", str(shown), "--threads", str(args.threads),
                                  "-n", str(n), "--rounds", str(args.rounds)]
                                 + (["--device", args.device] if args.device != "cpu" else [])
                                 + (["--plan", args.plan] if args.plan else []))
            rows.append({
                "machine": gpu_machine(first[1]) if args.device == "cuda" else machine, "cpu_model": first[1].get("cpu_model", ""),
                "qmvlab_commit": first[1].get("git_commit", ""), "peer": peer,
                "model": first[1].get("model") or meta.get("general.name") or m.stem, "model_file": m.name,
                "weights": weights_of(meta, model_type), "threads": args.threads, "tokens": n,
                "rounds": args.rounds, "qmvlab_tok_s": f"{q:.3f}", "llamacpp_tok_s": f"{l:.3f}",
                "llamacpp_norepack_tok_s": f"{lo:.3f}" if not math.isnan(lo) else "", "ratio": f"{ratio:.3f}" if not math.isnan(ratio) else "",
                "roofline_tok_s": f"{rf:.3f}" if not math.isnan(rf) else "",
                "qmvlab_roofline_pct": f"{100 * q / rf:.2f}" if rf > 0 else "",
                "llamacpp_roofline_pct": f"{100 * l / rf:.2f}" if rf > 0 else "",
                "qmvlab_plan": first[0]["plan_kernels"], "command": command})
            # Each model's row as soon as it is measured: a later failure keeps it.
            append_csv(out_path, rows[-1:])
            progress(f"{m.name}: {time.monotonic() - start:.0f} s")

    print("| model | weights | threads | qmvlab tok/s | llama.cpp tok/s | llama.cpp, no repack | qmvlab / llama.cpp "
          "| roofline tok/s | qmvlab % | llama.cpp % |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model_file']} | {r['weights']} | {r['threads']} | {r['qmvlab_tok_s']} | {r['llamacpp_tok_s']} "
              f"| {r['llamacpp_norepack_tok_s']} | {r['ratio']} | {r['roofline_tok_s']} | {r['qmvlab_roofline_pct']} "
              f"| {r['llamacpp_roofline_pct']} |")
    print(f"medians of {args.rounds} alternating rounds of {n} tokens; {peer}; appended to {out_path}")


def check_csv_header(path):
    """An existing --out must hold this mode's columns: rows are appended to it."""
    if path.is_file() and path.stat().st_size > 0:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        if header != TIMING_FIELDS:
            fail(f"{path}: its header is not this script's ({','.join(TIMING_FIELDS[:4])},...); "
                 f"pass another --out")


def append_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=TIMING_FIELDS)
        if new:
            w.writeheader()
        w.writerows(rows)


def run_tokens_tool(argv):
    """The former --tokens mode, now scripts/llamacpp_tokens.py: run it with the other
    arguments, by the same interpreter (the llama.cpp venv's Python, as before)."""
    rest = list(argv)
    rest.remove("--tokens")
    print(f"compare_llamacpp: --tokens is now {TOKENS_TOOL.relative_to(ROOT)}; running it", file=sys.stderr,
          flush=True)
    os.execv(sys.executable, [sys.executable, str(TOKENS_TOOL)] + rest)


def main():
    if "--tokens" in sys.argv[1:]:
        run_tokens_tool(sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append",
                    help="GGUF model, repeatable (default: those of the three standard models that exist)")
    add_shared_options(ap)
    ap.add_argument("-n", "--tokens-per-round", dest="n", type=int, help="tokens to generate (default 64)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where both engines decode (cuda: llama-bench -ngl 99, qmvlab decode --device cuda; "
                         "the llama-bench of scripts/install-peers.sh --isa cuda)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands a run would make, run none")
    ap.add_argument("--llama-bench", default=str(PEER_DIR / "build/bin/llama-bench"),
                    help="llama-bench executable (default: the pinned build's)")
    ap.add_argument("--llama-bench-libs", metavar="DIRS",
                    help="folders put before LD_LIBRARY_PATH for llama-bench alone (a bundled peer's "
                         "libraries, which must not shadow qmvlab's)")
    ap.add_argument("--out", help="append CSV rows to this file (default: results/<machine>/decode-vs-llamacpp.csv)")
    ap.add_argument("--tokens", action="store_true",
                    help="run scripts/llamacpp_tokens.py (greedy tokens, its former mode here) with the other "
                         "arguments")
    timing_main(ap.parse_args())


if __name__ == "__main__":
    main()
