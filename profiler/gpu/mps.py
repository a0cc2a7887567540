"""NVIDIA MPS control-daemon lifecycle, proven rather than assumed.

A CUDA client that cannot reach an MPS daemon silently runs as a plain CUDA context, so "MPS" must be
*shown*: the daemon is ready when it answers ``get_server_list`` on *our* pipe directory (not when a file
appears), and after a window starts every worker pid must be listed by ``get_client_list <server>`` (or by
NVML's MPS compute-process list) — :meth:`MpsDaemon.missing_clients`.

We only ever stop a daemon we started: it gets a private root ``<tmp>/colocate-mps-*`` with pipe and log
directories (mode 0700) exported to the daemon and to every client, and an ``owner.json`` naming the
campaign process. ``quit`` goes to exactly that pipe directory, and the daemon is then *polled* until it has
gone. A campaign killed with SIGKILL cannot quit its daemon; :func:`reap_stale_daemons` (called when a
campaign starts) quits daemons under our prefix whose owner is dead, and nothing else.

Every call of the control binary writes to files, never to pipes: ``-d`` forks a daemon that inherits the
caller's stdout/stderr, and a pipe would then never reach end-of-file. Every call has a time-out (a FIFO
left by a dead daemon blocks its writer forever). No GPU setting (compute mode, clocks, MIG) is changed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import SharingUnavailable

CONTROL_BINARY = "nvidia-cuda-mps-control"
ROOT_PREFIX = "colocate-mps-"
OWNER_FILE = "owner.json"
PID_FILE = "nvidia-cuda-mps-control.pid"  # written by the daemon into CUDA_MPS_PIPE_DIRECTORY
COMMAND_TIMEOUT_S = 10.0


class MpsUnavailable(SharingUnavailable):
    """MPS cannot be used here; the message says why (recorded as the cells' skip reason)."""


def mps_unavailable_reason(device: str) -> str | None:
    """None when MPS can be tried on ``device``; otherwise the reason it cannot."""
    if not device.startswith("cuda"):
        return f"MPS needs a CUDA device (spec device is '{device}')"
    if shutil.which(CONTROL_BINARY) is None:
        return f"{CONTROL_BINARY} not found on PATH"
    return None


def _process_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (field 22 of /proc/pid/stat); None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def pid_alive(pid: int) -> bool:
    return _process_start_ticks(pid) is not None


def _run_control(binary: str, args: list[str], env: dict[str, str], stdin: str | None, workdir: Path,
                 timeout_s: float) -> tuple[int | None, str]:
    """Run the control binary with output to a file; ``(returncode, output)``, returncode None on time-out."""
    workdir.mkdir(parents=True, exist_ok=True)
    handle, out_path = tempfile.mkstemp(dir=workdir, prefix="control-", suffix=".out")
    try:
        with os.fdopen(handle, "w+") as out:
            try:
                done = subprocess.run([binary, *args], input=stdin, env=env, stdout=out, stderr=subprocess.STDOUT,
                                      text=True, timeout=timeout_s, start_new_session=True)
                code: int | None = done.returncode
            except subprocess.TimeoutExpired:
                code = None
            out.seek(0)
            return code, out.read()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(out_path)


@dataclass(frozen=True)
class MpsDaemon:
    """A control daemon started by us: its private directories and how to talk to it."""

    pipe_dir: Path
    log_dir: Path
    binary: str = CONTROL_BINARY
    visible_device: str | None = None  # CUDA_VISIBLE_DEVICES of the daemon (a GPU UUID when known)
    nvml_index: int | None = None
    base_env: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def root(self) -> Path:
        return self.pipe_dir.parent

    def client_env(self, thread_percentage: int | None = None) -> dict[str, str]:
        """Environment of a client. No CUDA_VISIBLE_DEVICES: the daemon owns the device (pinned by UUID)."""
        env = {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}
        if thread_percentage is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(thread_percentage)
        return env

    def daemon_env(self) -> dict[str, str]:
        env = {k: v for k, v in self.base_env.items() if not k.startswith("CUDA_MPS_")}
        env.update(self.client_env())
        if self.visible_device is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.visible_device
        return env

    def command(self, text: str, timeout_s: float = COMMAND_TIMEOUT_S) -> tuple[int | None, str]:
        """Send one control command (``get_server_list``, ``quit`` …) to *our* daemon."""
        return _run_control(self.binary, [], self.daemon_env(), text + "\n", self.root, timeout_s)

    def answers(self, timeout_s: float = COMMAND_TIMEOUT_S) -> bool:
        """Whether the daemon answers ``get_server_list`` on our pipe (exit 0; or, should a driver version
        exit non-zero for an empty server list, a completed command with no connection error while the
        daemon's own pid lives). Membership of every client is proven separately, per run."""
        code, output = self.command("get_server_list", timeout_s)
        if code == 0:
            return True
        pid = self.daemon_pid()
        lowered = output.lower()
        return (code is not None and pid is not None and pid_alive(pid)
                and not any(marker in lowered for marker in ("cannot", "fail", "error", "refused")))

    def daemon_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.pipe_dir / PID_FILE).read_text().strip())
        return None

    def server_pids(self) -> list[int]:
        code, output = self.command("get_server_list")
        return _pids(output) if code == 0 else []

    def client_pids(self, nvml_clients: Callable[[int], set[int]] | None = None) -> set[int]:
        """Pids the daemon lists as clients of its servers, plus NVML's MPS compute processes."""
        clients: set[int] = set()
        for server in self.server_pids():
            code, output = self.command(f"get_client_list {server}")
            if code == 0:
                clients.update(_pids(output))
        if nvml_clients is not None and self.nvml_index is not None:
            with contextlib.suppress(Exception):
                clients |= nvml_clients(self.nvml_index)
        return clients

    def missing_clients(self, pids: Iterable[int], nvml_clients: Callable[[int], set[int]] | None = None,
                        ) -> list[int]:
        """The pids among ``pids`` that are *not* clients of this daemon (empty = membership proven)."""
        clients = self.client_pids(nvml_clients)
        return [pid for pid in pids if pid not in clients]


def _pids(output: str) -> list[int]:
    return [int(token) for token in output.split() if token.isdigit()]


def _make_root(base: Path | None = None) -> Path:
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=base))
    for folder in (root, root / "pipe", root / "log"):
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)
    owner = {"pid": os.getpid(), "start_ticks": _process_start_ticks(os.getpid())}
    (root / OWNER_FILE).write_text(json.dumps(owner))
    return root


def pinned_memory_env(limit_bytes: int, devices: int = 1) -> dict[str, str]:
    """One MPS client's device-memory limit: ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` = ``0=<MB>M,1=<MB>M,...`` over the
    client's ``devices`` (ordinals as the client enumerates them; the daemon owns exactly the group's GPUs).
    Allocations past it fail in that client alone (NVIDIA's MPS documentation, "Environment Variables")."""
    megabytes = max(int(limit_bytes) // 2**20, 1)
    return {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": ",".join(f"{d}={megabytes}M" for d in range(max(devices, 1)))}


def start_daemon(visible_device: str | None, *, nvml_index: int | None = None, start_timeout_s: float = 20.0,
                 base: Path | None = None) -> MpsDaemon:
    """Start a private control daemon and wait until it answers on our pipe; raise :class:`MpsUnavailable`."""
    binary = shutil.which(CONTROL_BINARY)
    if binary is None:
        raise MpsUnavailable(f"{CONTROL_BINARY} not found on PATH")
    root = _make_root(base)
    daemon = MpsDaemon(root / "pipe", root / "log", binary, visible_device, nvml_index, dict(os.environ))
    code, output = _run_control(binary, ["-d"], daemon.daemon_env(), None, root, COMMAND_TIMEOUT_S)
    if code != 0:
        shutil.rmtree(root, ignore_errors=True)
        why = "timed out" if code is None else f"exit {code}"
        raise MpsUnavailable(f"{CONTROL_BINARY} -d failed ({why}): {output.strip()[-300:]}")
    deadline = time.monotonic() + start_timeout_s
    while not daemon.answers(timeout_s=2.0):
        if time.monotonic() > deadline:
            stop_daemon(daemon)
            raise MpsUnavailable(f"the MPS daemon started in {root} did not answer get_server_list within "
                                 f"{start_timeout_s:.0f} s; see {daemon.log_dir}/control.log")
        time.sleep(0.1)
    return daemon


def stop_daemon(daemon: MpsDaemon, timeout_s: float = 30.0) -> bool:
    """Send ``quit`` to our daemon and poll until it has gone; remove its directories. True when it is gone.

    ``quit`` returns before the daemon exits (it first waits for its servers' clients), so the daemon's pid
    (its pid file) is polled; without a pid file, until it stops answering. A daemon of ours that does not
    take ``quit`` (it never answered, or ignores it) is terminated through the pid in its own pid file.
    """
    pid = daemon.daemon_pid()
    code, _ = daemon.command("quit", timeout_s=min(timeout_s, COMMAND_TIMEOUT_S))
    deadline = time.monotonic() + (timeout_s if code == 0 else 0.0)
    gone = _gone(daemon, pid)
    while not gone and time.monotonic() < deadline:
        time.sleep(0.05)
        gone = _gone(daemon, pid)
    if not gone and pid is not None:
        gone = _terminate(pid)
    if gone:
        shutil.rmtree(daemon.root, ignore_errors=True)
    return gone


def _gone(daemon: MpsDaemon, pid: int | None) -> bool:
    return not pid_alive(pid) if pid is not None else not daemon.answers(timeout_s=2.0)


def _terminate(pid: int, grace_s: float = 5.0) -> bool:
    """SIGTERM, then SIGKILL, a daemon of ours (its pid from the pid file in our private directory)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not pid_alive(pid):
            return True
    return False


@contextmanager
def mps_daemon(visible_device: str | None, *, nvml_index: int | None = None,
               start_timeout_s: float = 20.0) -> Iterator[MpsDaemon]:
    """A private MPS daemon for one GPU (a CUDA_VISIBLE_DEVICES entry, best a UUID); always quit on exit."""
    daemon = start_daemon(visible_device, nvml_index=nvml_index, start_timeout_s=start_timeout_s)
    try:
        yield daemon
    finally:
        stop_daemon(daemon)


def _owner_alive(root: Path) -> bool:
    try:
        owner = json.loads((root / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return False
    ticks = _process_start_ticks(int(owner.get("pid", -1)))
    return ticks is not None and ticks == owner.get("start_ticks")


def reap_stale_daemons(base: Path | None = None) -> list[Path]:
    """Quit daemons *we* started (``colocate-mps-*`` roots) whose campaign process is dead; remove their dirs.

    A daemon whose owner still lives (another campaign) and every daemon not under our prefix are left
    alone. Returns the roots cleaned up.
    """
    base = Path(base or tempfile.gettempdir())
    binary = shutil.which(CONTROL_BINARY) or CONTROL_BINARY
    cleaned = []
    for root in sorted(base.glob(f"{ROOT_PREFIX}*")):
        if not root.is_dir() or _owner_alive(root):
            continue
        daemon = MpsDaemon(root / "pipe", root / "log", binary, base_env=dict(os.environ))
        pid = daemon.daemon_pid()
        if pid is not None and pid_alive(pid):
            if not stop_daemon(daemon, timeout_s=15.0):
                continue  # still running: leave its directories so the next campaign tries again
        shutil.rmtree(root, ignore_errors=True)
        cleaned.append(root)
    return cleaned


def isolated_root(base: Path | None = None) -> Path:
    """A private, empty pipe/log root for non-MPS workers: they can never reach any MPS daemon."""
    return _make_root(base)


def _environ_of(entry: Path) -> dict[str, str] | None:
    try:
        raw = (entry / "environ").read_bytes()
    except OSError:
        return None
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def foreign_mps_processes(proc: Path = Path("/proc")) -> list[dict[str, object]]:
    """MPS daemons and servers visible on this host that we did not start (pid, command, pipe directory).

    Ours carry a CUDA_MPS_PIPE_DIRECTORY under a ``colocate-mps-*`` root; anything else — or a process whose
    environment we may not read — is foreign. (Inside a container, host processes are not visible.)
    """
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        name = Path(command).name
        if name not in ("nvidia-cuda-mps-server", CONTROL_BINARY):
            continue
        environ = _environ_of(entry)
        pipe = (environ or {}).get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps (default)")
        if environ is not None and Path(pipe).parent.name.startswith(ROOT_PREFIX):
            continue
        found.append({"pid": int(entry.name), "command": name, "pipe_dir": pipe})
    return found
