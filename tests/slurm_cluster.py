"""A real single-machine Slurm cluster for the tests: munged, slurmctld and one slurmd per GPU type.

Everything lives in one temporary directory: a private munge key and socket, ``slurm.conf`` and ``gres.conf``,
state and spool directories, logs. GPUs are logical: each GPU type has one node or more (``NodeName=<type>-<i>``,
each its own slurmd on a free localhost port, ``Features=<type>``, ``Gres=gpu:<type>:N``) whose ``gres.conf`` ``File=``
entries are symlinks to ``/dev/null`` in that directory, so Slurm counts, allocates and exports
``CUDA_VISIBLE_DEVICES`` for GPUs that do not exist. Partitions: ``all`` (every node, the default) and one
per GPU type named after it (its nodes). Nodes claim 16 CPUs whatever the machine has (``SlurmdParameters=config_overrides``).

:meth:`SlurmCluster.start` waits until ``sinfo`` says every node is idle; :meth:`SlurmCluster.stop` cancels
every job, then stops exactly the daemons it started (and any ``slurmstepd`` or job process they left,
found by a marker in their environment), whatever happened before. Needs root and Debian's ``slurm-wlm``
and ``munge`` packages (``.ci/run`` installs them); :func:`unavailable_reason` says why not otherwise.

By hand (docs/development.md)::

    python -m tests.slurm_cluster t4:2 a100:2     # prints the SLURM_CONF to export; Ctrl-C stops it all
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "scontrol")
MARKER = "COLOCATE_SLURM_TEST_CLUSTER"  # in every daemon's environment (and so their slurmstepds')
CPUS_PER_NODE = 16
KILL_WAIT_S = 10  # Slurm's SIGTERM -> SIGKILL for jobs it cancels itself (scancel, time limit)


def unavailable_reason() -> str | None:
    """Why no test cluster can start here (None: it can)."""
    if os.geteuid() != 0:
        return "the Slurm test cluster runs its daemons as root (CI does); not root here"
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge "
                "(.ci/run does)")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SlurmCluster:
    """``gpus``: GPU type -> logical GPUs per node; ``nodes``: GPU type -> its nodes (default 1), named
    ``<type>-0``, ``<type>-1``, ..."""

    gpus: dict[str, int]
    nodes: dict[str, int] = field(default_factory=dict)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="colocate-slurm-")))
    kill_wait_s: int = KILL_WAIT_S
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def node_names(self) -> list[str]:
        return [f"{t}-{i}" for t in self.gpus for i in range(self.nodes.get(t, 1))]

    @property
    def env(self) -> dict[str, str]:
        """The environment Slurm's commands need to talk to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """A Slurm command against this cluster (``sbatch``, ``squeue``, ...)."""
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

    # -- set-up ------------------------------------------------------------------------------------------
    def _write_config(self) -> None:
        hostname = socket.gethostname()
        # searchable by everyone, listable by none: a batch job run as another user (tests/test_slurm_owners.py)
        # reaches its script in the spool directory; the munge key stays root's (0600)
        self.root.chmod(0o711)
        munge = self.root / "munge"
        munge.mkdir(mode=0o755)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        (self.root / "state").mkdir()
        devices = self.root / "dev"
        devices.mkdir()
        nodes, gres, index = [], [], 0
        for name in self.node_names:
            gpu_type, count = name.rsplit("-", 1)[0], self.gpus[name.rsplit("-", 1)[0]]
            (self.root / "spool" / name).mkdir(parents=True)
            files = []
            for _ in range(count):
                (devices / f"gpu{index}").symlink_to("/dev/null")  # a character device: Slurm accepts it
                files.append(str(devices / f"gpu{index}"))
                index += 1
            nodes.append(f"NodeName={name} NodeHostname={hostname} NodeAddr=127.0.0.1 Port={_free_port()} "
                         f"CPUs={CPUS_PER_NODE} RealMemory=8000 Gres=gpu:{gpu_type}:{count} Features={gpu_type} "
                         "State=UNKNOWN")
            gres.append(f"NodeName={name} Name=gpu Type={gpu_type} File={','.join(files)}")
        of_type = {t: ",".join(n for n in self.node_names if n.rsplit("-", 1)[0] == t) for t in self.gpus}
        partitions = [f"PartitionName=all Nodes={','.join(self.node_names)} Default=YES MaxTime=INFINITE State=UP",
                      *(f"PartitionName={t} Nodes={of_type[t]} MaxTime=INFINITE State=UP" for t in self.gpus)]
        r = self.root
        self.conf.write_text("\n".join([
            "ClusterName=colocate-test",
            f"SlurmctldHost={hostname}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={munge / 'sock'}",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}/%n",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'spool'}/%n/slurmd.pid",
            f"SlurmctldLogFile={r / 'slurmctld.log'}", f"SlurmdLogFile={r / 'spool'}/%n/slurmd.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "GresTypes=gpu",
            "SchedulerType=sched/builtin", "ReturnToService=2", "SlurmdParameters=config_overrides",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MinJobAge=3600",  # ended jobs stay visible to squeue/scontrol (no accounting database here)
            f"KillWait={self.kill_wait_s}", "InactiveLimit=0",
            *nodes, *partitions, "",
        ]))
        (self.root / "gres.conf").write_text("\n".join([*gres, ""]))

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.out", "ab")
        with log:
            env = {**self.env, MARKER: str(self.root)}
            self.processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                   stdin=subprocess.DEVNULL, start_new_session=True))

    def start(self, timeout_s: float = 60.0) -> "SlurmCluster":
        """Start munged, slurmctld and the slurmds; return once every node is idle (else stop and raise)."""
        try:
            self._write_config()
            munge = self.root / "munge"
            self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={munge / 'sock'}",
                                   f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
                                   f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'seed'}"])
            self._wait(lambda: (munge / "sock").exists(), 20, "munged's socket")
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
            for name in self.node_names:
                self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(self.conf)])
            self._wait(self.idle, timeout_s, "every node idle in sinfo")
        except BaseException:
            self.stop()
            raise
        return self

    def idle(self) -> bool:
        """Every node idle (no job, not completing, registered)."""
        done = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=10)
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())  # a node per partition
        return done.returncode == 0 and set(states) == set(self.node_names) and all(
            s == "idle" for s in states.values())

    def _wait(self, predicate: object, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if callable(predicate) and predicate():
                return
            for popen in self.processes:
                if popen.poll() is not None:
                    raise RuntimeError(f"{popen.args[0]} exited with {popen.returncode} while waiting for {what}:\n"
                                       + self.logs())
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}:\n{self.logs()}")

    def logs(self, limit: int = 3000) -> str:
        parts = []
        for path in sorted(self.root.glob("*.out")) + [self.root / "slurmctld.log"]:
            if path.exists():
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-limit:]}")
        return "\n".join(parts)

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job``'s fields of one job (``JobState``, ``Reason``, ``ExitCode``, ...)."""
        text = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return dict(word.split("=", 1) for word in text.split() if "=" in word)

    def wait_ended(self, job_ids: list[str], timeout_s: float) -> dict[str, dict[str, str]]:
        """Wait until every job has ended; their ``scontrol`` fields by id."""
        self._wait(lambda: not set(job_ids) & set(self.job_ids()), timeout_s, f"jobs {', '.join(job_ids)} to end")
        return {job_id: self.job(job_id) for job_id in job_ids}

    # -- between tests and at the end ---------------------------------------------------------------------
    def job_ids(self) -> list[str]:
        """Jobs the controller knows that have not ended (pending, running, completing, ...)."""
        done = self.run("squeue", "-h", "-o", "%i", check=False, timeout=10)
        return done.stdout.split() if done.returncode == 0 else []

    def cancel_all(self, timeout_s: float = 60.0) -> None:
        """Cancel every job of this cluster and wait until the nodes are idle again."""
        ids = self.job_ids()
        if ids:
            self.run("scancel", *ids, check=False)
        self._wait(lambda: not self.job_ids() and self.idle(), timeout_s + self.kill_wait_s, "every job to end")

    def stop(self) -> None:
        """Cancel the jobs, then stop exactly what :meth:`start` started; nothing of this cluster is left."""
        alive = [p for p in self.processes if p.poll() is None]
        if len(alive) == len(self.processes) and alive:
            try:
                self.cancel_all(timeout_s=30)
            except (RuntimeError, OSError, subprocess.SubprocessError):
                pass  # the kill below still ends whatever is left
        for popen in reversed(self.processes):  # slurmds, then slurmctld, then munged
            if popen.poll() is None:
                popen.terminate()
        deadline = time.monotonic() + 15
        for popen in self.processes:
            try:
                popen.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def leftovers(self) -> list[int]:
        """Processes this cluster started that still run: slurmstepds (they carry the daemons' marker) and job
        processes (their environment names this cluster's SLURM_CONF and a job id)."""
        marker = f"{MARKER}={self.root}".encode()
        conf = f"SLURM_CONF={self.conf}".encode()
        mine = {os.getpid(), os.getppid()}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in mine:
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in environ or (conf in environ and any(v.startswith(b"SLURM_JOB_ID=") for v in environ)):
                found.append(int(entry.name))
        return found


def main(argv: list[str]) -> int:
    """``python -m tests.slurm_cluster TYPE:N ...``: a cluster for trying things by hand, until Ctrl-C."""
    reason = unavailable_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    gpus = {spec.split(":")[0]: int(spec.split(":")[1]) for spec in (argv or ["t4:2"])}
    cluster = SlurmCluster(gpus).start()
    print(f"export SLURM_CONF={cluster.conf}   # Ctrl-C stops the cluster", flush=True)
    try:
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))  # SystemExit: the finally below still runs
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
