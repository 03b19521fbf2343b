"""What the two llama.cpp comparison tools share: scripts/compare_llamacpp.py (timing,
llama-bench against `qmvlab decode`) and scripts/llamacpp_tokens.py (greedy tokens
through llama-cpp-python against `qmvlab decode`). Standard library only: the timing
tool runs with any python3, the token tool with .venv-llamacpp's.

Each tool sets TOOL to its own name, which prefixes its error messages."""
import math
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The pinned llama.cpp build scripts/install-peers.sh makes (llama-bench, libllama.so).
PEER_DIR = ROOT / ".peers/llama.cpp"

# Exit status: 0 done, 1 a tool failed, 2 bad input, 3 skipped (what is needed is not there).
EXIT_FAILED, EXIT_BAD_INPUT, EXIT_SKIPPED = 1, 2, 3

TOOL = "llamacpp"


def fail(message, code=EXIT_BAD_INPUT):
    """One line (or a message and a failed tool's last lines) to stderr, then exit."""
    print(f"{TOOL}: {message}", file=sys.stderr)
    sys.exit(code)


def progress(message):
    print(message, file=sys.stderr, flush=True)


def median(xs):
    """The median of the numbers in xs (None and NaN left out); NaN when none is left."""
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")


def tail(text, lines=8):
    return "\n".join(text.strip().splitlines()[-lines:])


def run_tool(cmd, what, library_path=None):
    """Runs cmd, its output captured; library_path goes before LD_LIBRARY_PATH for it alone.
    A command that cannot start at all is a failure (exit 1)."""
    env = None
    if library_path:
        env = dict(os.environ, LD_LIBRARY_PATH=":".join(filter(None, [library_path, os.environ.get("LD_LIBRARY_PATH")])))
    try:
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    except OSError as e:
        fail(f"cannot run {what} ({cmd[0]}): {e}", EXIT_FAILED)


def run_checked(cmd, what, library_path=None):
    """run_tool, and a non-zero exit is a failure (exit 1) that shows the command and the
    last lines of its stderr (of its stdout when stderr is empty)."""
    out = run_tool(cmd, what, library_path)
    if out.returncode != 0:
        fail(f"{what} failed (exit {out.returncode}): {shlex.join(map(str, cmd))}\n"
             f"{tail(out.stderr or out.stdout)}", EXIT_FAILED)
    return out


def add_shared_options(ap):
    """The options both tools take with the same meaning."""
    ap.add_argument("--threads", type=int, default=2, help="threads for both engines (default 2)")
    ap.add_argument("--qmvlab", default=str(ROOT / "build/qmvlab"), help="qmvlab executable (default build/qmvlab)")
    ap.add_argument("--plan", default=None,
                    help="passed to qmvlab decode --plan (default: none, qmvlab's default plan)")
