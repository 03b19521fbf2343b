#!/usr/bin/env python3
"""The compiler's resource report of every CUDA kernel: fails when any kernel spills
registers or uses local memory (stack frame, spill stores or loads > 0), printing a
table of kernel, arch, registers, stack and spills.

The reports are the ptxas -v output that scripts/gpu-resource-log.sh keeps beside each
CUDA object (<object>.resources). Before judging them, the test proves it can fail:
it compiles a toy kernel that must spill, through the same launcher, and checks that
the toy is caught while its non-spilling neighbour is not.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from cuda_names import demangle  # noqa: E402

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
PROPERTIES = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGISTERS = re.compile(r"Used (\d+) registers")


def parse_report(text, source):
    """One record per (function, arch): registers, stack, spill stores and loads."""
    records = {}
    arch = "?"
    entry = None
    props_of = None
    for line in text.splitlines():
        if m := ENTRY.search(line):
            entry, arch = m.group(1), m.group(2)
            continue
        if m := PROPERTIES.search(line):
            props_of = m.group(1)
            continue
        if (m := FRAME.search(line)) and props_of:
            rec = records.setdefault((props_of, arch), {"source": source, "registers": None})
            rec["stack"], rec["spill_stores"], rec["spill_loads"] = (int(g) for g in m.groups())
            props_of = None
            continue
        if (m := REGISTERS.search(line)) and entry:
            rec = records.setdefault((entry, arch), {"source": source, "stack": 0, "spill_stores": 0,
                                                     "spill_loads": 0})
            rec["registers"] = int(m.group(1))
            entry = None
    return records


def problems_of(rec):
    found = []
    if rec.get("stack", 0) > 0 and not rec.get("stack_allowed"):
        found.append(f"{rec['stack']} bytes of stack frame (local memory)")
    if rec.get("spill_stores", 0) > 0 or rec.get("spill_loads", 0) > 0:
        found.append(f"spills ({rec['spill_stores']} bytes stored, {rec['spill_loads']} loaded)")
    return found


def print_table(records):
    names = demangle(sorted({name for name, _ in records}))
    rows = [("source", "kernel", "arch", "registers", "stack B", "spill stores B", "spill loads B", "verdict")]
    for (name, arch), rec in sorted(records.items(), key=lambda kv: (kv[1]["source"], names[kv[0][0]], kv[0][1])):
        regs = rec.get("registers")
        rows.append((rec["source"], names[name], arch, "-" if regs is None else str(regs), str(rec.get("stack", 0)),
                     str(rec.get("spill_stores", 0)), str(rec.get("spill_loads", 0)),
                     "SPILLS" if problems_of(rec) else
                     f"ok (stack: {rec['stack_allowed']})" if rec.get("stack", 0) and rec.get("stack_allowed") else "ok"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def read_objects(objects):
    """Records of every CUDA object's report; a missing report is an error."""
    records, missing = {}, []
    for obj in objects:
        if not obj.endswith(".cu.o"):
            continue
        path = obj + ".resources"
        if not os.path.isfile(path):
            missing.append(path)
            continue
        with open(path) as f:
            records.update(parse_report(f.read(), os.path.basename(obj)[: -len(".o")]))
    return records, missing


TOY = r"""
// Needs ~64 live floats per thread; capped at 24 registers it must spill.
__global__ void toy_spills(float* out, const float* in, int n) {
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = in[threadIdx.x + i * n];
  float s = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k)
#pragma unroll
    for (int i = 0; i < 64; ++i) s += acc[i] * acc[(i * 7 + k) & 63];
  out[threadIdx.x] = s;
}
__global__ void toy_fits(float* out) { out[threadIdx.x] = 2.0f * out[threadIdx.x]; }
"""


def self_test(nvcc, launcher, arch):
    """The checker must flag a kernel that spills and pass one that does not."""
    with tempfile.TemporaryDirectory() as tmp:
        src, obj = os.path.join(tmp, "toy.cu"), os.path.join(tmp, "toy.cu.o")
        with open(src, "w") as f:
            f.write(TOY)
        cmd = ["bash", launcher, nvcc, f"-arch=sm_{arch}", "-maxrregcount=24", "--ptxas-options=-v", "-c", src,
               "-o", obj]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"self-test: could not compile the toy kernel: {' '.join(cmd)}\n{run.stderr}")
        records, missing = read_objects([obj])
        if missing:
            sys.exit(f"self-test: the launcher wrote no report ({missing[0]})")
        flagged = {name for (name, _), rec in records.items() if problems_of(rec)}
        names = {name for name, _ in records}
        spills = [n for n in names if "toy_spills" in n]
        fits = [n for n in names if "toy_fits" in n]
        if not spills or not fits:
            sys.exit(f"self-test: the report lacks the toy kernels (found {sorted(names)})")
        if not set(spills) <= flagged:
            sys.exit("self-test: the deliberately spilling toy kernel was NOT flagged: the check cannot fail")
        if set(fits) & flagged:
            sys.exit("self-test: the toy kernel that fits in registers was flagged")
        print(f"self-test: a toy kernel capped at 24 registers on sm_{arch} is caught spilling; its neighbour passes")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--launcher", required=True, help="scripts/gpu-resource-log.sh")
    ap.add_argument("--arch", required=True, help="an arch for the self-test, e.g. 90")
    ap.add_argument("--allow-stack", action="append", default=[], metavar="KERNEL[@ARCHS]=REASON",
                    help="a kernel (part of its demangled name) whose stack frame is known and harmless, and why, "
                         "on the comma-separated ARCHS only (86,89) or on every arch; its spills still fail")
    ap.add_argument("objects", nargs="*", help="the kernel library's object files")
    args = ap.parse_args()
    allowances = []
    for a in args.allow_stack:
        kernel, sep, reason = a.partition("=")
        kernel, at, archs = kernel.partition("@")
        archs = {f"sm_{x.strip()}" for x in archs.split(",") if x.strip()} if at else None
        if not sep or not kernel or not reason or (at and not archs):
            sys.exit(f"--allow-stack {a!r}: give KERNEL=REASON or KERNEL@ARCHS=REASON")
        allowances.append((kernel, archs, reason))

    self_test(args.nvcc, args.launcher, args.arch)
    records, missing = read_objects(args.objects)
    if missing:
        sys.exit("no resource report for: " + ", ".join(missing) +
                 " (built without scripts/gpu-resource-log.sh as the CUDA compiler launcher?)")
    if not records:
        sys.exit("no CUDA kernel found in the objects given")
    full_names = demangle(sorted({name for name, _ in records}))
    for kernel, archs, reason in allowances:
        matched = [key for key in records if kernel in full_names[key[0]]]
        if not matched:
            sys.exit(f"--allow-stack {kernel}: no such kernel in the objects (a stale allowance)")
        for key in matched:
            if archs is None or key[1] in archs:
                records[key]["stack_allowed"] = reason
    print_table(records)
    bad = [(name, arch, problems_of(rec)) for (name, arch), rec in records.items() if problems_of(rec)]
    names = demangle(sorted({name for name, _, _ in bad}))
    for name, arch, found in sorted(bad):
        print(f"FAIL {names[name]} on {arch}: {'; '.join(found)}")
    if bad:
        sys.exit(1)
    archs = sorted({arch for _, arch in records})
    allowed = sorted({f"{full_names[n]} on {arch}" for (n, arch), rec in records.items()
                      if rec.get("stack") and rec.get("stack_allowed")})
    print(f"{len({n for n, _ in records})} kernels on {', '.join(archs)}: no spills, no local memory"
          + (f" (but the allowed stack frames of {', '.join(allowed)})" if allowed else ""))


if __name__ == "__main__":
    main()
