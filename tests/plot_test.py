#!/usr/bin/env python3
"""scripts/plot.py: every plot kind on CSVs written here from random values (and on a
bench CSV written by qmvlab), the joins and orderings the plots rest on, and clear
refusals of bad input."""
import argparse
import csv
import importlib.util
import math
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib.image
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--qmvlab", required=True)
ap.add_argument("--plot", required=True)
args = ap.parse_args()

spec = importlib.util.spec_from_file_location("plot", args.plot)
plot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot)

rng = random.Random()
passed = failed = 0

BENCH_HEADER = ["machine", "cpu_model", "gpu", "compiler", "git_commit", "kernel", "op", "weight_type", "act_format",
                "backend", "rows", "cols", "threads", "cache", "tile_rows", "min_parallel_rows", "repetitions",
                "time_min_us", "time_median_us", "time_max_us", "bytes_per_call", "gbps_median", "gbps_best",
                "peak_gbps", "peak_pct", "gflops", "command"]
KERNELS = ["q4_K.cpu.avx2_q8k", "q4_K.cpu.scalar_f32", "q6_K.cpu.avx512vnni_x4_q8k", "q8_0.cpu.avx2_f32", "f16.cpu.scalar"]
SHAPES = [(4096, 4096), (11008, 4096), (576, 1536)]


def check(name, fn):
    global passed, failed
    try:
        fn()
        passed += 1
    except AssertionError as e:
        failed += 1
        print(f"FAIL {name}: {e}")


def random_rows(machine, kernels=KERNELS, shapes=SHAPES, threads=(1, 2)):
    peak = {t: rng.uniform(10, 40) * t for t in threads}
    rows = []
    for k in kernels:
        for r, c in shapes:
            for t in threads:
                gbps = rng.uniform(0.05, 1.0) * peak[t]
                nbytes = r * c + rng.randint(1, 10000)
                rows.append({"machine": machine, "cpu_model": "Test CPU", "gpu": "none", "compiler": "gcc",
                             "git_commit": "abc", "kernel": k, "op": "matvec", "weight_type": k.split(".")[0],
                             "act_format": "q8_K", "backend": "cpu", "rows": r, "cols": c, "threads": t,
                             "cache": "cold", "tile_rows": 64, "min_parallel_rows": 128, "repetitions": 5,
                             "time_min_us": 1, "time_median_us": nbytes / gbps / 1e3, "time_max_us": 1e9,
                             "bytes_per_call": nbytes, "gbps_median": gbps, "gbps_best": gbps * 1.01,
                             "peak_gbps": peak[t], "peak_pct": 100 * gbps / peak[t], "gflops": 1, "command": "x"})
    return rows


def write_csv(path, rows, header=BENCH_HEADER):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        for r in rows:
            w.writerow({h: r.get(h, "") for h in header})
    return path


def run(*argv):
    return subprocess.run([sys.executable, args.plot, *map(str, argv)], capture_output=True, text=True)


def assert_png(path, min_size=(300, 200)):
    """A PNG of a plausible size whose pixels are not all one colour."""
    path = Path(path)
    assert path.exists(), f"{path} not written"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    img = matplotlib.image.imread(path)
    assert img.shape[1] >= min_size[0] and img.shape[0] >= min_size[1], f"{path}: tiny image {img.shape}"
    assert float(np.std(img[..., :3])) > 0.02, f"{path}: blank image"
    # Data drawn, not only a frame, text and grid (all grey): some pixels are coloured.
    rgb = img[..., :3]
    coloured = int(np.count_nonzero((rgb.max(axis=2) - rgb.min(axis=2)) > 0.15))
    assert coloured > 200, f"{path}: only {coloured} coloured pixels"


def assert_refused(result, message):
    assert result.returncode != 0, f"accepted; stdout {result.stdout}"
    assert message in result.stderr, f"expected {message!r} in {result.stderr!r}"
    assert "Traceback" not in result.stderr, result.stderr


with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)

    def qmvlab_bench():
        bench = tmp / "qmvlab" / "bench.csv"
        subprocess.run([args.qmvlab, "bench", "--kernels", "q4_K.cpu.scalar*", "--shapes", "4x256,8x512",
                        "--threads", "1", "--warm", "--reps", "1", "--min-time", "0.01", "--peak-reps", "1",
                        "--peak-buffer-mib", "64", "--out", str(bench)], check=True, stdout=subprocess.DEVNULL)
        for kind in ("bench", "leaderboard", "roofline"):
            r = run(bench, "--kind", kind)
            assert r.returncode == 0, r.stderr
        assert_png(bench.with_suffix(".png"))
        assert_png(tmp / "qmvlab" / "bench-leaderboard.png", (200, 100))
        assert_png(tmp / "qmvlab" / "bench-roofline.png")
    check("bench CSV from qmvlab", qmvlab_bench)

    rows = random_rows("box-a")
    (tmp / "a").mkdir()
    bench = write_csv(tmp / "a" / "bench.csv", rows)

    def every_kind_beside_the_csv():
        r = run(bench, "--kind", "all")
        assert r.returncode == 0, r.stderr
        for name in ("bench.png", "bench-leaderboard.png", "bench-roofline.png"):
            assert_png(tmp / "a" / name)
        assert "accuracy plot skipped" in r.stdout, r.stdout
        assert not (tmp / "a" / "bench-accuracy.png").exists()
        out = tmp / "elsewhere.png"
        r = run(bench, "--kind", "roofline", "-o", out)
        assert r.returncode == 0, r.stderr
        assert_png(out)
    check("--kind all writes every plot beside the CSV", every_kind_beside_the_csv)

    def leaderboard_order():
        kernels, shapes, score, best = plot.leaderboard(plot.load(str(bench)))
        expected = {}
        for k in KERNELS:
            cells = [max(r["peak_pct"] for r in rows if r["kernel"] == k and (r["rows"], r["cols"]) == s) for s in SHAPES]
            expected[k] = sum(cells) / len(cells)
        assert kernels == sorted(KERNELS, key=lambda k: -expected[k]), (kernels, expected)
        for k in KERNELS:
            assert math.isclose(score[k], expected[k], rel_tol=1e-12), (k, score[k], expected[k])
    check("leaderboard: best first, the best thread count per cell", leaderboard_order)

    def gpu_rows_name_the_gpu():
        gpu_rows = [dict(r, backend="cuda", gpu_name="Test GPU 80GB", threads=1) for r in random_rows("host-16c")]
        mixed = gpu_rows + random_rows("host-16c")
        assert plot.where(gpu_rows) == "Test GPU 80GB", plot.where(gpu_rows)
        assert plot.threads_text(gpu_rows, 1) == "GPU"
        assert plot.where(mixed) == "host-16c", plot.where(mixed)
        assert plot.threads_text(mixed, 2) == "2 threads"
        header = BENCH_HEADER[:-1] + ["gpu_name", "command"]
        (tmp / "gpu").mkdir()
        path = write_csv(tmp / "gpu" / "bench.csv", gpu_rows, header)
        r = run(path, "--kind", "all")
        assert r.returncode == 0, r.stderr
        assert_png(tmp / "gpu" / "bench-leaderboard.png")
    check("CUDA rows: titles name the GPU, not the host, and no thread count", gpu_rows_name_the_gpu)

    # A sweep-style CSV: extra columns, check columns, failed rows with empty numbers.
    sweep_header = ["experiment", "model_op"] + BENCH_HEADER + ["status", "reason", "check_nmse_e2e", "check_passed"]
    sweep_rows = random_rows("box-s")
    for r in sweep_rows:
        r.update(experiment="e", model_op="ffn_down", status="ok", check_nmse_e2e=10 ** rng.uniform(-14, -3),
                 check_passed=1)
    broken = dict(sweep_rows[0], status="failed", reason="check failed, NMSE 0.5", gbps_median="", peak_pct="",
                  time_median_us="", check_nmse_e2e=0.5, check_passed=0)
    sweep = write_csv(tmp / "sweep.csv", sweep_rows + [broken], sweep_header)

    def accuracy_from_check_columns():
        r = run(sweep, "--kind", "accuracy")
        assert r.returncode == 0, r.stderr
        assert_png(tmp / "sweep-accuracy.png")
        points = plot.accuracy_points(plot.load(str(sweep)), None)
        assert len(points) == len(KERNELS) * len(SHAPES), len(points)
        for (k, s), (pct, nmse, ok) in points.items():
            mine = [x for x in sweep_rows if x["kernel"] == k and (x["rows"], x["cols"]) == s]
            assert math.isclose(nmse, max(x["check_nmse_e2e"] for x in mine), rel_tol=1e-12)
            assert math.isclose(pct, max(x["peak_pct"] for x in mine), rel_tol=1e-12)
            assert ok and nmse < 0.5, "the failed row must be left out"
    check("accuracy from a sweep CSV's check columns", accuracy_from_check_columns)

    def accuracy_from_check_csv():
        check_header = ["kernel", "weight_type", "rows", "cols", "threads", "activation", "nmse_e2e", "passed", "failure"]
        check_rows, worst = [], {}
        for k in KERNELS[:3]:
            for s in SHAPES:
                for act in ("gaussian", "outliers"):
                    v = 10 ** rng.uniform(-14, -2)
                    fail = rng.random() < 0.2
                    check_rows.append({"kernel": k, "weight_type": k.split(".")[0], "rows": s[0], "cols": s[1],
                                       "threads": 2, "activation": act, "nmse_e2e": v, "passed": 0 if fail else 1})
                    w = worst.get((k, s), (0.0, True))
                    worst[(k, s)] = (max(w[0], v), w[1] and not fail)
        check_rows.append({"kernel": "q3_K.cpu.x", "weight_type": "q3_K", "rows": 4096, "cols": 4096, "threads": 2,
                           "activation": "gaussian", "nmse_e2e": 1e-5, "passed": 1})  # not benched: no point
        chk = write_csv(tmp / "check.csv", check_rows, check_header)
        points = plot.accuracy_points(plot.load(str(bench)), str(chk))
        assert set(points) == set(worst), sorted(points)
        for key, (pct, nmse, ok) in points.items():
            assert math.isclose(nmse, worst[key][0], rel_tol=1e-12) and ok == worst[key][1], (key, nmse, ok, worst[key])
        out = tmp / "acc.png"
        r = run(bench, "--kind", "accuracy", "--check", chk, "-o", out)
        assert r.returncode == 0, r.stderr
        assert_png(out)
    check("accuracy joined with a check CSV", accuracy_from_check_csv)

    def compare_machines():
        paths = []
        for i, m in enumerate(("box-a", "box-b", "box-c")):
            # Each machine measured a different subset; box-c has one kernel nobody else has.
            ks = KERNELS[i:] + (["q5_K.cpu.only_here"] if m == "box-c" else [])
            paths.append(write_csv(tmp / f"m{i}.csv", random_rows(m, kernels=ks)))
        out = tmp / "compare.png"
        r = run(*paths, "--compare", "-o", out)
        assert r.returncode == 0, r.stderr
        assert_png(out)
        r = run(*paths[:2], "--compare", "--metric", "peak_pct")
        assert r.returncode == 0, r.stderr
        assert_png(tmp / "m0-compare.png")
    check("--compare: several machines side by side", compare_machines)

    def bad_input():
        other = tmp / "other.csv"
        other.write_text("a,b\n1,2\n")
        assert_refused(run(other), "not a qmvlab bench CSV")
        assert_refused(run(tmp / "nope.csv"), "cannot read")
        assert_refused(run(bench, "--kind", "accuracy"), "accuracy needs check results")
        assert_refused(run(bench, "--kind", "accuracy", "--check", tmp / "nope.csv"), "no such file")
        assert_refused(run(bench, "--kind", "accuracy", "--check", other), "not a qmvlab check CSV")
        assert_refused(run(bench, "--kind", "all", "-o", tmp / "x.png"), "--kind all writes several")
        assert_refused(run(bench, "--compare"), "--compare needs two or more CSVs")
        assert_refused(run(bench, bench), "several CSVs need --compare")
        lone = write_csv(tmp / "lone.csv", random_rows("box-z", kernels=["q2_K.cpu.lone"]))
        assert_refused(run(bench, lone, "--compare"), "no kernel and shape is in two or more")
        bad = dict(rows[0], gbps_median="fast")
        assert_refused(run(write_csv(tmp / "bad.csv", [bad])), "column gbps_median: 'fast' is not a number")
        none_ok = write_csv(tmp / "none_ok.csv", [broken], sweep_header)
        assert_refused(run(none_ok), "no rows to plot with status ok")
        assert_refused(run(bench, "--kind", "pie"), "invalid choice")
    check("bad input is refused with one clear message", bad_input)

    def gpu_window_ceilings_on_the_roofline():
        header = ["threads", "buffer_bytes", "repetitions", "gbps_best", "gbps_median", "device", "datasheet_gbps",
                  "read_loop"]
        sizes = sorted(rng.sample(range(1 << 20, 1 << 28), 5))
        peak_rows = [{"threads": 0, "buffer_bytes": 1 << 31, "repetitions": 7, "gbps_best": 3000, "gbps_median": 2990,
                      "device": "cuda-read", "datasheet_gbps": 3350, "read_loop": "x"}]
        for dev in ("cuda-read-window", "cuda-read-window-graph"):
            for b in reversed(sizes):  # out of order: the curves come back sorted by size
                g = rng.uniform(300, 2900)
                peak_rows.append({"threads": 0, "buffer_bytes": b, "repetitions": 7, "gbps_best": g + 1,
                                  "gbps_median": g, "device": dev, "datasheet_gbps": 3350, "read_loop": "x"})
        peak = write_csv(tmp / "peak.csv", peak_rows, header)
        curves = plot.load_windows(str(peak))
        assert set(curves) == set(plot.WINDOW_DEVICES.values()), curves.keys()
        for pts in curves.values():
            assert [p[0] for p in pts] == [b / 2**20 for b in sizes], pts
        out = tmp / "windows-roofline.png"
        r = run(bench, "--kind", "roofline", "--windows", peak, "-o", out)
        assert r.returncode == 0, r.stderr
        assert_png(out)
        no_windows = write_csv(tmp / "peak-plain.csv", peak_rows[:1], header)
        assert_refused(run(bench, "--kind", "roofline", "--windows", no_windows), "no cuda-read-window rows")
        assert_refused(run(bench, "--kind", "roofline", "--windows", tmp / "nope.csv"), "nope.csv: no such file")
    check("--windows draws the GPU's one-launch ceilings on the roofline", gpu_window_ceilings_on_the_roofline)

    def former_machine_names():
        # Rows written under a machine's former name are labelled with its current one, so
        # --compare sees one machine in two files (and tells the files apart).
        old = random_rows("amd-epyc-2c")
        assert plot.machine_of(old, "x.csv") == "amd-zen3-2c", plot.machine_of(old, "x.csv")
        assert plot.where(old) == "amd-zen3-2c", plot.where(old)
        unnamed = [dict(old[0], machine="")]
        assert plot.machine_of(unnamed, "results/amd-epyc-2c-isa-avx2/bench.csv") == "amd-zen3-2c-isa-avx2"
        assert plot.machine_of(random_rows("box-a"), "x.csv") == "box-a"
    check("a former machine name is shown as the current one", former_machine_names)

    def batch_crossovers():
        # Kernels whose time per call is max(memory, n * per-vector cost), with random
        # figures: the crossover is memory / per-vector, each n's time over the
        # one-vector time is read back, the plot is drawn; a file without several n refused.
        header = BENCH_HEADER + ["n"]
        rows, want = [], {}
        peak = rng.uniform(20, 60)
        for k in ("q4_K.cpu.avx2_r8_batch_q8k", "q4_K.ggml.cpu_batch"):
            weights, per_vec_bytes = 4096 * 4096 * 9 // 16, 4096 + 4096 * 4
            memory_us = weights / peak / 1e3
            per_vector_us = memory_us / rng.uniform(1.2, 3.9)  # n = 4 and 8 past the roof
            want[k] = (memory_us / per_vector_us, per_vector_us)
            for n in (1, 2, 4, 8):
                t = max(memory_us, n * per_vector_us)
                b = weights + n * per_vec_bytes
                rows.append(dict(random_rows("box-a", kernels=[k], shapes=[(4096, 4096)], threads=(2,))[0], n=n,
                                 time_median_us=t, bytes_per_call=b, gbps_median=weights / t / 1e3, peak_gbps=peak))
        path = write_csv(tmp / "batch.csv", rows, header)
        got = {c["kernel"]: c for c in plot.batch_crossovers(plot.load(path))}
        for k, (crossover, per_vector_us) in want.items():
            c = got[k]
            assert math.isclose(c["per_vector_us"], per_vector_us, rel_tol=1e-9), (k, c["per_vector_us"], per_vector_us)
            assert math.isclose(c["crossover_n"], crossover, rel_tol=1e-6), (k, c["crossover_n"], crossover)
            t = {r["n"]: r["time_median_us"] for r in rows if r["kernel"] == k}
            assert math.isclose(c["over_one"][4], t[4] / t[1], rel_tol=1e-9), (k, c["over_one"])
            slower = [n for n in (1, 2, 4, 8) if t[n] / t[1] > 1.3]
            assert c["first_slower_n"] == (slower[0] if slower else None), (k, c["first_slower_n"], slower)
        r = run(path, "--kind", "batch", "--crossover", tmp / "crossover.csv")
        assert r.returncode == 0, r.stderr
        assert_png(tmp / "batch-batch.png")
        with open(tmp / "crossover.csv", newline="") as f:
            back = {x["kernel"]: x for x in csv.DictReader(f)}
        for k, (crossover, _) in want.items():
            assert abs(float(back[k]["crossover_n"]) - crossover) < 0.01, (k, back[k]["crossover_n"], crossover)
        one_n = write_csv(tmp / "one-n.csv", [dict(r, n=1) for r in rows[:1]], header)
        assert_refused(run(one_n, "--kind", "batch"), "no kernel was timed at two or more n")
    check("batch: time per call against n, the crossover n per kernel", batch_crossovers)

    def former_kernel_names():
        # A row timed before its kernel was renamed: plotted and joined under its name now.
        old = dict(rows[0], kernel="q6_K.cpu.avx512vnni_4row_q8k", weight_type="q6_K")
        back = plot.load(str(write_csv(tmp / "former-names.csv", [old])))
        assert [r["kernel"] for r in back] == ["q6_K.cpu.avx512vnni_x4_q8k"], back
    check("a row under a former kernel name reads under its name now", former_kernel_names)

    def help_documents_kinds():
        r = run("--help")
        assert r.returncode == 0
        for word in ("leaderboard", "roofline", "accuracy", "batch", "--compare", "--check", "--crossover"):
            assert word in r.stdout, word
    check("--help documents every plot", help_documents_kinds)

print(f"plot_test: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
