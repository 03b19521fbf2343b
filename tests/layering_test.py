"""The layers point one way: formats <- kernels <- model <- harness <- cli.

Every project #include in a layer's sources must name a file of the same layer or one
below, and every layer's CMake library may link only libraries of the layers below it.
The formats layer holds no instruction-set code (intrinsics, target attributes): that
lives in the instruction-set folders of kernels/cpu/, whose folder picks the compiler
flags. Before checking the tree, the checker is run on a small planted tree with one
fault of each kind, which it must report (so a checker that finds nothing cannot
pass).

    python3 tests/layering_test.py --root .
"""
import argparse
import os
import re
import sys
import tempfile

LAYERS = ["formats", "kernels", "model", "harness", "cli"]
# The libraries of each layer (CMakeLists.txt); qmv_kernels_api is the kernels' interface.
LIBRARY_LAYER = {"qmv_formats": 0, "qmv_kernels_api": 1, "qmv_kernels": 1, "qmv_model": 2, "qmv_model_tools": 2,
                 "qmv_harness": 3, "qmv_cli": 4}
SOURCE_DIRS = ("kernels", "model", "harness")
SOURCE_EXT = (".h", ".hpp", ".cuh", ".cpp", ".cu")


def layer_of(path):
    """The layer index of a repository-relative path, or None outside the layers."""
    path = path.replace(os.sep, "/")
    if path.startswith("kernels/formats/"):
        return 0
    if path.startswith("kernels/"):
        return 1
    if path.startswith("model/"):
        return 2
    if path.startswith("harness/cli/"):
        return 4
    if path.startswith("harness/"):
        return 3
    return None


def upward_includes(root):
    """(file, included file, file's layer, included layer) for every include that points up."""
    found = []
    for top in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                mine = layer_of(rel)
                with open(full, errors="replace") as f:
                    for line in f:
                        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                        if not m:
                            continue
                        inc = m.group(1)
                        beside = os.path.normpath(os.path.join(os.path.dirname(rel), inc)).replace(os.sep, "/")
                        target = beside if os.path.exists(os.path.join(root, beside)) else inc
                        theirs = layer_of(target)
                        if mine is not None and theirs is not None and theirs > mine:
                            found.append((rel, target, LAYERS[mine], LAYERS[theirs]))
    return found


def cmake_commands(text, command):
    """(first argument, the rest) of every `command(...)` in a CMake file."""
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(command + r"\s*\(([^)]*)\)", text):
        args = m.group(1).split()
        if args:
            yield args[0], args[1:]


def upward_links(root):
    """(library, linked library) for every link from a layer's library to a higher layer's."""
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        text = f.read()
    found = []
    for lib, rest in cmake_commands(text, "target_link_libraries"):
        if lib not in LIBRARY_LAYER:
            continue
        for dep in rest:
            if dep in LIBRARY_LAYER and LIBRARY_LAYER[dep] > LIBRARY_LAYER[lib]:
                found.append((lib, dep))
    return found


def misplaced_sources(root):
    """(library, source) for sources listed in a layer's library that belong to another layer."""
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        text = f.read()
    found = []
    for command in ("add_library", "target_sources"):
        for lib, rest in cmake_commands(text, command):
            if lib not in LIBRARY_LAYER:
                continue
            for src in rest:
                layer = layer_of(src)
                if layer is not None and layer != LIBRARY_LAYER[lib]:
                    found.append((lib, src))
    return found


ISA_CODE = re.compile(r"#\s*include\s*<(immintrin|x86intrin|arm_neon)\.h>|__attribute__\s*\(\(\s*target\s*\(")


def isa_code_in_formats(root):
    """Files of the formats layer that hold instruction-set code."""
    found = []
    for dirpath, _, files in os.walk(os.path.join(root, "kernels", "formats")):
        for name in sorted(files):
            if name.endswith(SOURCE_EXT):
                full = os.path.join(dirpath, name)
                with open(full, errors="replace") as f:
                    if ISA_CODE.search(f.read()):
                        found.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return found


def problems(root):
    out = [f"{f} ({a}) includes {t} ({b})" for f, t, a, b in upward_includes(root)]
    out += [f"CMake: {lib} ({LAYERS[LIBRARY_LAYER[lib]]}) links {dep} ({LAYERS[LIBRARY_LAYER[dep]]})"
            for lib, dep in upward_links(root)]
    out += [f"CMake: {lib} ({LAYERS[LIBRARY_LAYER[lib]]}) compiles {src} ({LAYERS[layer_of(src)]})"
            for lib, src in misplaced_sources(root)]
    out += [f"{f} (formats) holds instruction-set code: it belongs in kernels/cpu/<arch>/<isa>/"
            for f in isa_code_in_formats(root)]
    return out


def self_test():
    """A planted tree with one of each fault: the checker must name all four."""
    with tempfile.TemporaryDirectory() as d:
        for rel, text in {
            "kernels/kernel.h": '#include "kernels/formats/formats.h"\n',
            "kernels/formats/formats.h": "\n",
            "kernels/formats/quantize.cpp": "#include <immintrin.h>\n",
            "model/plan.h": '#include "kernels/kernel.h"\n#include "harness/csv.h"\n',
            "harness/csv.h": '#include "model/plan.h"\n',
            "harness/cli/run.cpp": '#include "harness/csv.h"\n',
            "CMakeLists.txt": "add_library(qmv_model STATIC model/plan.cpp harness/csv.cpp)\n"
                              "target_link_libraries(qmv_model PUBLIC qmv_kernels_api qmv_harness)\n",
        }.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        found = problems(d)
        want = ["model/plan.h (model) includes harness/csv.h (harness)",
                "CMake: qmv_model (model) links qmv_harness (harness)",
                "CMake: qmv_model (model) compiles harness/csv.cpp (harness)",
                "kernels/formats/quantize.cpp (formats) holds instruction-set code: it belongs in kernels/cpu/<arch>/<isa>/"]
        if found != want:
            print("layering self-test FAILED: the planted faults were", want, "but the checker found", found)
            return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    if not self_test():
        sys.exit(1)
    found = problems(args.root)
    for p in found:
        print("points up a layer:", p)
    if found:
        print(f"{len(found)} dependencies point up a layer ({' <- '.join(LAYERS)})")
        sys.exit(1)
    print(f"layers point one way ({' <- '.join(LAYERS)}); the self-test's planted faults were all found")


if __name__ == "__main__":
    main()
