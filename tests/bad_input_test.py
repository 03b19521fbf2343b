#!/usr/bin/env python3
"""Replays the bad-input corpus (tests/bad_input/cases.tsv) through the qmvlab CLI.

Bad input must never crash qmvlab, never hang it and never destroy a file. Each case
is one command line with the exit status it must end with and a regex its message must
match. A case fails on:
  - a signal or a hang (killed after --timeout seconds);
  - another exit status than the one expected ("0", "1", "2", or "!0": any failure);
  - for a failure: standard error that is not exactly one non-empty line, or a line the
    regex does not find; for a success: stdout and stderr together that it does not find;
  - a file it may not touch that changed: the committed inputs, the inputs made at start,
    or a file given with {KEEP:NAME} (a copy of files/NAME put in the case's folder
    first, say as the --out a failed run must leave byte for byte), or anything left
    beside such a file (a half-written copy).

cases.tsv: one case a line, "#" comments; three tab-separated fields: the exit status,
the regex, the arguments (shell words). Leading NAME=VALUE words set the environment.
In the arguments:
  {F}          tests/bad_input/files
  {G}          tests/gguf_corpus (the GGUF reader's committed bad files)
  {IN}         inputs made at start: toy.gguf (`make-model --preset toy --mix q4_0`),
               toy_cut.gguf (its first half), fifo (a FIFO no one writes to), dir/ (an
               empty directory), fifo_results/ (a results folder whose peak.csv is a
               FIFO), crlf/NAME (every files/*.csv and *.toml with CRLF line ends)
  {CASE}       the case's own scratch folder, its working directory
  {KEEP:NAME}  {CASE}/keep/NAME, a copy of files/NAME that must not change
  BYTES:TEXT   an argument that need not be UTF-8: TEXT with its bytes %-escaped (%FF)
Every case runs in its own folder under one scratch folder, with stdin from /dev/null
and QMV_TUNING_STORE in its folder, so nothing outside the scratch folder is written.

  bad_input_test.py --qmvlab build/qmvlab [--cases FILE] [--only REGEX] [--show]
--show prints what each case did instead of judging it (for writing new cases).
"""
import argparse
import concurrent.futures
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_cases(path):
    cases = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 3 or not re.fullmatch(r"!0|[0-9]+", fields[0]):
                sys.exit(f"{path}:{number}: expected STATUS<TAB>REGEX<TAB>ARGUMENTS, got {line!r}")
            try:
                re.compile(fields[1])
                words = shlex.split(fields[2])
            except (re.error, ValueError) as e:
                sys.exit(f"{path}:{number}: {e}")
            cases.append({"line": number, "status": fields[0], "regex": fields[1], "words": words, "text": fields[2]})
    return cases


def subcommand(words):
    """The subcommand a case runs: its first word past the environment and the global options."""
    i = 0
    while i < len(words) and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[i]):
        i += 1
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] == "--cpu-features" else 1
    return words[i] if i < len(words) else "(none)"


def digest(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def snapshot(roots):
    """Every regular file under the roots, by path: its hash (FIFOs and folders by kind)."""
    out = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for d in dirnames:
                out[os.path.join(dirpath, d)] = "dir"
            for name in filenames:
                p = os.path.join(dirpath, name)
                out[p] = digest(p) if os.path.isfile(p) and not os.path.islink(p) else "special"
    return out


def make_inputs(qmvlab, files, scratch):
    inputs = os.path.join(scratch, "in")
    os.makedirs(os.path.join(inputs, "dir"))
    os.makedirs(os.path.join(inputs, "crlf"))
    model = os.path.join(inputs, "toy.gguf")
    env = dict(os.environ, QMV_TUNING_STORE=os.path.join(scratch, "tuning.csv"))
    r = subprocess.run([qmvlab, "make-model", "--preset", "toy", "--mix", "q4_0", "--out", model],
                       capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0:
        sys.exit(f"make-model failed ({r.returncode}): {r.stderr.strip()}")
    with open(model, "rb") as f:
        data = f.read()
    with open(os.path.join(inputs, "toy_cut.gguf"), "wb") as f:
        f.write(data[: len(data) // 2])
    os.mkfifo(os.path.join(inputs, "fifo"))
    os.makedirs(os.path.join(inputs, "fifo_results"))
    os.mkfifo(os.path.join(inputs, "fifo_results", "peak.csv"))
    for name in sorted(os.listdir(files)):
        if name.endswith((".csv", ".toml")):
            with open(os.path.join(files, name), "rb") as f:
                text = f.read()
            with open(os.path.join(inputs, "crlf", name), "wb") as f:
                f.write(text.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    return inputs


def run_case(case, qmvlab, paths, scratch, timeout):
    case_dir = os.path.join(scratch, f"case{case['line']}")
    keep_dir = os.path.join(case_dir, "keep")
    os.makedirs(keep_dir)
    keep = {}

    def substitute(word):
        def keep_file(m):
            name = m.group(1)
            dest = os.path.join(keep_dir, name)
            shutil.copyfile(os.path.join(paths["F"], name), dest)
            keep[dest] = digest(dest)
            return dest

        word = re.sub(r"\{KEEP:([^}]+)\}", keep_file, word)
        for key, value in paths.items():
            word = word.replace("{" + key + "}", value)
        return word.replace("{CASE}", case_dir)

    env = dict(os.environ, QMV_TUNING_STORE=os.path.join(case_dir, "tuning.csv"))
    env.pop("QMV_CPU_FEATURES", None)
    words = [substitute(w) for w in case["words"]]
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    # BYTES:TEXT is an argument that need not be UTF-8, its bytes %-escaped (%FF).
    words = [urllib.parse.unquote_to_bytes(w[len("BYTES:"):]) if w.startswith("BYTES:") else os.fsencode(w)
             for w in words]
    keep_listing = sorted(os.listdir(keep_dir))
    started = time.monotonic()
    # In a session of its own, so that a hang is ended with everything it started.
    p = subprocess.Popen([os.fsencode(qmvlab)] + words, cwd=case_dir, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        status = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        status = None
    seconds = time.monotonic() - started
    out = out.decode("utf-8", "replace")
    err = err.decode("utf-8", "replace")

    problems = []
    if status is None:
        problems.append(f"hung: killed after {timeout} s")
    elif status < 0 or status >= 128:
        problems.append(f"killed by a signal (exit status {status})")
    elif case["status"] == "!0" and status == 0 or case["status"] != "!0" and status != int(case["status"]):
        problems.append(f"exit status {status}, expected {case['status']}")
    if status is not None and status != 0:
        lines = err.split("\n")
        if not (len(lines) == 2 and lines[0].strip() and lines[1] == ""):
            problems.append(f"stderr is not one line: {err!r}")
        elif not re.search(case["regex"], lines[0]):
            problems.append(f"the message does not match /{case['regex']}/")
    elif status == 0 and not re.search(case["regex"], out + err):
        problems.append(f"the output does not match /{case['regex']}/")
    for path, before in keep.items():
        if not os.path.isfile(path):
            problems.append(f"{path} is gone")
        elif digest(path) != before:
            problems.append(f"{path} changed")
    if sorted(os.listdir(keep_dir)) != keep_listing:
        problems.append(f"files left beside the kept ones: {sorted(set(os.listdir(keep_dir)) - set(keep_listing))}")
    return {"case": case, "status": status, "err": err, "out": out, "problems": problems, "seconds": seconds,
            "argv": [os.fsdecode(w) for w in words]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qmvlab", required=True)
    ap.add_argument("--cases", default=os.path.join(HERE, "bad_input", "cases.tsv"))
    ap.add_argument("--files", default=os.path.join(HERE, "bad_input", "files"))
    ap.add_argument("--gguf-corpus", default=os.path.join(HERE, "gguf_corpus"))
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", help="run only the cases whose arguments match this regex")
    ap.add_argument("--show", action="store_true", help="print what each case did, judge nothing")
    args = ap.parse_args()

    qmvlab = os.path.abspath(args.qmvlab)
    cases = parse_cases(args.cases)
    if args.only:
        cases = [c for c in cases if re.search(args.only, c["text"])]
    started = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="qmv_bad_input_")
    try:
        paths = {"F": os.path.abspath(args.files), "G": os.path.abspath(args.gguf_corpus)}
        paths["IN"] = make_inputs(qmvlab, paths["F"], scratch)
        guarded = [paths["F"], paths["G"], paths["IN"]]
        before = snapshot(guarded)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda c: run_case(c, qmvlab, paths, scratch, args.timeout), cases))
        changed = sorted(p for p, h in snapshot(guarded).items() if before.get(p) != h)
        changed += sorted(p for p in before if not os.path.lexists(p))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    if args.show:
        for r in results:
            print(f"{r['case']['line']}\t{r['status']}\t{r['seconds']:.2f}s\t{r['case']['text']}\n"
                  f"\tstderr: {r['err'].rstrip()}\n\tstdout: {r['out'].strip()[-200:]!r}")
        return 0
    failed = [r for r in results if r["problems"]]
    for r in failed:
        print(f"FAIL {args.cases}:{r['case']['line']}: qmvlab {shlex.join(r['argv'])}")
        for p in r["problems"]:
            print(f"    {p}")
        print(f"    stderr: {r['err'].rstrip()[:2000]!r}")
    for p in changed:
        print(f"FAIL: {p} changed while the cases ran")
    slowest = max(results, key=lambda r: r["seconds"], default=None)
    commands = sorted({subcommand(c["words"]) for c in cases})
    print(f"{len(results)} case(s), {len(failed)} failed, in {time.monotonic() - started:.1f} s"
          + (f" (slowest {slowest['seconds']:.2f} s, line {slowest['case']['line']})" if slowest else "")
          + f"; subcommands: {' '.join(commands)}")
    return 1 if failed or changed else 0


if __name__ == "__main__":
    sys.exit(main())
