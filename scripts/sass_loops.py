#!/usr/bin/env python3
"""The machine code of CUDA kernels' loops, counted: compiles each given .cu file for
one architecture with the flags the build uses (from its compile_commands.json),
disassembles it with nvdisasm and prints, per kernel, every loop that holds no other
loop (the inner loops, where a matvec spends its time) with its instruction count and
mix. No GPU is needed, so a kernel's instructions per super-block can be compared
before it ever runs.

    scripts/sass_loops.py kernels/cuda/q6_K_halfwarp_dp4a_q8_1.cu kernels/cuda/q6_K_quarterwarp_dp4a_q8_1.cu
    scripts/sass_loops.py --arch 80 --build build/gpu kernels/cuda/q4_K_halfwarp_dp4a_q8_1.cu

nvdisasm ships with the full CUDA toolkit; where the toolkit has only nvcc and ptxas,
`pip install nvidia-cuda-nvdisasm` provides it (found on PATH, in the CUDA bin folder or
in that package; --nvdisasm names it).

A loop is a backward branch to a label; its body is every instruction between the two,
so the divergent-shuffle fallbacks that ptxas places after EXIT are not counted (nor
their jumps back into the loop, which span an EXIT). The
counts are static: instructions in the loop body, not instructions executed.
"""

import argparse
import collections
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cuda_names  # noqa: E402

INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*$")
LABEL = re.compile(r"^(\.L_x_\d+):")
FUNCTION = re.compile(r"^\s*\.text\.(\S+):")
BRANCH = re.compile(r"\bBRA\s+`\((\.L_x_\d+)\)")
PREDICATE = re.compile(r"^@!?U?P[T\d]+\s+")


def parse_functions(sass):
    """{function: (instructions [(address, text)], labels {label: address})} of nvdisasm -c output."""
    functions = {}
    name = None
    pending = []
    for line in sass.splitlines():
        if m := FUNCTION.match(line):
            name = m.group(1)
            functions[name] = ([], {})
            pending = []
            continue
        if name is None:
            continue
        if m := LABEL.match(line):
            pending.append(m.group(1))
            continue
        if m := INSTRUCTION.match(line):
            address = int(m.group(1), 16)
            functions[name][0].append((address, m.group(2)))
            for label in pending:
                functions[name][1][label] = address
            pending = []
    return functions


def opcode(text):
    """The mnemonic without predicate or modifiers: '@!P1 LDG.E.U16 R2, ...' -> 'LDG'."""
    return PREDICATE.sub("", text).split()[0].split(".")[0]


def inner_loops(instructions, labels):
    """[(start, end, body)] of the loops that contain no other loop, in address order."""
    loops = []
    for address, text in instructions:
        m = BRANCH.search(text)
        if not m or "BRA.DIV" in text:
            continue
        start = labels.get(m.group(1))
        if start is None or start > address:
            continue
        # A jump back from the fallback code ptxas places after EXIT (a divergent
        # shuffle's slow path returning into the loop) spans the EXIT: not a loop.
        if any(start <= a <= address and opcode(t) == "EXIT" for a, t in instructions):
            continue
        if start == address:  # the BRA-to-itself that pads the end of a function
            continue
        loops.append((start, address))
    inner = [(s, e) for s, e in loops if not any((s, e) != (s2, e2) and s <= s2 and e2 <= e for s2, e2 in loops)]
    return [(s, e, [t for a, t in instructions if s <= a <= e]) for s, e in sorted(set(inner))]


def describe(body, top=12):
    mix = collections.Counter(opcode(t) for t in body)
    return " ".join(f"{op}:{n}" for op, n in mix.most_common(top))


def compile_command(build, source):
    """The build's nvcc command for `source`, as an argument list run from its directory."""
    path = os.path.join(build, "compile_commands.json")
    try:
        with open(path) as f:
            entries = json.load(f)
    except OSError as e:
        sys.exit(f"sass_loops: cannot read {path} ({e.strerror}); configure a CUDA build there first "
                 "(scripts/build.sh with QMV_CUDA=on)")
    want = os.path.realpath(source)
    for e in entries:
        if os.path.realpath(os.path.join(e["directory"], e["file"])) == want:
            args = shlex.split(e["command"]) if "command" in e else e["arguments"]
            return args, e["directory"]
    sys.exit(f"sass_loops: {source} is not compiled by the build in {build} (not in compile_commands.json)")


def cubin_args(args, arch, out):
    """The compile command turned into one that writes a cubin for sm_<arch>."""
    kept = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-c", "-o"):
            skip = a == "-o"
            continue
        if a.startswith("--generate-code") or a.startswith("-gencode") or a.startswith("--ptxas-options"):
            continue
        kept.append(a)
    return kept + [f"-arch=sm_{arch}", "-cubin", "-o", out]


def find_nvdisasm(given, nvcc):
    candidates = [given] if given else []
    candidates += [shutil.which("nvdisasm"), os.path.join(os.path.dirname(nvcc), "nvdisasm")]
    try:
        import nvidia  # the nvidia-cuda-nvdisasm wheel's namespace package
        for root in nvidia.__path__:
            for sub in sorted(os.listdir(root)):
                candidates.append(os.path.join(root, sub, "bin", "nvdisasm"))
    except ImportError:
        pass
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit("sass_loops: nvdisasm not found (not on PATH, not beside nvcc); `pip install nvidia-cuda-nvdisasm` "
             "provides it, or pass --nvdisasm")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", help="CUDA sources of the build (kernels/cuda/*.cu)")
    ap.add_argument("--build", default="build/gpu", help="CUDA build folder with compile_commands.json (build/gpu)")
    ap.add_argument("--arch", default="90", help="compute capability to compile for, digits only (90)")
    ap.add_argument("--nvdisasm", help="the nvdisasm to use")
    ap.add_argument("--sass", action="store_true", help="also print each inner loop's instructions")
    args = ap.parse_args(argv)
    if not args.arch.isdigit():
        ap.error(f"--arch takes digits, as in 90 or 80, not {args.arch!r}")

    nvdisasm = None
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        for source in args.sources:
            command, directory = compile_command(args.build, source)
            nvdisasm = nvdisasm or find_nvdisasm(args.nvdisasm, command[0])
            cubin = os.path.join(tmp, "kernel.cubin")
            built = subprocess.run(cubin_args(command, args.arch, cubin), cwd=directory, capture_output=True, text=True)
            if built.returncode != 0:
                print(f"{source}: nvcc failed:\n{built.stderr.strip()}", file=sys.stderr)
                status = 1
                continue
            sass = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True)
            if sass.returncode != 0:
                print(f"{source}: nvdisasm failed:\n{sass.stderr.strip()}", file=sys.stderr)
                status = 1
                continue
            print(f"{source} (sm_{args.arch})")
            functions = parse_functions(sass.stdout)
            names = cuda_names.demangle(list(functions))
            for function, (instructions, labels) in functions.items():
                loops = inner_loops(instructions, labels)
                print(f"  {names[function]}: {len(instructions)} instructions, {len(loops)} inner loop(s)")
                for start, end, body in loops:
                    print(f"    loop {start:04x}-{end:04x}: {len(body)} instructions  {describe(body)}")
                    if args.sass:
                        for text in body:
                            print(f"      {text}")
    return status


if __name__ == "__main__":
    sys.exit(main())
