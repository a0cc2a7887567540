"""`colocate launch --backend local`: real training processes per GPU group, progress, failures, teardown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from common.errors import InputError
from scheduler.executor.command import RunSettings
from scheduler.executor.local import LaunchSettings, check_local, run_groups
from scheduler.executor.plan import build_plan

TWO_PAIRS = {"allocations": [
    {"job": "a", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": "b", "node": 0, "gpus": [0]},
    {"job": "b", "gpu_type": "h100", "num_gpus": 1, "batch_size": 4, "partner": "a", "node": 0, "gpus": [0]},
    {"job": "c", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": "d", "node": 0, "gpus": [1]},
    {"job": "d", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": "c", "node": 0, "gpus": [1]},
], "unallocated": ["e"]}


def processes_with_token(token: str) -> list[int]:
    """PIDs of live processes whose environment carries ``token`` (our jobs and their children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "environ").read_bytes():
                    stat = (entry / "stat").read_text()
                    if stat.rsplit(")", 1)[1].split()[0] != "Z":
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
def test_two_pairs_train_tiny_cnn_for_real_and_report_progress(tmp_path: Path) -> None:
    plan = build_plan(TWO_PAIRS, applications={n: "tiny_cnn" for n in "abcd"})
    # long enough (seconds, even on a fast machine) that the trainer's 0.5 s progress writes land mid-run
    steps, log_every = 1000, 500
    settings = LaunchSettings(run=RunSettings(device="cpu", steps=steps, log_every=log_every), log_dir=tmp_path)
    snapshots = []
    report = run_groups(plan.groups, settings, on_progress=snapshots.append)

    assert report.ok and not report.interrupted
    assert [(j.job, j.group, j.state, j.step, j.exit_code) for j in report.jobs] == [
        ("a", "g00-a+b", "finished", steps, 0), ("b", "g00-a+b", "finished", steps, 0),
        ("c", "g01-c+d", "finished", steps, 0), ("d", "g01-c+d", "finished", steps, 0)]
    assert all(j.samples_per_s > 0 for j in report.jobs)
    running = [s for snap in snapshots for s in snap if s.state == "running"]
    assert running and any(0 < s.step < steps for s in running), "progress is reported while jobs run"
    for job in report.jobs:
        log = Path(job.log).read_text()
        assert f"[{job.job}] step {log_every} loss" in log and f"[{job.job}] finished after {steps} steps" in log


def test_a_failing_job_is_reported_and_its_partner_finishes(tmp_path: Path) -> None:
    commands = {
        "a": "echo 'preparing'; echo 'CUDA error: an illegal memory access' >&2; exit 3",
        "b": """printf '{{"step": 7, "steps": 7, "samples_per_s": 1.5}}' > "$COLOCATE_PROGRESS_FILE"; sleep 0.5""",
    }
    plan = build_plan(TWO_PAIRS, applications={n: "tiny_cnn" for n in "abcd"}, commands=commands)
    report = run_groups(plan.groups[:1], LaunchSettings(run=RunSettings(device="cpu"), log_dir=tmp_path))
    a, b = report.jobs
    assert (a.state, a.exit_code) == ("failed", 3) and "illegal memory access" in a.error
    assert (b.state, b.exit_code, b.step, b.steps, b.samples_per_s) == ("finished", 0, 7, 7, 1.5)
    assert not report.ok


def test_duration_stops_every_job_and_its_children(tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    commands = {n: f"COLOCATE_TEST_TOKEN={token} sleep 300 & wait" for n in "abcd"}  # a child of the job's shell
    plan = build_plan(TWO_PAIRS, applications={}, commands=commands)
    started = time.monotonic()
    report = run_groups(plan.groups, LaunchSettings(run=RunSettings(device="cpu"), log_dir=tmp_path,
                                                    duration_s=1.0, stop_grace_s=2.0))
    assert time.monotonic() - started < 20
    assert {j.state for j in report.jobs} == {"stopped"} and report.ok  # stopping on time is not a failure
    assert processes_with_token(token) == []


def test_mps_on_cpu_or_multi_node_groups_are_refused_before_anything_starts() -> None:
    mps = {"allocations": [dict(a, sharing="mps") for a in TWO_PAIRS["allocations"][:2]]}
    plan = build_plan(mps, applications={"a": "tiny_cnn", "b": "tiny_cnn"})
    with pytest.raises(InputError, match="MPS but --device is cpu"):
        check_local(plan, LaunchSettings(run=RunSettings(device="cpu")))
    wide = {"allocations": [{"job": "w", "gpu_type": "h100", "num_gpus": 16, "batch_size": 8, "node": 0,
                             "nodes": [0, 1], "gpus": list(range(8))}]}
    with pytest.raises(InputError, match="--emit slurm"):
        check_local(build_plan(wide, applications={"w": "tiny_cnn"}), LaunchSettings())


@pytest.mark.slow
def test_cli_ctrl_c_tears_everything_down(tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    allocation = tmp_path / "alloc.json"
    allocation.write_text(json.dumps(TWO_PAIRS))
    commands = tmp_path / "commands.yaml"
    command = """printf '{{"step": 1}}' > "$COLOCATE_PROGRESS_FILE"; sleep 300 & wait"""
    commands.write_text(yaml.safe_dump({name: command for name in "abcd"}))
    log_dir = tmp_path / "logs"
    env = {**os.environ, "COLOCATE_TEST_TOKEN": token}
    process = subprocess.Popen(
        [sys.executable, "-m", "colocate.cli", "launch", str(allocation), "--commands", str(commands), "--device",
         "cpu", "--node", "h100:0", "--log-dir", str(log_dir), "--json", "--grace", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        # SIGINT's default, as at a terminal: started from a shell without job control (CI in the background)
        # the launcher would inherit SIGINT ignored and never see the Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    # each shell writes its progress file before it starts its sleep: wait for both, not just the files
    while (len(list(log_dir.glob("*.progress.json"))) < 4 or len(processes_with_token(token)) < 9) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(processes_with_token(token)) >= 9  # the launcher, 4 shells and 4 sleeps
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    report = json.loads(out)
    assert report["interrupted"] and {j["state"] for j in report["jobs"]} == {"stopped"}
    assert [j["step"] for j in report["jobs"]] == [1, 1, 1, 1]
    assert "not launched (unallocated or unplaced): e" in err
    time.sleep(0.5)
    assert processes_with_token(token) == []


def test_cli_rejects_bad_input_with_one_line(tmp_path: Path) -> None:
    allocation = tmp_path / "alloc.json"
    allocation.write_text(json.dumps({"allocations": [{"job": "a", "gpu_type": "h100", "num_gpus": 0}]}))
    result = subprocess.run([sys.executable, "-m", "colocate.cli", "launch", str(allocation)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "allocations[0].num_gpus" in lines[0] and "Traceback" not in result.stderr


def test_an_mps_pair_on_gpu_1_gets_the_daemons_device_and_no_mask_of_its_own(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment a client of ``colocate launch``'s MPS group really gets, with a stand-in MPS control daemon
    (tests/fake_mps) in place of NVIDIA's: the daemon is started on the group's GPU (1), the clients get its pipe and
    no CUDA_VISIBLE_DEVICES (the daemon shows them GPU 1 as their device 0; '1' again would name no device)."""
    monkeypatch.setenv("PATH", f"{Path(__file__).parent / 'fake_mps'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # what the launcher itself may have inherited
    dump = ('python -c "import json, os; e = dict(os.environ); '
            'e[\'DAEMON\'] = open(e[\'CUDA_MPS_LOG_DIRECTORY\'] + \'/control.log\').read(); '
            'json.dump(e, open(\'{job}.env\', \'w\'))"')
    allocation = {"allocations": [dict(a, sharing="mps") for a in TWO_PAIRS["allocations"][2:]]}  # c+d on GPU 1
    plan = build_plan(allocation, applications={}, commands={n: dump for n in "cd"})
    settings = LaunchSettings(run=RunSettings(device="cuda"), log_dir=tmp_path / "logs")
    monkeypatch.chdir(tmp_path)
    report = run_groups(plan.groups, settings)
    assert report.ok, report
    for name in "cd":
        env = json.loads((tmp_path / f"{name}.env").read_text())
        assert "CUDA_VISIBLE_DEVICES" not in env
        assert env["DAEMON"].strip() == "CUDA_VISIBLE_DEVICES=1"  # what the group's daemon was started with
        assert not Path(env["CUDA_MPS_PIPE_DIRECTORY"]).exists()  # the daemon quit and its root is gone


@pytest.mark.parametrize("tail", ["sleep 600", "exit 0"], ids=["stopped", "ends"])
def test_a_jobs_setsid_child_does_not_outlive_the_launch(tmp_path: Path, tail: str) -> None:
    """A job's child that left its session (``setsid``) is killed with the job: when the launch stops it (after
    ``--duration``) and when the job ends by itself."""
    from tests.test_containment import _marker, _sleepers, _wait_gone

    marker = _marker()
    escape = f"setsid sleep {marker} & sleep 1; {tail}"
    alone = {k: v for k, v in TWO_PAIRS["allocations"][0].items() if k != "partner"}
    plan = build_plan({"allocations": [alone]}, applications={}, commands={"a": escape})
    settings = LaunchSettings(run=RunSettings(device="cpu"), log_dir=tmp_path, duration_s=3.0, stop_grace_s=2.0)
    try:
        run_groups(plan.groups, settings)
        assert not _wait_gone(marker)
    finally:
        for pid in _sleepers(marker):
            os.kill(pid, signal.SIGKILL)
