"""Readable names of CUDA kernels from their mangled symbols (c++filt), shared by the
scripts and tests that report on compiled kernels."""

import shutil
import subprocess


def demangle(names):
    """{mangled: demangled without its parameter list}; names unchanged without c++filt."""
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    if len(out) != len(names):
        return {n: n for n in names}
    return {n: without_parameters(d) for n, d in zip(names, out)}


def without_parameters(name):
    """The demangled name without its final parameter list: enough to find the kernel
    ('(anonymous namespace)' and template arguments kept)."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i]
    return name
