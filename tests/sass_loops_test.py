"""scripts/sass_loops.py: on disassembly shaped like nvdisasm -c output (a row loop
around an inner loop of random length, a divergent-shuffle fallback after EXIT that
jumps back into the inner loop, the BRA-to-itself padding) it finds the inner loop
alone and counts its instructions by mnemonic; bad input is a clear error, no trace."""
import importlib.util
import os
import random
import subprocess
import sys
import tempfile

script = sys.argv[1]
spec = importlib.util.spec_from_file_location("sass_loops", script)
sass_loops = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sass_loops)

rng = random.Random()
failures = []


def check(what, ok):
    if not ok:
        failures.append(what)


def function_text(name, inner_body):
    """A kernel: set-up, a row loop whose body holds the inner loop, EXIT, a fallback
    block that jumps back into the inner loop, and the padding."""
    lines = [f"        .text.{name}:"]
    address = 0

    def emit(text):
        nonlocal address
        lines.append(f"        /*{address:04x}*/                   {text} ;")
        address += 0x10

    emit("S2R R0, SR_TID.X")
    lines.append(".L_x_0:")
    emit("IMAD R2, R0, 0xd2, RZ")
    lines.append(".L_x_1:")
    for i, text in enumerate(inner_body):
        if i == len(inner_body) // 2:
            lines.append(".L_x_5:")  # where the fallback rejoins
        emit(text)
    emit("@!P1 BRA `(.L_x_1)")
    emit("STG.E desc[UR4][R2.64], R5")
    emit("@!P0 BRA `(.L_x_0)")
    emit("EXIT")
    lines.append(".L_x_6:")
    emit("SHFL.IDX PT, R9, R8, R7, 0x1f")
    emit("BRA `(.L_x_5)")
    lines.append(".L_x_7:")
    emit("BRA `(.L_x_7)")
    return "\n".join(lines)


mnemonics = ["LDG.E.EF.U16.CONSTANT R4, desc[UR4][R2.64+0x2]", "@P2 LDG.E.CONSTANT R6, desc[UR4][R8.64]",
             "IDP.4A.S8.S8 R5, R4, R6, R5", "LOP3.LUT R4, R4, 0xf0f0f0f, RZ, 0xc0, !PT", "HADD2.F32 R7, -RZ, R7.H0_H0",
             "FFMA R10, R7, R5, R10"]
inner = [rng.choice(mnemonics) for _ in range(rng.randint(20, 60))]
inner.insert(len(inner) // 3, "BRA.DIV UR6, `(.L_x_6)")
sass = "\t.target\tsm_90\n" + function_text("_Z6kernelPKhPf", inner) + "\n" + function_text("_Z5otherv", inner[:9])

functions = sass_loops.parse_functions(sass)
check(f"two functions parsed, got {list(functions)}", list(functions) == ["_Z6kernelPKhPf", "_Z5otherv"])
instructions, labels = functions["_Z6kernelPKhPf"]
loops = sass_loops.inner_loops(instructions, labels)
check(f"one inner loop (not the row loop, the fallback's jump back or the padding), got {len(loops)}",
      len(loops) == 1)
if loops:
    start, end, body = loops[0]
    check(f"inner loop length {len(body)}, want {len(inner) + 1}", len(body) == len(inner) + 1)
    mix = dict(part.split(":") for part in sass_loops.describe(body, top=20).split())
    for op in ("LDG", "IDP", "LOP3", "HADD2", "FFMA"):
        want = sum(1 for t in inner if sass_loops.opcode(t) == op)
        check(f"{op} counted {mix.get(op, '0')}, want {want}", int(mix.get(op, 0)) == want)
    check("the predicated branch is counted as BRA", int(mix.get("BRA", 0)) == 2)
check("opcode of a predicated load", sass_loops.opcode("@!P1 LDG.E.U16 R2, desc[UR4][R4.64]") == "LDG")
check("parameters dropped, anonymous namespace kept",
      sass_loops.cuda_names.without_parameters("a::(anonymous namespace)::k<b::C>(const int*, float*)") ==
      "a::(anonymous namespace)::k<b::C>")

# Bad input: a build folder without compile_commands.json, an arch that is not digits.
with tempfile.TemporaryDirectory() as empty:
    run = subprocess.run([sys.executable, script, "--build", empty, "kernels/cuda/x.cu"], capture_output=True, text=True)
    check(f"missing build: exit {run.returncode}, stderr {run.stderr!r}",
          run.returncode != 0 and "compile_commands.json" in run.stderr and "Traceback" not in run.stderr)
    run = subprocess.run([sys.executable, script, "--arch", "sm_90", "x.cu"], capture_output=True, text=True)
    check(f"bad --arch: exit {run.returncode}, stderr {run.stderr!r}",
          run.returncode != 0 and "--arch" in run.stderr and "Traceback" not in run.stderr)

for f in failures:
    print("FAIL:", f)
print(f"sass_loops: {len(failures)} failure(s), inner body of {len(inner)} instructions")
sys.exit(1 if failures else 0)
