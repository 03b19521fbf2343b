"""Kernel names as they are now, for the scripts that read results CSVs keyed by kernel:
the table of former names is kernels/former_names.cpp's (the C++ readers resolve them
through current_kernel_name), read from the source tree beside this script, so rows
written before a rename meet today's kernels. Standard library only."""
import re
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "kernels" / "former_names.cpp"
_ENTRY = re.compile(r'^\s*\{"([^"]+)", "([^"]+)"\},$', re.MULTILINE)
_former = None


def former_names(path=TABLE):
    """{former name: name now}; empty where the table is not there (a script copied
    out of the tree), so names read as written."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return {}
    return dict(_ENTRY.findall(text))


def current_kernel_name(name):
    """The name `name` has now: itself unless it is a former name."""
    global _former
    if _former is None:
        _former = former_names()
    return _former.get(name, name)
