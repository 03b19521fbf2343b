"""Each CPU kernel variant is one self-registering file named after its kernel.

A .cpp under kernels/cpu/ registers no kernel (shared code) or exactly one, and its
name is the kernel's without backend and instruction set, which its folder gives:
`q4_K.cpu.avx2_r8x2_q8k` lives in `x86/avx2/q4_K_r8x2_q8k.cpp`, `q4_K.cpu.scalar_f32` in
`scalar/q4_K_f32.cpp`. The float files, whose two kernels are one loop, are the one
exception (kernels/README.md, "Files"). Before checking the tree, the checker is run on
a small planted tree with one fault of each kind, which it must report.

    python3 tests/kernel_files_test.py --root .
"""
import argparse
import os
import re
import sys
import tempfile

# Files allowed two kernels: a loop and its four-row form.
TWO_KERNEL_FILES = {"f32.cpp", "f16.cpp", "bf16.cpp"}
ISA_PREFIXES = ("scalar", "avx2", "avx512vnni")
REGISTRATION = re.compile(r"\bQMV_REGISTER_KERNEL\s*\(")
KERNEL_NAME = re.compile(r'"([A-Za-z0-9_]+\.cpu\.[A-Za-z0-9_]+)"')


def without_comments(text):
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def expected_file(kernel):
    """The file name a kernel's registration belongs in, or None for an unknown ISA."""
    weights, _, technique = kernel.split(".", 2)
    for isa in ISA_PREFIXES:
        if technique == isa:
            return weights + ".cpp"
        if technique.startswith(isa + "_"):
            return weights + technique[len(isa):] + ".cpp"
    return None


def problems_in(root):
    found = []
    cpu = os.path.join(root, "kernels", "cpu")
    for folder, _, files in os.walk(cpu):
        for name in sorted(files):
            if not name.endswith(".cpp"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as f:
                code = without_comments(f.read())
            registrations = len(REGISTRATION.findall(code))
            if registrations == 0:
                continue
            allowed = 2 if name in TWO_KERNEL_FILES else 1
            if registrations > allowed:
                found.append(f"{rel}: registers {registrations} kernels, at most {allowed}")
            names = sorted(set(KERNEL_NAME.findall(code)))
            if not names:
                found.append(f"{rel}: registers a kernel but names none")
                continue
            if not any(expected_file(k) == name for k in names):
                wanted = ", ".join(f"{k} -> {expected_file(k)}" for k in names)
                found.append(f"{rel}: named after none of its kernels ({wanted})")
    return found


def planted_tree(tmp):
    def write(rel, text):
        path = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    reg = 'QMV_REGISTER_KERNEL(record("{}", "description"));\n'
    write("kernels/cpu/x86/avx2/q4_K_r8_q8k.cpp", reg.format("q4_K.cpu.avx2_r8_q8k"))  # fine
    write("kernels/cpu/x86/avx2/f16.cpp", reg.format("f16.cpu.avx2") + reg.format("f16.cpu.avx2_x4"))  # fine
    write("kernels/cpu/x86/avx2/shared.cpp", "// QMV_REGISTER_KERNEL(x)\nint helper() { return 1; }\n")  # fine
    write("kernels/cpu/x86/avx2/q4_0_r8_q8_1.cpp",  # two kernels in one file
          reg.format("q4_0.cpu.avx2_r8_q8_1") + reg.format("q4_0.cpu.avx2_r8x2_q8_1"))
    write("kernels/cpu/scalar/q6_K_f32.cpp", reg.format("q6_K.cpu.scalar_batch_f32"))  # misnamed
    return 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the repository root")
    root = parser.parse_args().root

    with tempfile.TemporaryDirectory() as tmp:
        expected = planted_tree(tmp)
        planted = problems_in(tmp)
        if len(planted) != expected:
            print(f"the checker found {len(planted)} of the {expected} planted faults:", *planted, sep="\n  ")
            return 1

    problems = problems_in(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} kernel file(s) break the one-variant-per-file rule (kernels/README.md, \"Files\")")
        return 1
    count = sum(1 for _, _, files in os.walk(os.path.join(root, "kernels", "cpu")) for f in files if f.endswith(".cpp"))
    print(f"{count} files under kernels/cpu: each registers at most one kernel named after it (floats: two)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
