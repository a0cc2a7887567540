"""MPS daemon lifecycle and membership proof, on CPU, against a stand-in control binary (tests/fake_mps).

The stand-in behaves like nvidia-cuda-mps-control where the profiler depends on it (a forked daemon that
keeps the caller's stdout open, a pid file, answers only once ready, asynchronous quit, client lists), so
these tests exercise the real subprocess handling, readiness and quit polling, time-outs, stale-daemon
reaping and the coordinator's membership check with real worker processes. The real binary is exercised
by tests/test_profiler_gpu.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from profiler.campaign.cells import Cell, JobType, Run
from profiler.campaign.pool import WorkerPool
from profiler.campaign.runner import SoloBaseline, _measure
from profiler.campaign.spec import spec_from_dict
from profiler.gpu import mps
from profiler.gpu.devices import resolve_device
from profiler.gpu.nvml import gpm_values, nvml_index_for
from profiler.gpu.sharing import sharing_mode

FAKE_BIN = Path(__file__).parent / "fake_mps"


@pytest.fixture
def fake_mps(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")
    for key in ("FAKE_MPS_READY_DELAY", "FAKE_MPS_QUIT_DELAY", "FAKE_MPS_HANG", "FAKE_MPS_FAIL_START",
                "FAKE_MPS_NEVER_READY"):
        monkeypatch.delenv(key, raising=False)
    return FAKE_BIN


def test_daemon_is_ready_when_it_answers_and_quit_is_polled_until_it_is_gone(fake_mps: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MPS_READY_DELAY", "0.6")  # the pid file exists long before the daemon answers
    monkeypatch.setenv("FAKE_MPS_QUIT_DELAY", "0.8")  # quit returns at once; the daemon leaves later
    began = time.monotonic()
    daemon = mps.start_daemon("GPU-1234abcd", base=tmp_path)
    assert time.monotonic() - began >= 0.6  # waited for an answer, not for a file
    assert daemon.answers()
    pid = daemon.daemon_pid()
    assert pid is not None and mps.pid_alive(pid)
    assert "CUDA_VISIBLE_DEVICES=GPU-1234abcd" in (daemon.log_dir / "control.log").read_text()  # pinned by UUID
    assert oct(daemon.pipe_dir.stat().st_mode & 0o777) == "0o700"
    assert "CUDA_VISIBLE_DEVICES" not in daemon.client_env(50)  # the daemon owns the device
    assert daemon.client_env(50)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert mps.stop_daemon(daemon)
    assert not mps.pid_alive(pid) and not daemon.root.exists()


def test_a_daemon_that_never_answers_is_unavailable_and_cleaned_up(fake_mps: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MPS_NEVER_READY", "1")
    with pytest.raises(mps.MpsUnavailable, match="did not answer get_server_list"):
        mps.start_daemon(None, base=tmp_path, start_timeout_s=1.0)
    monkeypatch.setenv("FAKE_MPS_FAIL_START", "1")
    with pytest.raises(mps.MpsUnavailable, match="-d failed .*already running"):
        mps.start_daemon(None, base=tmp_path)
    assert list(tmp_path.glob("colocate-mps-*")) == []


def test_a_hanging_control_command_times_out_instead_of_blocking(fake_mps: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    daemon = mps.start_daemon(None, base=tmp_path)
    try:
        monkeypatch.setenv("FAKE_MPS_HANG", "1")
        began = time.monotonic()
        code, _ = mps.MpsDaemon(daemon.pipe_dir, daemon.log_dir, daemon.binary, base_env=dict(os.environ)).command(
            "get_server_list", timeout_s=1.0)
        assert code is None and time.monotonic() - began < 10
    finally:
        monkeypatch.delenv("FAKE_MPS_HANG")
        assert mps.stop_daemon(daemon)


def test_membership_comes_from_the_daemons_client_lists_and_nvml(fake_mps: Path, tmp_path: Path) -> None:
    daemon = mps.start_daemon(None, nvml_index=0, base=tmp_path)
    try:
        assert daemon.missing_clients([100]) == [100]  # no server yet: nobody is a client
        (daemon.pipe_dir / "servers").write_text("4242\n")
        (daemon.pipe_dir / "clients_4242").write_text("100\n200\n")
        assert daemon.client_pids() == {100, 200}
        assert daemon.missing_clients([100, 300]) == [300]
        assert daemon.missing_clients([100, 300], nvml_clients=lambda index: {300}) == []
    finally:
        mps.stop_daemon(daemon)


def test_stale_daemons_of_dead_campaigns_are_quit_and_nothing_else(fake_mps: Path, tmp_path: Path) -> None:
    # a campaign process that starts a daemon and dies without quitting it (as under SIGKILL)
    script = ("import sys; from pathlib import Path; from profiler.gpu.mps import start_daemon; "
              f"print(start_daemon(None, base=Path({str(tmp_path)!r})).root)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    stale_root = Path(done.stdout.strip())
    stale = mps.MpsDaemon(stale_root / "pipe", stale_root / "log")
    stale_pid = stale.daemon_pid()
    assert stale_pid is not None and mps.pid_alive(stale_pid)
    live = mps.start_daemon(None, base=tmp_path)  # ours, owner alive: must survive
    foreign = tmp_path / "nvidia-mps"  # not under our prefix: never touched
    foreign.mkdir()
    try:
        cleaned = mps.reap_stale_daemons(tmp_path)
        assert cleaned == [stale_root]
        assert not mps.pid_alive(stale_pid) and not stale_root.exists()
        assert live.answers() and foreign.is_dir()
    finally:
        mps.stop_daemon(live)


def test_foreign_mps_processes_are_those_not_under_our_prefix(tmp_path: Path) -> None:
    def fake_process(pid: int, command: str, pipe: str | None) -> None:
        entry = tmp_path / str(pid)
        entry.mkdir()
        (entry / "cmdline").write_bytes(command.encode() + b"\0")
        if pipe is not None:
            (entry / "environ").write_bytes(f"CUDA_MPS_PIPE_DIRECTORY={pipe}\0HOME=/root\0".encode())

    fake_process(11, "/usr/bin/nvidia-cuda-mps-server", None)  # environment unreadable: foreign
    fake_process(12, "nvidia-cuda-mps-control", "/tmp/colocate-mps-abc/pipe")  # ours
    fake_process(13, "nvidia-cuda-mps-control", "/var/run/site-mps")  # a site-wide daemon
    fake_process(14, "/usr/bin/python3", None)
    found = sorted(mps.foreign_mps_processes(tmp_path), key=lambda p: int(p["pid"]))  # type: ignore[arg-type]
    assert [p["pid"] for p in found] == [11, 13]
    assert found[1]["pipe_dir"] == "/var/run/site-mps"


MPS_SPEC = {"name": "mps-cpu", "device": "cpu", "models": ["tiny_cnn"], "batch_sizes": [2], "group_sizes": [2],
            "repetition": True, "sharing": ["mps"], "warmup_iters": 2, "min_window_iters": 3, "repeats": 1}


@pytest.mark.slow
@pytest.mark.parametrize("joined", ["all", "one"])
def test_a_run_is_failed_unless_every_worker_is_a_client_of_our_daemon(fake_mps: Path, joined: str) -> None:
    """The coordinator with real worker processes under a (stand-in) daemon: proof of membership or failure."""
    spec = spec_from_dict(MPS_SPEC)
    target = resolve_device("cpu")
    job = JobType("tiny_cnn", 2)
    run = Run(Cell((job, job), "mps", 50), 0)
    baselines = {job: SoloBaseline(0.01, 1.0, "ok")}
    with WorkerPool(spec, target) as pool:
        def register_clients(pids: list[int]) -> None:
            assert pool.daemon is not None
            (pool.daemon.pipe_dir / "servers").write_text("4242\n")
            listed = pids if joined == "all" else pids[:1]
            (pool.daemon.pipe_dir / "clients_4242").write_text("\n".join(map(str, listed)))

        record = _measure(run, spec, target, baselines, pool, register_clients, False)
        daemon_root = pool.daemon.root if pool.daemon is not None else None
        if joined == "all":
            assert record.status == "ok", record.run["error"]
            assert record.run["delta"] > 0
            assert len(pool.idle) == 2  # healthy MPS clients stay warm for the next MPS run
            hello = pool.idle[0].hello or {}
            assert hello["env"]["CUDA_MPS_PIPE_DIRECTORY"] == str(pool.daemon.pipe_dir)  # type: ignore[union-attr]
            assert hello["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
            assert "CUDA_VISIBLE_DEVICES" not in hello["env"]
        else:
            assert record.status == "failed"
            assert "not an MPS client of our daemon" in record.run["error"] and "ran as plain CUDA" in record.run["error"]
            assert pool.idle == [] and pool.daemon is None  # a failed MPS group ends the daemon and its clients
    assert daemon_root is None or not daemon_root.exists()


@pytest.mark.slow
def test_plain_workers_get_a_private_empty_pipe_and_no_inherited_mps_variables(fake_mps: Path) -> None:
    """A time-sliced run after an MPS run: the daemon is quit first, workers see only their private pipe."""
    from profiler.measure.worker import JobConfig, apply_environment

    config = JobConfig("tiny_cnn", 2, 32, 10, "cpu", 0, 1, 1, env={"CUDA_MPS_PIPE_DIRECTORY": "/private/pipe"},
                       unset_env=("CUDA_VISIBLE_DEVICES",))
    environ = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "7",
               "CUDA_VISIBLE_DEVICES": "0", "HOME": "/root"}
    apply_environment(config, environ)
    assert environ == {"CUDA_MPS_PIPE_DIRECTORY": "/private/pipe", "HOME": "/root"}

    spec = spec_from_dict({**MPS_SPEC, "sharing": ["timeslice"]})
    target = resolve_device("cpu")
    job = JobType("tiny_cnn", 2)
    with WorkerPool(spec, target) as pool:
        pool.open_service(sharing_mode("mps"))  # as if the previous run had been an MPS run
        daemon_root = pool.daemon.root
        record = _measure(Run(Cell((job, job), "timeslice"), 0), spec, target,
                          {job: SoloBaseline(0.01, 1.0, "ok")}, pool, None, False)
        assert record.status == "ok", record.run["error"]
        assert pool.daemon is None and not daemon_root.exists()  # quit before a non-MPS run
        for worker in pool.idle:
            pipe = Path((worker.hello or {})["env"]["CUDA_MPS_PIPE_DIRECTORY"])
            assert pipe.parent.name.startswith(mps.ROOT_PREFIX) and pipe.is_dir() and not any(pipe.iterdir())
            assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in (worker.hello or {})["env"]


def test_cuda_visible_devices_uuids_resolve_for_nvml() -> None:
    inventory = [{"index": 0, "uuid": "GPU-aaaa1111-2222", "name": "H100"},
                 {"index": 1, "uuid": "GPU-bbbb3333-4444", "name": "H100"},
                 {"index": 2, "uuid": "GPU-bbbc5555-6666", "name": "H100"}]
    assert nvml_index_for("1", inventory) == 1
    assert nvml_index_for("GPU-bbbb3333-4444", inventory) == 1
    assert nvml_index_for("GPU-aaaa", inventory) == 0  # a unique prefix, as CUDA accepts
    assert nvml_index_for("bbbb", inventory) == 1
    assert nvml_index_for("GPU-bbb", inventory) is None  # ambiguous
    assert nvml_index_for("MIG-0c1d2e3f", inventory) is None


def test_gpm_metrics_with_a_failed_return_code_are_nan_not_zero() -> None:
    metrics = [SimpleNamespace(nvmlReturn=0, value=41.5), SimpleNamespace(nvmlReturn=3, value=0.0),
               SimpleNamespace(nvmlReturn=0, value=0.0)]
    values = gpm_values(metrics, success=0)
    assert values["occupancy"] == 41.5 and values["dram"] == 0.0
    assert values["sm_util"] != values["sm_util"]  # NaN


def test_preflight_on_a_machine_without_gpu_says_what_is_missing(fake_mps: Path) -> None:
    import subprocess as sp

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    plain_path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != str(FAKE_BIN))
    done = sp.run([sys.executable, "-m", "colocate.cli", "env", "--check", "--json"], capture_output=True,
                  text=True, timeout=300, env={**env, "PATH": plain_path})
    assert done.returncode == 1
    import json

    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["CUDA"]["ok"] is False and "no CUDA device" in checks["CUDA"]["detail"]
    assert checks["MPS"]["ok"] is False and "not found on PATH" in checks["MPS"]["detail"]
    screen = sp.run([sys.executable, "-m", "colocate.cli", "env", "--check"], capture_output=True, text=True,
                    timeout=300, env={**env, "PATH": plain_path})
    assert screen.returncode == 1 and "not ready" in screen.stdout and len(screen.stdout.splitlines()) < 25
