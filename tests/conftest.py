"""Shared pytest set-up: GPU tests are skipped without CUDA, Ray tests without the ray extra, and tests marked
``sia_data`` (reproducing Sia's paper on its own artifact files, which the project may not ship) without
``../shared/data``. Everything else runs on the data bundled in the package (:mod:`scheduler.formats.bundled`).

No test may leave a process behind (a server, a job group, Ray): the session marks every process it starts with
an environment variable (:data:`SESSION_ENV`, inherited by workers of ``pytest -n`` and everything they start,
detached sessions included) and, when the session ends, fails it if any process still carries the mark —
listing and then killing them."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

# One BLAS/OpenMP thread per test process (set before numpy or torch is imported, inherited by everything a test
# starts): `pytest -n logical` already runs one worker per CPU, and libraries that size their thread pools to every
# CPU, in every worker and job process, spin against each other (the fast lane: 8 % less CPU time, docs/development.md).
# A test about threads sets its own; the jobs the project starts choose theirs (--threads).
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

import pytest  # noqa: E402

SESSION_ENV = "COLOCATE_TEST_SESSION"
LEFTOVER_GRACE_S = float(os.environ.get("COLOCATE_LEFTOVER_GRACE_S", "15"))  # a process stopped at the end may take a moment
SHARED_DATA = Path(os.environ.get("COLOCATE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device; none on this machine")
    skip_ray = pytest.mark.skip(reason="needs the optional 'ray' extra: pip install -e '.[ray]'")
    has_cuda = _cuda_available()
    has_ray = importlib.util.find_spec("ray") is not None
    skip_shared = pytest.mark.skip(reason=f"reproduces Sia's paper on its artifact data, not found at {SHARED_DATA} "
                                          "(set COLOCATE_SHARED_DATA)")
    for item in items:
        uses_shared = "shared_data" in getattr(item, "fixturenames", ())
        if uses_shared and "sia_data" not in item.keywords:
            raise pytest.UsageError(f"{item.nodeid} uses the shared_data fixture without @pytest.mark.sia_data: "
                                    "use the bundled data (scheduler.formats.bundled) or mark it")
        if "sia_data" in item.keywords and not SHARED_DATA.is_dir():
            item.add_marker(skip_shared)
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if "ray" in item.keywords and not has_ray:
            item.add_marker(skip_ray)


@pytest.fixture(autouse=True)
def _gpu_tests_take_turns(request: pytest.FixtureRequest) -> Iterator[None]:
    """GPU tests start their own MPS daemons and fill the device, so they run one at a time: across the workers of
    ``pytest -n`` (pytest-xdist) and across concurrent pytest processes, by an exclusive lock on one file."""
    if "gpu" not in request.keywords:
        yield
        return
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / "colocate-gpu-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Public evaluation data beside the repository (../shared/data); only for tests marked ``sia_data``."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public data folder not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def gavel_throughputs() -> Path:
    """Gavel's measured solo and pair throughputs (scale factor 1, K80/P100/V100), bundled in the package."""
    from scheduler.formats.bundled import gavel_throughputs

    return gavel_throughputs()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[object]:
    """A real Slurm cluster on this machine (:mod:`tests.slurm_cluster`): nodes ``t4-0`` and ``t4-1`` with 2
    logical t4 GPUs each, ``a100-0`` with 2 a100; ``SLURM_CONF`` points at it while the session runs. Skipped where it cannot start
    (not root, Slurm not installed) unless ``COLOCATE_REQUIRE_SLURM=1`` (CI), where that is a failure."""
    from tests.slurm_cluster import SlurmCluster, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("COLOCATE_REQUIRE_SLURM") == "1":
            pytest.fail(f"COLOCATE_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)
    cluster = SlurmCluster({"t4": 2, "a100": 2}, nodes={"t4": 2}).start()
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: object) -> Iterator[object]:
    """The session's Slurm cluster, every job of a test cancelled after it (the nodes idle for the next)."""
    yield slurm_cluster
    slurm_cluster.cancel_all()  # type: ignore[attr-defined]


def pytest_configure(config: pytest.Config) -> None:
    """The session that starts first (not a worker, not a pytest run by a test) marks its processes."""
    if not hasattr(config, "workerinput") and SESSION_ENV not in os.environ:
        token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        os.environ[SESSION_ENV] = token
        config.stash[_TOKEN] = token


_TOKEN = pytest.StashKey[str]()


def own_helpers() -> set[int]:
    """Pids of this process's own multiprocessing helpers (its resource tracker and fork server, started when a test
    in this process used them). Each reads a pipe only this process writes, so it ends when the session's process
    ends: not left behind. Known by the pid multiprocessing recorded when it started the helper, never by a command
    line (a test's process that merely looks like one is still caught), and only while it is still our child."""
    recorded = []
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    if tracker is not None:
        recorded.append(getattr(getattr(tracker, "_resource_tracker", None), "_pid", None))
    forkserver = sys.modules.get("multiprocessing.forkserver")
    if forkserver is not None:
        recorded.append(getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None))
    return {pid for pid in recorded if isinstance(pid, int) and _parent(pid) == os.getpid()}


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


def leftover_processes(token: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process but this one and its own helpers (:func:`own_helpers`) whose
    environment carries ``token``."""
    mark = f"{SESSION_ENV}={token}".encode() + b"\0"
    found = []
    ours = own_helpers() | {os.getpid()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in ours:
            continue
        try:
            if mark not in (entry / "environ").read_bytes():
                continue
            stat = (entry / "stat").read_text()
            if stat[stat.rindex(")") + 2:].split()[0] in ("Z", "X"):  # ended, not yet reaped
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append((int(entry.name), command[:200]))
    return found


@pytest.hookimpl(trylast=True)  # after pytest-xdist has ended its workers
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    token = session.config.stash.get(_TOKEN, None)
    if token is None:
        return
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    left = leftover_processes(token)
    if not left:  # a process caught in execve shows no environment (its new one is not set up yet): look again
        time.sleep(0.5)
        left = leftover_processes(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = leftover_processes(token)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} process(es) left behind by the tests (now killed):"]
    lines += [f"  pid {pid}: {command}" for pid, command in left]
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    else:
        print("\n".join(lines))
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
