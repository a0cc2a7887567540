"""Real CPU campaigns: real worker processes, δ from the overlap window, resume, failures, no orphans."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from profiler.campaign.cells import plan_runs
from profiler.campaign.driver import run_campaign
from profiler.campaign.spec import spec_from_dict
from profiler.results.store import ResultsStore

TINY = {
    "name": "tiny", "device": "cpu", "models": ["tiny_cnn", "resnet18"], "batch_sizes": [2],
    "group_sizes": [1, 2], "sharing": ["timeslice"], "warmup_iters": 2, "min_window_iters": 4,
    "repeats": 2, "threads_per_job": 1,
}


def processes_with_token(token: str) -> list[int]:
    """PIDs of live processes whose environment carries ``token`` (our workers inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if state != "Z" and f"COLOCATE_TEST_TOKEN={token}".encode() in environ:
            found.append(int(entry.name))
    return found


def wait_until_gone(token: str, timeout_s: float = 20.0) -> list[str]:
    """Command lines of processes still carrying ``token`` after ``timeout_s`` (the fork server and the
    workers exit within moments of the campaign's death; a loaded 2-core machine may take a few seconds)."""
    deadline = time.monotonic() + timeout_s
    while processes_with_token(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = []
    for pid in processes_with_token(token):
        try:
            left.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return left


@pytest.fixture(scope="module")
def tiny_campaign(tmp_path_factory: pytest.TempPathFactory) -> ResultsStore:
    spec = spec_from_dict(TINY)
    return run_campaign(spec, tmp_path_factory.mktemp("tiny"))


@pytest.mark.slow
def test_campaign_measures_delta_from_the_overlap_window(tiny_campaign: ResultsStore) -> None:
    runs = tiny_campaign.runs()
    jobs = tiny_campaign.jobs()
    assert set(runs["status"]) == {"ok"}
    assert len(runs) == 6 and runs["run_id"].is_unique  # 2 solos + 1 pair, x 2 repeats
    pairs = runs[runs["kind"] == "pair"]
    solo_jobs = jobs[jobs["run_id"].str.startswith("solo|")]
    baseline = solo_jobs.groupby("job_type")["iter_time_s"].mean()
    for pair in pairs.itertuples():
        members = jobs[jobs["run_id"] == pair.run_id].sort_values("job_index")
        assert (members["iters_in_window"] >= TINY["min_window_iters"]).all()
        t = [baseline[jt] for jt in members["job_type"]]
        t_prime = list(members["iter_time_s"])
        assert pair.delta == pytest.approx(sum(t) / max(t_prime))
        assert pair.throughput_sum == pytest.approx(sum(a / b for a, b in zip(t, t_prime)))
        assert list(members["slowdown"]) == pytest.approx([b / a for a, b in zip(t, t_prime)])
        assert 0 < pair.window_s < pair.wall_s
        # iterations that end in the window: the mean is consistent with the window length
        assert max(t_prime) * min(members["iters_in_window"]) <= pair.window_s * 1.05
    meta = tiny_campaign.read_meta()
    assert meta["nvml"]["enabled"] is False and "not a GPU" in meta["nvml"]["why"]
    assert meta["spec"]["name"] == "tiny" and meta["versions"]["torch"]
    assert (tiny_campaign.root / "runs.csv").is_file() and (tiny_campaign.root / "jobs.csv").is_file()


@pytest.mark.slow
def test_rerun_resumes_without_duplicates(tiny_campaign: ResultsStore) -> None:
    before = tiny_campaign.runs()
    spec = spec_from_dict(TINY)
    again = run_campaign(spec, tiny_campaign.root)
    after = again.runs()
    assert list(after["run_id"]) == list(before["run_id"])
    assert after["started_at"].tolist() == before["started_at"].tolist()  # nothing re-measured
    assert again.read_meta()["sessions"][-1]["runs_executed"] == 0


def pid_alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_a_crashed_worker_fails_its_group_and_the_campaign_goes_on(tmp_path: Path) -> None:
    spec = spec_from_dict({**TINY, "name": "crash", "repeats": 1, "models": ["tiny_cnn", "resnet18"],
                           "repetition": True})
    victim: dict[str, str] = {}
    workers: list[int] = []

    def kill_one_worker(run, pids):  # a real fault: SIGKILL one worker of the first pair, mid-run
        workers.extend(pids)
        if run.cell.kind == "pair" and not victim:
            victim["run_id"] = run.run_id
            threading.Timer(2.0, os.kill, args=(pids[0], signal.SIGKILL)).start()

    store = run_campaign(spec, tmp_path, on_run_start=kill_one_worker)
    runs = store.runs().set_index("run_id")
    failed = runs.loc[victim["run_id"]]
    assert failed["status"] == "failed"
    assert "exited unexpectedly" in failed["error"] and "partners stopped" in failed["error"]
    others = runs.drop(index=victim["run_id"])
    assert (others["status"] == "ok").all() and len(others) == len(plan_runs(spec)) - 1
    assert workers and not [pid for pid in workers if pid_alive(pid)]  # partners were stopped and reaped


@pytest.mark.slow
def test_sigkill_of_the_campaign_loses_nothing_and_leaves_no_orphans(tmp_path: Path) -> None:
    spec_path = tmp_path / "spec.yaml"
    killed = {**TINY, "name": "killed", "repeats": 3, "models": ["tiny_cnn"], "repetition": True}
    spec_path.write_text(yaml.safe_dump(killed))
    out = tmp_path / "out"
    token = uuid.uuid4().hex
    env = {**os.environ, "COLOCATE_TEST_TOKEN": token}
    command = [sys.executable, "-m", "colocate.cli", "profile", str(spec_path), "--out", str(out), "--json"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # kill at a random moment after at least one run has been committed
    deadline = time.monotonic() + 120
    while not (out / "runs.parquet").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(random.uniform(0.0, 4.0))
    process.kill()
    process.wait(timeout=30)
    assert wait_until_gone(token) == []
    partial = ResultsStore(out).runs()
    assert partial["run_id"].is_unique
    # resume to completion with the same command
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    assert {cell["status"] for cell in report["cells"]} == {"ok"}
    runs = ResultsStore(out).runs()
    planned = {run.run_id for run in plan_runs(spec_from_dict(killed))}
    assert set(runs["run_id"]) == planned and runs["run_id"].is_unique
    jobs = ResultsStore(out).jobs()
    assert not jobs.duplicated(["run_id", "job_index"]).any()
    assert set(partial["run_id"]) <= set(runs["run_id"])
    assert processes_with_token(token) == []


def test_cli_dry_run_json_and_bad_spec(tmp_path: Path) -> None:
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump({**TINY, "sharing": ["timeslice", "mps"]}))
    dry = subprocess.run([sys.executable, "-m", "colocate.cli", "profile", str(spec_path), "--dry-run",
                          "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0
    assert "pair|mps|resnet18@2+tiny_cnn@2#r1" in dry.stdout and "8 runs" in dry.stdout
    assert not (tmp_path / "o").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**TINY, "sharing": ["mpss"]}))
    result = subprocess.run([sys.executable, "-m", "colocate.cli", "profile", str(bad)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "sharing[0]" in lines[0] and "timeslice, mps" in lines[0]
    assert "Traceback" not in result.stderr


def test_mps_cells_are_skipped_with_a_reason_on_cpu(tmp_path: Path) -> None:
    spec = spec_from_dict({**TINY, "name": "mps", "repeats": 1, "sharing": ["mps"], "models": ["tiny_cnn"],
                           "repetition": True})
    store = run_campaign(spec, tmp_path)
    runs = store.runs().set_index("cell_id")
    skipped = runs.loc["pair|mps|tiny_cnn@2+tiny_cnn@2"]
    assert skipped["status"] == "skipped" and "MPS needs a CUDA device" in skipped["error"]
    assert runs.loc["solo|none|tiny_cnn@2"]["status"] == "ok"
    # skipped runs are retried on resume (e.g. on a machine with MPS), not duplicated
    again = run_campaign(spec, tmp_path).runs()
    assert again["run_id"].is_unique and len(again) == len(runs)


@pytest.mark.slow
def test_kernels_flag_records_a_profile_per_solo_job_type(tmp_path: Path) -> None:
    spec = spec_from_dict({**TINY, "name": "kern", "repeats": 1, "models": ["tiny_cnn"], "group_sizes": [1],
                           "batch_sizes": [2, 4], "kernels": True})
    store = run_campaign(spec, tmp_path)
    kernels = store.kernels()
    assert set(kernels["job_type"]) == {"tiny_cnn@2", "tiny_cnn@4"}
    assert (kernels["duration_us"] > 0).all() and set(kernels["backend"]) == {"torch-profiler"}
    assert "kernel_errors" not in store.read_meta()
    again = run_campaign(spec, tmp_path).kernels()  # resume: nothing profiled twice
    assert len(again) == len(kernels)
