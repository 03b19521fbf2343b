#!/usr/bin/env python3
"""An experiment swept across a Slurm cluster: one job array per target (a partition or
a node feature naming a machine type), each array task running one shard of the
experiment with `qmvlab sweep --shard I/N --resume` into results/<target>/, and a job
per target, after its array, that merges the target's shards and writes its report.

    scripts/slurm_sweep.py experiments/default.toml --partition epyc --partition xeon
    scripts/slurm_sweep.py experiments/default.toml --partition gpu --constraint a100 --constraint h100 \\
        --gpus-per-task 1 --time 2:00:00 --account lab
    scripts/slurm_sweep.py experiments/default.toml --partition epyc --partition xeon --status
    scripts/slurm_sweep.py experiments/default.toml --partition epyc --dry-run -- --peak-reps 3

Targets: each --partition is one target, named after it, unless --constraint is given:
then each --constraint is one target (in the one --partition, when given). NAME=VALUE
names a target whose partition or constraint cannot name a folder
(`--constraint a100ib='a100&ib'`). Arguments after `--` go to every `qmvlab sweep`.

Per target, under results/<target>/ (--results):
  EXP.shard-I-of-N.csv      what array task I wrote (rows carry slurm_job_id,
                            slurm_array_task_id and slurm_node, and the node's machine)
  EXP.csv, EXP.report.txt   the merged shards and `qmvlab report` of them (the merge job)
  slurm/                    the batch scripts, the job ids submitted (EXP.jobs), each
                            task's log and the points its node expanded for its shard
                            (EXP.shard-I-of-N.points: `qmvlab sweep --dry-run`)

Submitting again runs only what is missing: a task whose shard CSV already holds every
point of its .points file is not submitted, and the others resume their CSV, so a task
that was killed, preempted or out of time costs only its own points. A target with jobs
still queued or running is refused (two tasks must not append to one CSV). --status
counts, per target, the points done, running (in a running task, not yet in its CSV),
failed (missing from a task that ended: a re-submission runs them) and waiting (tasks not
started), from squeue, sacct (scontrol where accounting is off) and the CSVs.

Array tasks ask for whole nodes (--exclusive) unless --shared: tasks sharing a node
share its memory bandwidth, and every timing would read low. The repository, the
qmvlab binary and --results must be on a file system the nodes see at the same path.

Standard library only: login nodes rarely have the project's .venv. Exit status: 0 done,
1 a Slurm command failed, 2 bad input (one line on stderr).
"""
import argparse
import csv
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
FEATURE_RE = re.compile(r"[A-Za-z0-9_.-]+")
LIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
               "STOPPED", "SIGNALING", "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
# Tasks in these states are at work: their missing points are running, not lost.
WORKING_STATES = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"}


class UsageError(Exception):
    pass


class SlurmError(Exception):
    pass


def fail(msg, code=2):
    print(f"slurm_sweep.py: {msg}", file=sys.stderr)
    sys.exit(code)


def run(cmd, what, check=True):
    """Runs a command; with check, a failure raises SlurmError with its last line of stderr."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise SlurmError(f"{cmd[0]} not found")
    if check and p.returncode != 0:
        last = (p.stderr.strip() or p.stdout.strip() or f"exit status {p.returncode}").splitlines()[-1]
        raise SlurmError(f"{what}: {last}")
    return p


# ---------------------------------------------------------------------------------------
# Targets and the experiment


class Target:
    def __init__(self, name, partition, constraint):
        self.name, self.partition, self.constraint = name, partition, constraint

    def describe(self):
        parts = [f"partition {self.partition}" if self.partition else "the default partition"]
        if self.constraint:
            parts.append(f"constraint {self.constraint}")
        return ", ".join(parts)


def split_named(spec, option):
    name, sep, value = spec.partition("=")
    if not sep:
        name, value = spec, spec
    if not value:
        raise UsageError(f"{option} '{spec}': empty value")
    if not NAME_RE.match(name):
        raise UsageError(f"{option} '{spec}': '{name}' cannot name a results folder (letters, digits, '.', '_', "
                         f"'-'); name it: {option} NAME={value}")
    return name, value


def targets_from(args):
    partitions = [split_named(p, "--partition") for p in args.partition]
    constraints = [split_named(c, "--constraint") for c in args.constraint]
    if constraints:
        if len(partitions) > 1:
            raise UsageError("several --partition with --constraint: the constraints are the targets, in at most "
                             "one partition")
        partition = partitions[0][1] if partitions else ""
        targets = [Target(n, partition, c) for n, c in constraints]
    elif partitions:
        targets = [Target(n, p, "") for n, p in partitions]
    else:
        raise UsageError("no target: give --partition P (each one a target) or --constraint C")
    names = [t.name for t in targets]
    for n in names:
        if names.count(n) > 1:
            raise UsageError(f"target '{n}' given twice")
    return targets


def experiment_name(qmvlab, experiment):
    """The experiment's name, from `qmvlab sweep --dry-run` (which also checks the file)."""
    p = subprocess.run([str(qmvlab), "sweep", str(experiment), "--dry-run", "--out", os.devnull],
                       capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip() or p.stdout.strip() or f"exit status {p.returncode}").splitlines()[-1]
        raise UsageError(last.removeprefix("qmvlab: "))
    m = re.match(r"experiment (\S+) \(", p.stdout)
    if not m:
        raise SlurmError(f"{qmvlab}: unexpected `sweep --dry-run` output: {p.stdout.splitlines()[:1]}")
    return m.group(1)


def check_targets(targets):
    """Every partition and every plain feature named must exist on the cluster."""
    partitions = set(run(["sinfo", "-h", "-a", "-o", "%R"], "sinfo").stdout.split())
    features = set()
    for line in run(["sinfo", "-h", "-o", "%f"], "sinfo").stdout.split():
        features.update(f for f in line.split(",") if f and f != "(null)")
    for t in targets:
        if t.partition and t.partition not in partitions:
            raise UsageError(f"target {t.name}: no partition '{t.partition}' on this cluster (sinfo lists: "
                             f"{', '.join(sorted(partitions)) or 'none'})")
        for word in FEATURE_RE.findall(t.constraint):
            if word not in features and not word.isdigit():
                raise UsageError(f"target {t.name}: no node has the feature '{word}' (sinfo lists: "
                                 f"{', '.join(sorted(features)) or 'none'})")


# ---------------------------------------------------------------------------------------
# The files of one target


class Files:
    def __init__(self, results, target, exp):
        self.dir = results / target.name
        self.slurm = self.dir / "slurm"
        self.exp = exp

    def shard_csv(self, i, n):
        return self.dir / f"{self.exp}.shard-{i}-of-{n}.csv"

    def points(self, i, n):
        return self.slurm / f"{self.exp}.shard-{i}-of-{n}.points"

    def merged(self):
        return self.dir / f"{self.exp}.csv"

    def report(self):
        return self.dir / f"{self.exp}.report.txt"

    def jobs(self):
        return self.slurm / f"{self.exp}.jobs"

    def shard_counts(self):
        """The N of the shard CSVs already here."""
        pattern = re.compile(re.escape(self.exp) + r"\.shard-\d+-of-(\d+)\.csv$")
        return {int(m.group(1)) for f in self.dir.glob(f"{self.exp}.shard-*.csv") if (m := pattern.match(f.name))}

    def last_jobs(self):
        """(array job id or None, its task count, merge job id or None) of the last submission."""
        array, tasks, merge = None, 0, None
        if self.jobs().exists():
            for line in self.jobs().read_text().splitlines():
                f = line.split()
                if len(f) >= 3 and f[0] == "array":
                    array, tasks, merge = f[1], int(f[2]), None
                elif len(f) >= 2 and f[0] == "merge":
                    merge = f[1]
        return array, tasks, merge


def read_keys(path):
    """Point keys and statuses of a sweep CSV, and whether its last line is cut short."""
    if not path.exists():
        return {}, False
    text = path.read_text()
    cut = bool(text) and not text.endswith("\n")
    if cut:
        text = text[: text.rfind("\n") + 1]
    reader = csv.DictReader(text.splitlines())
    if reader.fieldnames and not {"kernel", "rows", "cols", "threads", "cache", "status"} <= set(reader.fieldnames):
        raise UsageError(f"{path}: not a sweep CSV (no kernel, rows, cols, threads, cache or status column)")
    rows = {}
    for r in reader:
        rows[f"{r['kernel']}|{r['rows']}x{r['cols']}|{r['threads']}|{r['cache']}"] = r["status"]
    return rows, cut


def read_points(path):
    """The point keys a task's node listed for its shard (None: the task never started)."""
    if not path.exists():
        return None
    return {line.split()[0] for line in path.read_text().splitlines() if line.startswith("  ") and line.strip()}


def shard_complete(files, i, n):
    points = read_points(files.points(i, n))
    if points is None:
        return False
    rows, cut = read_keys(files.shard_csv(i, n))
    return not cut and points <= rows.keys()


# ---------------------------------------------------------------------------------------
# Batch scripts


def sbatch_lines(args, target, extra):
    lines = []
    if target.partition:
        lines.append(f"--partition={target.partition}")
    if target.constraint:
        lines.append(f"--constraint={target.constraint}")
    if args.account:
        lines.append(f"--account={args.account}")
    return lines + extra


def array_script(args, target, files, exp_path, tasks, indices):
    n = tasks
    opts = [f"--job-name=qmv-{files.exp}-{target.name}", f"--array={indices}", "--ntasks=1"]
    extra = []
    if args.time:
        extra.append(f"--time={args.time}")
    if args.gpus_per_task:
        extra.append(f"--gpus-per-task={args.gpus_per_task}")
    if args.cpus_per_task:
        extra.append(f"--cpus-per-task={args.cpus_per_task}")
    if not args.shared:
        extra.append("--exclusive")
    extra.append(f"--output={files.slurm}/{files.exp}.shard-%a-of-{n}.%A.log")
    q = shlex.quote
    sweep_args = "".join(" " + q(a) for a in args.sweep_args)
    sweep = f"{q(str(args.qmvlab))} sweep {q(str(exp_path))} --shard \"$shard/{n}\" --out \"$out\"{sweep_args}"
    header = "\n".join(f"#SBATCH {o}" for o in opts + sbatch_lines(args, target, extra))
    return f"""#!/bin/bash
{header}
# Written by scripts/slurm_sweep.py: one shard of experiment {files.exp} per array task, on
# target {target.name} ({target.describe()}).
set -euo pipefail
cd {q(str(Path.cwd()))}
shard="$SLURM_ARRAY_TASK_ID"
out={q(str(files.dir))}/{files.exp}.shard-"$shard"-of-{n}.csv
points={q(str(files.slurm))}/{files.exp}.shard-"$shard"-of-{n}.points
# The shard's points as this node expands them: what --status counts the CSV against.
{sweep} --dry-run > "$points.tmp"
mv "$points.tmp" "$points"
exec {sweep} --resume
"""


def merge_script(args, target, files, tasks):
    q = shlex.quote
    opts = [f"--job-name=qmv-{files.exp}-{target.name}-merge", f"--time={args.merge_time}",
            f"--output={files.slurm}/{files.exp}.merge.%j.log"]
    header = "\n".join(f"#SBATCH {o}" for o in opts + sbatch_lines(args, target, []))
    qmvlab = q(str(args.qmvlab))
    return f"""#!/bin/bash
{header}
# Written by scripts/slurm_sweep.py: joins the shards of experiment {files.exp} on target
# {target.name} into {files.merged().name}, and its report.
set -euo pipefail
cd {q(str(Path.cwd()))}
shopt -s nullglob
shards=({q(str(files.dir))}/{files.exp}.shard-*-of-{tasks}.csv)
# A task killed mid-row leaves a last line cut short: merge its complete rows (the
# shard itself keeps the line for --resume to drop).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
inputs=()
for f in "${{shards[@]}}"; do
  [[ -s "$f" ]] || continue  # killed before its header
  if [[ $(tail -c 1 "$f" | wc -l) -eq 0 ]]; then
    sed '$d' "$f" > "$tmp/$(basename "$f")"
    inputs+=("$tmp/$(basename "$f")")
  else
    inputs+=("$f")
  fi
done
if (( ${{#inputs[@]}} == 0 )); then
  echo "no shard CSVs of {files.exp} in {files.dir}: no task wrote any" >&2
  exit 1
fi
{qmvlab} merge {q(str(files.merged()))} "${{inputs[@]}}"
{qmvlab} report {q(str(files.merged()))} > {q(str(files.report()))}
echo "wrote {files.report()}"
"""


def sbatch(script_path, dependency=None):
    cmd = ["sbatch", "--parsable"]
    if dependency:
        cmd += [f"--dependency=afterany:{dependency}", "--kill-on-invalid-dep=yes"]
    out = run(cmd + [str(script_path)], f"sbatch {script_path}").stdout.strip()
    return out.split(";")[0]


def index_ranges(indices):
    """[1, 2, 3, 5] -> "1-3,5" (sbatch --array)."""
    out, start = [], None
    for i, x in enumerate(indices):
        if start is None:
            start = x
        if i + 1 == len(indices) or indices[i + 1] != x + 1:
            out.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ",".join(out)


# ---------------------------------------------------------------------------------------
# Task states


def live_tasks(job_ids):
    """{(job id, task index or None): state} of the given jobs still in squeue."""
    if not job_ids:
        return {}
    user = pwd.getpwuid(os.getuid()).pw_name
    out = run(["squeue", "-h", "-r", "-u", user, "-o", "%F|%K|%T"], "squeue").stdout
    states = {}
    for line in out.splitlines():
        f = line.strip().split("|")
        if len(f) == 3 and f[0] in job_ids:
            states[(f[0], int(f[1]) if f[1].isdigit() else None)] = f[2]
    return states


def ended_tasks(array_id):
    """{task index: final state} of an array, from sacct, or scontrol where accounting is off."""
    states = {}
    p = run(["sacct", "-n", "-P", "-X", "-j", array_id, "-o", "JobID,State"], "sacct", check=False)
    if p.returncode == 0 and p.stdout.strip():
        for line in p.stdout.splitlines():
            job, _, state = line.partition("|")
            m = re.match(rf"^{re.escape(array_id)}_(\d+)$", job.strip())
            if m:
                states[int(m.group(1))] = state.split()[0] if state.split() else state
        if states:
            return states
    p = run(["scontrol", "-o", "show", "job", array_id], "scontrol", check=False)
    for line in p.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("ArrayJobId") == array_id and fields.get("ArrayTaskId", "").isdigit():
            states[int(fields["ArrayTaskId"])] = fields.get("JobState", "UNKNOWN")
    return states


def busy_jobs(files):
    """The last submission's jobs of a target still queued or running."""
    array, _, merge = files.last_jobs()
    ids = {j for j in (array, merge) if j}
    return sorted({job for (job, _), state in live_tasks(ids).items() if state in LIVE_STATES})


# ---------------------------------------------------------------------------------------
# Submit and status


def submit(args, targets, exp, results):
    # Every target is checked before any job is submitted.
    plans = []
    for t in targets:
        files = Files(results, t, exp)
        counts = files.shard_counts()
        tasks = args.tasks or (max(counts) if len(counts) == 1 else 4)
        if counts - {tasks}:
            raise UsageError(f"target {t.name}: {files.dir} holds shards of {exp} split {sorted(counts)} ways, not "
                             f"{tasks}: pass --tasks {max(counts)}, or move them away")
        if not args.dry_run:
            busy = busy_jobs(files)
            if busy:
                raise UsageError(f"target {t.name}: job(s) {', '.join(busy)} of the last submission still queued or "
                                 f"running; wait for them, or scancel them, then submit again")
        todo = [i for i in range(1, tasks + 1) if not shard_complete(files, i, tasks)]
        shard_rows = set()
        for i in range(1, tasks + 1):
            shard_rows |= read_keys(files.shard_csv(i, tasks))[0].keys()
        merged = not todo and read_keys(files.merged())[0].keys() == shard_rows and files.report().exists()
        plans.append((t, files, tasks, todo, merged, len(shard_rows)))

    for t, files, tasks, todo, merged, points in plans:
        if merged:
            print(f"{t.name}: all {points} point(s) of {exp} are in {files.merged()}: nothing to submit")
            continue
        scripts = []
        if todo:
            scripts.append(("array", array_script(args, t, files, args.experiment, tasks, index_ranges(todo))))
        scripts.append(("merge", merge_script(args, t, files, tasks)))
        if args.dry_run:
            for kind, text in scripts:
                print(f"# {t.name}: {kind} job ({files.slurm}/{exp}.{kind}.sh)\n{text}")
            continue
        files.slurm.mkdir(parents=True, exist_ok=True)
        ids = {}
        for kind, text in scripts:
            path = files.slurm / f"{exp}.{kind}.sh"
            path.write_text(text)
            ids[kind] = sbatch(path, ids.get("array"))
            with files.jobs().open("a") as f:  # at once: --status and the next submission read it
                f.write(f"array {ids[kind]} {tasks} {index_ranges(todo)}\n" if kind == "array"
                        else f"merge {ids[kind]}\n")
        what = (f"array job {ids['array']} (task(s) {index_ranges(todo)} of {tasks})" if todo
                else "no task (every shard is complete)")
        print(f"{t.name}: {what}, then merge job {ids['merge']} -> {files.merged()}")


def status(targets, exp, results):
    for t in targets:
        files = Files(results, t, exp)
        array, tasks, merge = files.last_jobs()
        print(f"{t.name} ({t.describe()}), results in {files.dir}/")
        if array is None and merge is None:
            counts = files.shard_counts()
            if not counts:
                print(f"  nothing submitted: no {files.jobs()}")
                continue
            tasks = max(counts)
        live = live_tasks({j for j in (array, merge) if j})
        ended = ended_tasks(array) if array else {}
        done = running = lost = check_failed = 0
        waiting, lost_in = [], []
        for i in range(1, tasks + 1):
            state = live.get((array, i)) or ended.get(i) or ""
            points = read_points(files.points(i, tasks))
            rows, _ = read_keys(files.shard_csv(i, tasks))
            done += len(rows)
            check_failed += sum(1 for s in rows.values() if s == "failed")
            if points is None:
                if state in LIVE_STATES:
                    waiting.append(str(i))
                else:
                    lost_in.append(f"task {i} {state or 'ended'} before it started its sweep")
                continue
            missing = len(points - rows.keys())
            if state in WORKING_STATES:
                running += missing
            elif state in LIVE_STATES:
                waiting.append(str(i))
            elif missing:
                lost += missing
                lost_in.append(f"task {i} {state or 'ended'}")
        print(f"  points: {done} done, {running} running, {lost} failed, tasks waiting: {len(waiting)}"
              + (f" ({', '.join(waiting)})" if waiting else ""))
        if check_failed:
            print(f"  {check_failed} point(s) done with status failed (their check or run failed: the CSV's "
                  f"reason column says why)")
        if lost_in:
            print(f"  failed: {'; '.join(lost_in)}; submitting again runs their missing points")
        merged, _ = read_keys(files.merged())
        merge_state = live.get((merge, None)) if merge else None
        print(f"  merged: {files.merged()}: "
              + (f"{len(merged)} point(s)" if files.merged().exists() else "not yet")
              + (f" (merge job {merge} {merge_state})" if merge_state else ""))


def main():
    argv = sys.argv[1:]
    sweep_args = []
    if "--" in argv:
        at = argv.index("--")
        argv, sweep_args = argv[:at], argv[at + 1:]
    ap = argparse.ArgumentParser(
        prog="slurm_sweep.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after `--` are passed to every `qmvlab sweep` (e.g. -- --peak-reps 3). "
               "experiments/README.md has the details.")
    ap.add_argument("experiment", help="experiment TOML (experiments/*.toml)")
    ap.add_argument("--partition", action="append", default=[], metavar="[NAME=]PARTITION",
                    help="a target: its partition (repeat for more targets; with --constraint, the partition of "
                         "every constraint)")
    ap.add_argument("--constraint", action="append", default=[], metavar="[NAME=]FEATURES",
                    help="a target: nodes with these features (sbatch --constraint); repeat for more targets")
    ap.add_argument("--tasks", type=int, metavar="N",
                    help="array tasks (shards) per target (default: as the shard CSVs there already are, else 4)")
    ap.add_argument("--gpus-per-task", metavar="G", help="sbatch --gpus-per-task, e.g. 1 or a100:1")
    ap.add_argument("--cpus-per-task", type=int, metavar="C", help="sbatch --cpus-per-task")
    ap.add_argument("--time", metavar="LIMIT", help="time limit of each array task (sbatch --time, e.g. 1:00:00)")
    ap.add_argument("--merge-time", default="0:15:00", metavar="LIMIT",
                    help="time limit of the merge job (default %(default)s)")
    ap.add_argument("--account", help="sbatch --account")
    ap.add_argument("--shared", action="store_true",
                    help="let array tasks share nodes (the default asks for whole nodes: timings of tasks that share "
                         "a node's memory bandwidth read low)")
    ap.add_argument("--results", default=str(REPO / "results"),
                    help="results folder; each target writes RESULTS/<target>/ (default %(default)s)")
    ap.add_argument("--qmvlab", default=str(REPO / "build" / "qmvlab"),
                    help="the qmvlab the tasks run, at a path the nodes see (default %(default)s)")
    ap.add_argument("--dry-run", action="store_true", help="print the batch scripts, submit nothing")
    ap.add_argument("--status", action="store_true",
                    help="per target, the points done, running and failed, and the tasks waiting")
    args = ap.parse_args(argv)
    args.sweep_args = sweep_args
    try:
        if args.status and args.dry_run:
            raise UsageError("--status and --dry-run: choose one")
        if args.tasks is not None and not 1 <= args.tasks <= 10000:
            raise UsageError(f"--tasks {args.tasks}: expected 1 to 10000")
        targets = targets_from(args)
        args.qmvlab = Path(args.qmvlab).resolve()
        if not os.access(args.qmvlab, os.X_OK):
            raise UsageError(f"{args.qmvlab}: no qmvlab there (scripts/build.sh builds it; or pass --qmvlab)")
        args.experiment = Path(args.experiment).resolve()
        exp = experiment_name(args.qmvlab, args.experiment)
        needed = ["squeue", "sinfo", "scontrol"] if args.status else [] if args.dry_run else ["sbatch", "squeue", "sinfo"]
        for tool in needed:
            if not shutil.which(tool):
                raise UsageError(f"{tool} not found: this needs a Slurm client on the PATH (Debian: apt-get install "
                                 f"slurm-client)")
        if not args.status and (shutil.which("sinfo") or not args.dry_run):
            try:
                check_targets(targets)
            except SlurmError as e:
                # A dry run is useful away from the cluster: its targets go unchecked there.
                if not args.dry_run:
                    raise
                print(f"slurm_sweep.py: targets not checked ({e})", file=sys.stderr)
        results = Path(args.results).resolve()
        if args.status:
            status(targets, exp, results)
        else:
            submit(args, targets, exp, results)
    except UsageError as e:
        fail(str(e))
    except SlurmError as e:
        fail(str(e), 1)


if __name__ == "__main__":
    main()
