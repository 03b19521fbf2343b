"""scripts/machines.py: every machine folder with bench rows becomes a column; each cell
is that machine's fastest kernel for the shape, its share taken against the highest peak
measured on that machine; a GPU folder joins beside a CPU one; bad input is one line."""
import csv
import os
import random
import subprocess
import sys
import tempfile

script = sys.argv[1]
root = tempfile.mkdtemp(prefix="machines-test-")
cols = ["kernel", "weight_type", "backend", "rows", "cols", "threads", "cache", "gbps_median", "peak_gbps", "status"]
rng = random.Random()
cpu_fast, cpu_slow, gpu = rng.uniform(20, 40), rng.uniform(5, 15), rng.uniform(2000, 3000)


def write(machine, name, rows):
    os.makedirs(os.path.join(root, machine), exist_ok=True)
    with open(os.path.join(root, machine, name), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(rows)


write("cpu-box", "default.csv", [
    ["q4_K.cpu.a", "q4_K", "cpu", 4096, 14336, 2, "cold", f"{cpu_slow:.3f}", "40", "ok"],
    ["q4_K.cpu.b", "q4_K", "cpu", 4096, 14336, 2, "cold", f"{cpu_fast:.3f}", "45", "ok"],
    ["q4_K.cpu.c", "q4_K", "cpu", 4096, 14336, 2, "cold", "999", "45", "skipped"],  # not ok: left out
    ["q4_K.cpu.d", "q4_K", "cpu", 4096, 14336, 2, "warm", "500", "45", "ok"],  # warm: left out
])
write("cpu-box", "peak.csv", [])  # no bench columns beyond the header: ignored
write("gpu-box", "bench.csv", [["q4_K.cuda.x", "q4_K", "cuda", 4096, 14336, 1, "cold", f"{gpu:.3f}", "3000", "ok"]])

out = subprocess.run([sys.executable, script, root], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
assert out.returncode == 0, out.stderr
lines = out.stdout.strip().splitlines()
assert lines[0] == "| weights | shape | cpu-box | gpu-box |", lines[0]
row = lines[2]
assert "`q4_K.cpu.b` (2T)" in row and f"{cpu_fast:.1f} GB/s, {100 * cpu_fast / 45:.0f}% of peak" in row, row
assert "`q4_K.cuda.x` (GPU)" in row and f"{100 * gpu / 3000:.0f}% of peak" in row, row
assert "999" not in out.stdout and "500" not in out.stdout, out.stdout

bad = subprocess.run([sys.executable, script, root, "--shapes", "12x"], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
assert bad.returncode == 2 and "--shapes" in bad.stderr, bad.stderr
missing = subprocess.run([sys.executable, script, root + "/nope"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
assert missing.returncode == 2 and "no such folder" in missing.stderr, missing.stderr
print("ok")
