#!/usr/bin/env python3
"""scripts/slurm_sweep.py, two ways.

`args`: no cluster needed. --help; --dry-run prints one array and one merge script per
target and writes nothing; bad input (no target, a constraint that cannot name a folder,
a broken experiment, no sbatch on the PATH, shards of another split already there) is
one line on stderr and exit 2.

`cluster`: a real Slurm (Debian's slurm-wlm and munge) started for the test alone: a
munged on its own socket and key, a slurmctld and a slurmd on loopback ports of their
own, one node, two partitions (alpha, beta) standing for two machine types. The
experiment (tests/data/slurm_tiny.toml) is swept across both, two tasks each; one task
of beta is stopped after its first rows, --status must count its missing points as
running, then it is killed. The task's points must really be missing (its shard CSV
short, the merged CSV short by as many, --status counting them failed); the
re-submission must submit that task alone and fill exactly those points, under a new
job id, leaving every other file as it was. Rows carry the node's machine and the
Slurm job, task and node. Skips (exit 77, one line) when not root or Slurm is not
installed; every daemon it started is stopped and its folder removed, even on failure.

    slurm_sweep_test.py args|cluster --qmvlab build/qmvlab --script scripts/slurm_sweep.py \\
        --experiment tests/data/slurm_tiny.toml
"""
import argparse
import csv
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKIP = 77
DEADLINE_S = 240  # the whole cluster test, well inside CTest's timeout so cleanup runs
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL {what}", flush=True)
    return cond


def run(cmd, env=None, timeout=120):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def expect_error(args, cmd, text, env=None, code=2):
    rc, out, err = run(cmd, env=env)
    lines = err.strip().splitlines()
    check(rc == code, f"{text!r}: exit {rc}, want {code}; stderr: {err.strip()}")
    check(len(lines) == 1 and text in err, f"want one line with {text!r}, got stdout {out!r} stderr {err!r}")


def rows_of(path):
    """The complete rows of a sweep CSV (a cut-short last line left out)."""
    text = Path(path).read_text()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return list(csv.DictReader(text.splitlines()))


def key(r):
    return f"{r['kernel']}|{r['rows']}x{r['cols']}|{r['threads']}|{r['cache']}"


def dry_run_scripts(out):
    """{(target, "array" or "merge"): script} from slurm_sweep.py --dry-run's output."""
    scripts, current = {}, None
    for line in out.splitlines(keepends=True):
        m = re.match(r"^# (\S+): (array|merge) job \(", line)
        if m:
            current = (m.group(1), m.group(2))
            scripts[current] = ""
        elif current:
            scripts[current] += line
    return scripts


def shard_points(qmvlab, experiment, i, n):
    rc, out, err = run([qmvlab, "sweep", experiment, "--shard", f"{i}/{n}", "--dry-run", "--out", os.devnull])
    assert rc == 0, err
    return {line.split()[0] for line in out.splitlines() if line.startswith("  ")}


# ---------------------------------------------------------------------------------------


def test_args(a):
    script = [sys.executable, a.script]
    tmp = Path(tempfile.mkdtemp(prefix="qmv-slurm-args-"))
    try:
        empty_path = {**os.environ, "PATH": str(tmp / "no-bin")}  # no Slurm client, whatever is installed
        rc, out, _ = run(script + ["--help"])
        check(rc == 0 and "--partition" in out and "--status" in out, f"--help: exit {rc}: {out}")

        results = tmp / "results"
        base = script + [a.experiment, "--qmvlab", a.qmvlab, "--results", str(results)]
        rc, out, err = run(base + ["--partition", "alpha", "--partition", "beta", "--tasks", "2", "--time", "0:20:00",
                                   "--account", "lab", "--gpus-per-task", "1", "--dry-run", "--", "--peak-reps", "1"],
                           env=empty_path)
        check(rc == 0, f"--dry-run: exit {rc}: {err}")
        scripts = dry_run_scripts(out)
        check(sorted(scripts) == [("alpha", "array"), ("alpha", "merge"), ("beta", "array"), ("beta", "merge")],
              f"--dry-run: want an array and a merge script per target, got {sorted(scripts)}:\n{out}")
        for target in ("alpha", "beta"):
            array, merge = scripts.get((target, "array"), ""), scripts.get((target, "merge"), "")
            for line in (f"#SBATCH --job-name=qmv-slurm-tiny-{target}", "#SBATCH --array=1-2",
                         f"#SBATCH --partition={target}", "#SBATCH --exclusive", "#SBATCH --time=0:20:00",
                         "#SBATCH --account=lab", "#SBATCH --gpus-per-task=1", "#SBATCH --ntasks=1",
                         f'out={results}/{target}/slurm-tiny.shard-"$shard"-of-2.csv',
                         '--shard "$shard/2" --out "$out" --peak-reps 1 --resume'):
                check(line in array, f"{target}'s array script lacks {line!r}:\n{array}")
            for line in (f"#SBATCH --job-name=qmv-slurm-tiny-{target}-merge", f"#SBATCH --partition={target}",
                         "#SBATCH --account=lab", f"merge {results}/{target}/slurm-tiny.csv",
                         f"report {results}/{target}/slurm-tiny.csv > {results}/{target}/slurm-tiny.report.txt"):
                check(line in merge, f"{target}'s merge script lacks {line!r}:\n{merge}")
            check("--exclusive" not in merge and "--gpus" not in merge, f"{target}'s merge job asks for a node:\n{merge}")
        check(not results.exists(), "--dry-run wrote files")
        rc, out, err = run(base + ["--partition", "alpha", "--shared", "--dry-run"], env=empty_path)
        check(rc == 0 and "--exclusive" not in out and "#SBATCH --array=1-4\n" in out,
              f"--shared, default 4 tasks: exit {rc}: {out} {err}")

        expect_error(a, base, "no target", env=empty_path)
        expect_error(a, base + ["--constraint", "a100&ib", "--dry-run"], "cannot name a results folder",
                     env=empty_path)
        expect_error(a, base + ["--partition", "p", "--partition", "q", "--constraint", "c", "--dry-run"],
                     "several --partition with --constraint", env=empty_path)
        expect_error(a, base + ["--partition", "alpha"], "sbatch not found", env=empty_path)
        expect_error(a, base + ["--partition", "alpha", "--status"], "squeue not found", env=empty_path)
        bad = tmp / "bad.toml"
        bad.write_text('name = "bad"\nkernels = [\n')
        expect_error(a, script + [str(bad), "--qmvlab", a.qmvlab, "--partition", "alpha", "--dry-run"],
                     f"{bad}:2:", env=empty_path)
        expect_error(a, script + [a.experiment, "--qmvlab", str(tmp / "nothing"), "--partition", "alpha"],
                     "no qmvlab there", env=empty_path)
        (results / "alpha").mkdir(parents=True)
        (results / "alpha" / "slurm-tiny.shard-1-of-3.csv").write_text("")
        expect_error(a, base + ["--partition", "alpha", "--tasks", "2", "--dry-run"], "split [3] ways, not 2",
                     env=empty_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Cluster:
    """munged, slurmctld and slurmd for this test alone, in a folder of their own."""

    def __init__(self, tools):
        self.tools = tools
        self.dir = Path(tempfile.mkdtemp(prefix="qmv-slurm-", dir="/tmp"))  # munge's socket path must be short
        self.node = socket.gethostname().split(".")[0]
        self.procs = {}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        self.env["SLURM_CONF"] = str(self.dir / "slurm.conf")

    def start(self):
        d = self.dir
        (d / "munge").mkdir(mode=0o700)
        for sub in ("state", "spool", "log"):
            (d / sub).mkdir()
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = d / "munge" / "socket"
        self.munge_socket = sock
        self.spawn("munged", [self.tools["munged"], "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
                              f"--pid-file={d}/munge/pid", f"--log-file={d}/log/munged.log",
                              f"--seed-file={d}/munge/seed"])
        ctld_port, d_port = free_ports(2)
        (d / "slurm.conf").write_text(f"""ClusterName=qmvtest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Scheduling passes every second, not Slurm's 30-60 s: jobs held on a dependency
# (the merge after its array) start as soon as it is met.
SchedulerParameters=bf_interval=1,sched_interval=1
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=2
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory=1000 State=UNKNOWN
PartitionName=alpha Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
PartitionName=beta Nodes={self.node} MaxTime=INFINITE State=UP
""")
        self.wait_for(lambda: sock.exists(), 10, "munged's socket")
        self.spawn("slurmctld", [self.tools["slurmctld"], "-D", "-f", str(d / "slurm.conf")])
        self.spawn("slurmd", [self.tools["slurmd"], "-D", "-f", str(d / "slurm.conf"), "-N", self.node])
        self.wait_for(lambda: self.sinfo_state() == "idle", 30, "the node to come up idle")

    def spawn(self, name, cmd):
        log = open(self.dir / "log" / f"{name}.out", "w")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                            start_new_session=True)

    def sinfo_state(self):
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}\n{self.logs()}")
        rc, out, _ = run(["sinfo", "-h", "-n", self.node, "-o", "%T"], env=self.env, timeout=10)
        return out.strip().split("\n")[0] if rc == 0 else ""

    def wait_for(self, cond, seconds, what):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if cond():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {seconds} s waiting for {what}\n{self.logs()}")

    def logs(self):
        out = []
        for f in sorted((self.dir / "log").glob("*")):
            lines = f.read_text(errors="replace").splitlines()[-15:]
            out.append(f"--- {f.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def slurm(self, *cmd, timeout=30):
        return run(list(cmd), env=self.env, timeout=timeout)

    def stop(self):
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.slurm("scancel", "--full", "--user", "root", timeout=10)
            end = time.monotonic() + 20
            while time.monotonic() < end:
                rc, out, _ = self.slurm("squeue", "-h", timeout=10)
                if rc != 0 or not out.strip():
                    break
                time.sleep(0.3)
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.get(name)
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def test_cluster(a):
    if os.geteuid() != 0:
        print("SKIP: not root: the Slurm test starts its own munged, slurmctld and slurmd")
        return SKIP
    # The daemons live in sbin, which a non-login PATH may lack.
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
    tools = {t: shutil.which(t, path=search)
             for t in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "scontrol")}
    missing = [t for t, path in tools.items() if not path]
    if missing:
        print(f"SKIP: Slurm is not installed (no {', '.join(missing)}; scripts/install-deps.sh installs slurm-wlm "
              f"and munge)")
        return SKIP
    started = time.monotonic()
    cluster = Cluster(tools)
    # CTest ends a test that runs too long with SIGTERM where it can: clean up then too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        cluster.start()
        print(f"cluster up in {time.monotonic() - started:.1f} s: node {cluster.node}, partitions alpha and beta",
              flush=True)
        run_cluster_test(a, cluster, started)
    except Exception as e:  # noqa: BLE001 (any failure is reported with the daemons' logs)
        failures.append(str(e))
        print(f"FAIL {e}\n{cluster.logs()}", flush=True)
    finally:
        cluster.stop()
    print(f"cluster test: {time.monotonic() - started:.1f} s", flush=True)
    return 0


def run_cluster_test(a, cluster, started):
    results = cluster.dir / "results"
    exp = "slurm-tiny"
    base = [sys.executable, a.script, a.experiment, "--qmvlab", a.qmvlab, "--results", str(results),
            "--partition", "alpha", "--partition", "beta"]
    submit = base + ["--tasks", "2", "--shared", "--", "--peak-reps", "1", "--peak-buffer-mib", "64"]
    deadline = started + DEADLINE_S

    def script(*extra):
        rc, out, err = cluster.slurm(*(base + list(extra)), timeout=60)
        return rc, out, err

    def jobs_done(what):
        out = ""
        while time.monotonic() < deadline:
            rc, out, _ = cluster.slurm("squeue", "-h", "-o", "%i %T")
            if rc == 0 and not out.strip():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out waiting for {what}: squeue still lists\n{out}")

    def status():
        rc, out, err = script("--status")
        assert rc == 0, f"--status: exit {rc}: {err}"
        per = {}
        target = None
        for line in out.splitlines():
            if not line.startswith(" "):
                target = line.split()[0]
            elif line.strip().startswith("points:"):
                f = line.replace(",", "").split()
                per[target] = {"done": int(f[1]), "running": int(f[3]), "failed": int(f[5])}
        return per, out

    points = {i: shard_points(a.qmvlab, a.experiment, i, 2) for i in (1, 2)}
    total = len(points[1] | points[2])
    kill = max(points, key=lambda i: len(points[i]))
    assert len(points[kill]) >= 4, f"shard {kill} has {len(points[kill])} points: too few to stop one mid-run"

    rc, out, err = cluster.slurm(*submit, timeout=60)
    assert rc == 0, f"submit: exit {rc}: {out} {err}"
    print(out, end="", flush=True)
    array = {t: (results / t / "slurm" / f"{exp}.jobs").read_text().split()[1] for t in ("alpha", "beta")}

    # A second submission while the first one's jobs are queued is refused.
    rc, _, err = cluster.slurm(*submit, timeout=60)
    check(rc == 2 and "still queued or running" in err and len(err.strip().splitlines()) == 1,
          f"a submission over queued jobs: exit {rc}: {err}")
    rc, _, err = cluster.slurm(*(base[:-4] + ["--partition", "gamma"]), timeout=60)
    check(rc == 2 and "no partition 'gamma'" in err, f"an unknown partition: exit {rc}: {err}")

    # Stop beta's bigger task after its first rows, count, then kill it.
    shard_csv = results / "beta" / f"{exp}.shard-{kill}-of-2.csv"
    while not (shard_csv.exists() and rows_of(shard_csv)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{shard_csv}: no row written in time")
        time.sleep(0.05)
    task = f"{array['beta']}_{kill}"
    rc, _, err = cluster.slurm("scancel", "--full", "--signal=STOP", task)
    assert rc == 0, f"scancel --signal=STOP {task}: {err}"
    time.sleep(0.5)
    stopped_rows = len(rows_of(shard_csv))
    assert stopped_rows < len(points[kill]), f"task {task} finished before it could be stopped"
    per, out = status()
    print(out, end="")
    check(per["beta"]["running"] >= len(points[kill]) - stopped_rows,
          f"--status while task {task} runs with {stopped_rows} of {len(points[kill])} rows:\n{out}")
    rc, _, err = cluster.slurm("scancel", task)
    assert rc == 0, f"scancel {task}: {err}"
    jobs_done("the first submission")
    print(f"first submission done at {time.monotonic() - started:.1f} s", flush=True)

    check(sorted(p.name for p in results.iterdir()) == ["alpha", "beta"], f"results holds {list(results.iterdir())}")
    machine = None
    for t in ("alpha", "beta"):
        for i in (1, 2):
            rows = rows_of(results / t / f"{exp}.shard-{i}-of-2.csv")
            for r in rows:
                machine = machine or r["machine"]
                check(r["machine"] == machine and machine and r["slurm_node"] == cluster.node
                      and r["slurm_job_id"] == array[t] and r["slurm_array_task_id"] == str(i)
                      and r["status"] == "ok", f"{t} shard {i}: row {key(r)}: machine {r['machine']!r}, slurm "
                      f"{r['slurm_job_id']!r} {r['slurm_array_task_id']!r} {r['slurm_node']!r}, {r['status']}")
            if not (t == "beta" and i == kill):
                check({key(r) for r in rows} == points[i], f"{t} shard {i}: rows {len(rows)}, want {points[i]}")
    killed_rows = rows_of(shard_csv)
    lost = points[kill] - {key(r) for r in killed_rows}
    check(len(killed_rows) < len(points[kill]) and lost, f"the killed task wrote all of its {len(points[kill])} points")
    alpha_merged = rows_of(results / "alpha" / f"{exp}.csv")
    check(len(alpha_merged) == total, f"alpha's merged CSV: {len(alpha_merged)} rows, want {total}")
    beta_merged = rows_of(results / "beta" / f"{exp}.csv")
    check(len(beta_merged) == total - len(lost),
          f"beta's merged CSV after the kill: {len(beta_merged)} rows, want {total - len(lost)}")
    for t in ("alpha", "beta"):
        report = results / t / f"{exp}.report.txt"
        check(report.exists() and "q4_0.cpu.scalar_f32" in report.read_text(), f"{report}: missing or empty")
    per, out = status()
    print(out, end="")
    check(per.get("alpha") == {"done": total, "running": 0, "failed": 0}, f"--status of alpha:\n{out}")
    check(per.get("beta") == {"done": total - len(lost), "running": 0, "failed": len(lost)},
          f"--status of beta, {len(lost)} points lost:\n{out}")
    check(f"task {kill} CANCELLED" in out, f"--status names the cancelled task:\n{out}")

    # Submit again: beta's killed task alone, filling exactly its lost points.
    before = {p: p.read_bytes() for p in results.glob("*/*.csv")}
    rc, out, err = cluster.slurm(*submit, timeout=60)
    assert rc == 0, f"re-submit: exit {rc}: {out} {err}"
    print(out, end="", flush=True)
    check("alpha: all" in out and "nothing to submit" in out, f"re-submit: alpha is complete:\n{out}")
    check(f"(task(s) {kill} of 2)" in out, f"re-submit: beta's task {kill} alone:\n{out}")
    jobs_done("the re-submission")
    arrays = [line.split()[1] for line in (results / "beta" / "slurm" / f"{exp}.jobs").read_text().splitlines()
              if line.startswith("array ")]
    new_array = arrays[-1]
    check(new_array != array["beta"], "re-submit: the same array id")
    after = rows_of(shard_csv)
    check(after[: len(killed_rows)] == killed_rows, "the killed task's rows changed")
    new = after[len(killed_rows):]
    check({key(r) for r in new} == lost and len(new) == len(lost),
          f"re-submission ran {sorted(key(r) for r in new)}, want exactly {sorted(lost)}")
    check(all(r["slurm_job_id"] == new_array and r["slurm_array_task_id"] == str(kill) for r in new),
          f"re-run rows carry job {new_array} task {kill}")
    # Only the killed task's shard and beta's merged CSV are written again.
    for p, text in before.items():
        if p not in (shard_csv, results / "beta" / f"{exp}.csv"):
            check(p.read_bytes() == text, f"{p} changed on re-submission")
    beta_merged = rows_of(results / "beta" / f"{exp}.csv")
    check({key(r) for r in beta_merged} == points[1] | points[2] and len(beta_merged) == total,
          f"beta's merged CSV: {len(beta_merged)} rows, want {total}")
    per, out = status()
    print(out, end="")
    for t in ("alpha", "beta"):
        check(per.get(t) == {"done": total, "running": 0, "failed": 0}, f"--status of {t} at the end:\n{out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["args", "cluster"])
    ap.add_argument("--qmvlab", required=True)
    ap.add_argument("--script", required=True)
    ap.add_argument("--experiment", required=True)
    a = ap.parse_args()
    a.qmvlab, a.script, a.experiment = (str(Path(p).resolve()) for p in (a.qmvlab, a.script, a.experiment))
    if a.mode == "args":
        test_args(a)
    elif test_cluster(a) == SKIP:
        return SKIP
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
