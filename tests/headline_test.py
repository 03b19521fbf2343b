#!/usr/bin/env python3
"""scripts/headline.py on a made-up results folder (fresh random figures): each machine's
row holds its read peak (the CPU's at its most threads, or the GPU read) and per model
the last qmvlab / llama.cpp ratio at the most threads, linking REPORT.md where there is
one; --check fails (exit 1) on a README whose table is stale and passes once --write has
put it there; a README without the markers and a CSV without its columns are one line
and exit 2. Then the repository's own README against its results/.
  tests/headline_test.py SCRIPT README RESULTS"""
import random
import subprocess
import sys
import tempfile
from pathlib import Path

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}")


def run(script, *args):
    return subprocess.run([sys.executable, script, *map(str, args)], capture_output=True, text=True)


def main():
    script, readme, results = sys.argv[1:4]
    rng = random.Random()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        res = tmp / "results"
        cpu, gpu = res / "cpu-box", res / "gpu-box"
        cpu.mkdir(parents=True)
        gpu.mkdir()
        (cpu / "REPORT.md").write_text("# report\n")
        p1, p2, p2b = (rng.uniform(5, 60) for _ in range(3))
        (cpu / "peak.csv").write_text(
            "machine,cpu_model,gpu,threads,gbps_best,gbps_median\n"
            f"cpu-box,Test CPU,none,1,{p1 + 1},{p1}\ncpu-box,Test CPU,none,2,{p2 + 1},{p2}\n"
            f"cpu-box,Test CPU,none,2,{p2b + 1},{p2b}\n")
        g = rng.uniform(1000, 5000)
        (gpu / "peak.csv").write_text(
            "machine,cpu_model,gpu,threads,gbps_best,gbps_median,device\n"
            f"host,Host CPU,Test GPU sm_90 1SMs,16,100,99,cpu\nhost,Host CPU,Test GPU sm_90 1SMs,0,{g + 5},{g},cuda-read\n")
        q = [rng.uniform(10, 400) for _ in range(4)]
        l = [rng.uniform(10, 400) for _ in range(4)]
        # A row's own ratio (of its rounds) where it has one, else its speeds'.
        alpha_ratio = rng.uniform(0.5, 3)
        (cpu / "decode-vs-llamacpp.csv").write_text(
            "model,model_file,threads,qmvlab_tok_s,llamacpp_tok_s,ratio\n"
            f"m a,alpha.gguf,2,{q[0]},{l[0]},\nm a,alpha.gguf,1,{q[1]},{l[1]},\n"
            f"m a,alpha.gguf,2,{q[2]},{l[2]},{alpha_ratio}\nm b,synthetic-beta.gguf,2,{q[3]},{l[3]},\n")
        made = run(script, "--results", res)
        check(made.returncode == 0, f"table: exit {made.returncode}: {made.stderr}")
        rows = {line.split("|")[1].strip(): line for line in made.stdout.splitlines()[2:]}
        cpu_row, gpu_row = rows.get("[cpu-box](results/cpu-box/REPORT.md)"), rows.get("[gpu-box](results/gpu-box)")
        check(cpu_row is not None and gpu_row is not None, f"one row per machine, linked: {made.stdout}")
        if cpu_row and gpu_row:
            check(f"{max(p2, p2b):.1f} GB/s, 2 threads" in cpu_row, f"CPU peak, most threads: {cpu_row}")
            check(f"alpha {alpha_ratio:.2f}x" in cpu_row and f"beta {q[3] / l[3]:.2f}x" in cpu_row,
                  f"last ratio per model at the most threads: {cpu_row}")
            check(f"{g:.0f} GB/s, GPU read" in gpu_row and "| Test GPU |" in gpu_row, f"GPU row: {gpu_row}")

        page = tmp / "README.md"
        page.write_text("# x\n<!-- headline -->\n| stale |\n<!-- /headline -->\ntail\n")
        stale = run(script, "--results", res, "--check", page)
        check(stale.returncode == 1 and "stale" in stale.stderr, f"stale table: exit {stale.returncode}")
        wrote = run(script, "--results", res, "--write", page)
        fresh = run(script, "--results", res, "--check", page)
        check(wrote.returncode == 0 and fresh.returncode == 0, f"after --write: {wrote.stderr} {fresh.stderr}")
        check(page.read_text().startswith("# x\n<!-- headline -->\n| machine") and page.read_text().endswith(
            "<!-- /headline -->\ntail\n"), f"only the table replaced: {page.read_text()}")
        (cpu / "peak.csv").write_text((cpu / "peak.csv").read_text().replace(f",{p2b}\n", f",{p2b + 100}\n"))
        moved = run(script, "--results", res, "--check", page)
        check(moved.returncode == 1, "a changed results file makes the table stale")

        page.write_text("no markers\n")
        bad = run(script, "--results", res, "--check", page)
        check(bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, f"no markers: {bad.stderr}")
        (cpu / "decode-vs-llamacpp.csv").write_text("model,threads\nm,2\n")
        bad = run(script, "--results", res)
        check(bad.returncode == 2 and "no column qmvlab_tok_s" in bad.stderr and "Traceback" not in bad.stderr,
              f"CSV without its columns: {bad.stderr}")

    own = run(script, "--results", results, "--check", readme)
    check(own.returncode == 0, f"the README's table: {own.stderr.strip()[:300]}")
    print(f"headline: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
