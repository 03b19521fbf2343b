"""scripts/machines.py: every machine folder with bench rows becomes a column; each cell
is that machine's fastest kernel for the shape, its share taken against the highest peak
measured on that machine; a GPU folder joins beside a CPU one; a folder under a
machine's former name joins the column of its current name, a kernel's former name shows
its name now; bad input is one line."""
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
# The values as written (three decimals), and the expectations below from the text the
# script reads back, so the rounding of the printed figures is the script's own.
cpu_fast, cpu_slow, gpu = (f"{rng.uniform(lo, hi):.3f}" for lo, hi in ((20, 40), (5, 15), (2000, 3000)))
cpu_peak_low, cpu_peak, gpu_peak = (f"{rng.uniform(lo, hi):.3f}" for lo, hi in ((40, 44), (45, 50), (3000, 3500)))


def write(machine, name, rows):
    os.makedirs(os.path.join(root, machine), exist_ok=True)
    with open(os.path.join(root, machine, name), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(rows)


write("cpu-box", "default.csv", [
    ["q4_K.cpu.a", "q4_K", "cpu", 4096, 14336, 2, "cold", cpu_slow, cpu_peak, "ok"],
    ["q4_K.cpu.b", "q4_K", "cpu", 4096, 14336, 2, "cold", cpu_fast, cpu_peak_low, "ok"],
    ["q4_K.cpu.c", "q4_K", "cpu", 4096, 14336, 2, "cold", "999", "60", "skipped"],  # not ok: left out
    ["q4_K.cpu.d", "q4_K", "cpu", 4096, 14336, 2, "warm", "500", "70", "ok"],  # warm: left out
])
write("cpu-box", "peak.csv", [])  # no bench columns beyond the header: ignored
write("gpu-box", "bench.csv", [["q4_K.cuda.x", "q4_K", "cuda", 4096, 14336, 1, "cold", gpu, gpu_peak, "ok"]])

out = subprocess.run([sys.executable, script, root], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
assert out.returncode == 0, out.stderr
lines = out.stdout.strip().splitlines()
assert lines[0] == "| weights | shape | cpu-box | gpu-box |", lines[0]
row = lines[2]
# The fastest row's share is against the highest peak of the machine (another row's).
fast = f"`q4_K.cpu.b` (2T): {float(cpu_fast):.1f} GB/s, {100 * float(cpu_fast) / float(cpu_peak):.0f}% of peak"
assert fast in row, (fast, row)
on_gpu = f"`q4_K.cuda.x` (GPU): {float(gpu):.1f} GB/s, {100 * float(gpu) / float(gpu_peak):.0f}% of peak"
assert on_gpu in row, (on_gpu, row)
# By kernel name: a figure such as 999 could be part of another cell's.
assert "q4_K.cpu.c" not in out.stdout and "q4_K.cpu.d" not in out.stdout, out.stdout

# A machine's folder under its former name (its rows say so too) and under the current
# one: one column, the current name, with the fastest row of both; the masked folder of
# the former name becomes the masked column of the current one.
old_fast, new_slow, masked = (f"{rng.uniform(lo, hi):.3f}" for lo, hi in ((30, 40), (10, 20), (20, 30)))
write("amd-epyc-2c", "default.csv", [["q4_K.cpu.old", "q4_K", "cpu", 4096, 14336, 2, "cold", old_fast, "50", "ok"]])
write("amd-zen3-2c", "default.csv", [["q4_K.cpu.new", "q4_K", "cpu", 4096, 14336, 2, "cold", new_slow, "50", "ok"]])
write("amd-epyc-2c-isa-avx2", "default.csv", [["q4_K.cpu.m", "q4_K", "cpu", 4096, 14336, 2, "cold", masked, "50", "ok"]])
merged = subprocess.run([sys.executable, script, root], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
assert merged.returncode == 0, merged.stderr
head, _, row = merged.stdout.strip().splitlines()[:3]
assert head == "| weights | shape | amd-zen3-2c | amd-zen3-2c-isa-avx2 | cpu-box | gpu-box |", head
cells = row.split(" | ")
assert cells[2].startswith(f"`q4_K.cpu.old` (2T): {float(old_fast):.1f} GB/s"), row
assert cells[3].startswith(f"`q4_K.cpu.m` (2T): {float(masked):.1f} GB/s"), row

sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
from machines import canonical_machine  # noqa: E402

assert canonical_machine("amd-epyc-2c") == "amd-zen3-2c"
assert canonical_machine("amd-epyc-2c-isa-avx2-fma-f16c") == "amd-zen3-2c-isa-avx2-fma-f16c"
for other in ("amd-epyc-2cx", "amd-epyc-16c", "intel-xeon-2c", "amd-zen4-2c"):
    assert canonical_machine(other) == other, other

# A row timed before its kernel was renamed shows the kernel's name now (the table of
# former names is kernels/former_names.cpp's, read by scripts/kernel_names.py).
write("gpu-box", "old-names.csv",
      [["q4_K.cuda.multiwarp_f32.w2", "q4_K", "cuda", 14336, 4096, 1, "cold", gpu, gpu_peak, "ok"]])
renamed = subprocess.run([sys.executable, script, root, "--shapes", "14336x4096"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
assert renamed.returncode == 0, renamed.stderr
assert "`q4_K.cuda.warpx2_f32` (GPU)" in renamed.stdout and "multiwarp" not in renamed.stdout, renamed.stdout

from kernel_names import TABLE, current_kernel_name, former_names  # noqa: E402

table = former_names()
assert len(table) == TABLE.read_text().count('{"') and len(table) > 100, len(table)
assert current_kernel_name("q4_K.cpu.avx2_4row_q8k") == "q4_K.cpu.avx2_x4_q8k"
assert current_kernel_name("q4_K.cuda.mwv.w3") == "q4_K.cuda.warpx3_f32"
assert current_kernel_name("q4_K.cpu.avx2_x4_q8k") == "q4_K.cpu.avx2_x4_q8k"
assert all(now not in table for now in table.values()), "a former name leads to another former name"
assert former_names(TABLE.with_name("no-such-table.cpp")) == {}

bad = subprocess.run([sys.executable, script, root, "--shapes", "12x"], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
assert bad.returncode == 2 and "--shapes" in bad.stderr, bad.stderr
missing = subprocess.run([sys.executable, script, root + "/nope"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
assert missing.returncode == 2 and "no such folder" in missing.stderr, missing.stderr
print("ok")
