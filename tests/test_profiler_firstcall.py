"""What the first GPU call depends on, checked on CPU against a stand-in NVML: compute mode, provenance of
each row (GPU UUID, host, driver, session), eviction of idle workers only when it helps."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from common.errors import InputError
from profiler.campaign.cells import Cell, JobType, Run
from profiler.campaign.pool import WorkerPool
from profiler.campaign.runner import SoloBaseline, _make_room, execute_run, not_run_record
from profiler.campaign.spec import spec_from_dict
from profiler.gpu import nvml
from profiler.gpu.devices import DeviceTarget, resolve_device

UUID = "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


class FakeNvml:
    """The pynvml calls the profiler makes, answering for one H100 with settable compute mode and memory."""

    NVML_CLOCK_SM = 1
    NVML_SUCCESS = 0

    def __init__(self, compute_mode: int = 0, free_mib: float = 80_000.0) -> None:
        self.mode, self.free_mib = compute_mode, free_mib

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: return 1
    def nvmlDeviceGetHandleByIndex(self, index: int) -> int: return index
    def nvmlDeviceGetUUID(self, handle: int) -> str: return UUID
    def nvmlDeviceGetName(self, handle: int) -> bytes: return b"NVIDIA H100 80GB HBM3"
    def nvmlSystemGetDriverVersion(self) -> str: return "550.54.15"
    def nvmlDeviceGetComputeMode(self, handle: int) -> int: return self.mode
    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]: return []
    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: int) -> list[Any]: return []

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        total = 81_559.0 * 2**20
        return SimpleNamespace(total=total, free=self.free_mib * 2**20, used=total - self.free_mib * 2**20)

    def nvmlGpmQueryDeviceSupport(self, handle: int) -> Any:
        return SimpleNamespace(isSupportedDevice=0)


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml()
    monkeypatch.setattr(nvml, "_pynvml", lambda: fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


@pytest.mark.parametrize("mode, ok", [(0, True), (3, False), (2, False)])
def test_an_exclusive_compute_mode_is_refused_by_preflight_and_campaign(fake_nvml: FakeNvml, tmp_path: Path,
                                                                        mode: int, ok: bool) -> None:
    from profiler.campaign.driver import refuse_exclusive_mode
    from profiler.gpu.preflight import _gpu_checks

    fake_nvml.mode = mode
    checks, target = _gpu_checks("cuda")
    check = next(c for c in checks if c.name == "compute mode")
    assert check.ok is ok
    if ok:
        refuse_exclusive_mode(target)
        return
    assert "campaigns need DEFAULT" in check.detail
    assert ("idle warm workers keep theirs" in check.detail) is (mode == 3)  # says why, not only what
    with pytest.raises(InputError, match="compute mode is (EXCLUSIVE_PROCESS|PROHIBITED).*DEFAULT compute mode"):
        refuse_exclusive_mode(target)


def test_every_row_says_which_gpu_host_driver_and_session_measured_it(fake_nvml: FakeNvml) -> None:
    target = resolve_device("cuda")
    assert target.uuid == UUID and target.driver == "550.54.15"
    spec = spec_from_dict({"name": "p", "device": "cuda", "models": ["tiny_cnn"], "batch_sizes": [2],
                           "group_sizes": [1]})
    run = Run(Cell((JobType("tiny_cnn", 2),), "none"), 0)
    row = not_run_record(run, spec, target, "skipped", "why", session_id="20261124T160000-abcd1234").run
    assert (row["gpu_uuid"], row["driver"], row["host"], row["session_id"]) == (
        UUID, "550.54.15", socket.gethostname(), "20261124T160000-abcd1234")


SPEC = {"name": "evict", "device": "cpu", "models": ["tiny_cnn"], "batch_sizes": [2], "group_sizes": [1, 2],
        "repetition": True, "warmup_iters": 1, "min_window_iters": 2, "repeats": 1}


@pytest.mark.slow
def test_idle_workers_are_evicted_only_when_the_group_would_then_fit(fake_nvml: FakeNvml) -> None:
    spec = spec_from_dict(SPEC)
    small, large = JobType("tiny_cnn", 2), JobType("tiny_cnn", 4)
    baselines = {small: SoloBaseline(0.01, 100.0, "ok"), large: SoloBaseline(0.01, 5000.0, "ok")}
    cpu = resolve_device("cpu")
    target = DeviceTarget("cpu", "cpu", None, 0, cpu.name, "cpu", 81_559.0)  # CPU workers, NVML's memory
    with WorkerPool(spec, target) as pool:
        idle = pool.acquire(Cell((small, small), "timeslice"))
        pool.release(idle, healthy=True)
        assert pool.idle_memory_mib(target, baselines) == pytest.approx(2 * 612)  # solo need of each
        fake_nvml.free_mib = 100.0
        # small + large need 612 + 5512 MiB: more than free + what the idle workers hold — keep them
        record = execute_run(Run(Cell((small, large), "timeslice"), 0), spec, target, baselines, pool=pool)
        assert record.status == "infeasible" and record.run["error"].startswith("memory pre-check")
        assert pool.idle == idle and all(w.process.is_alive() for w in idle)
        # two small ones need 1,224 MiB: 100 free + 1,224 held by the idle pair — evict them
        assert _make_room(Run(Cell((small, small), "timeslice"), 0), spec, target, baselines, pool)
        assert pool.idle == [] and not any(w.process.is_alive() for w in idle)


def test_without_a_parquet_engine_the_store_keeps_csv_and_converts_it_later(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from common import files
    from profiler.results.store import ResultsStore

    spec = spec_from_dict({**SPEC, "group_sizes": [1]})
    run = Run(Cell((JobType("tiny_cnn", 2),), "none"), 0)
    record = not_run_record(run, spec, resolve_device("cpu"), "ok", "", session_id="s1")
    record.jobs[0].update(iter_time_s=0.01)
    monkeypatch.setattr(files, "parquet_available", lambda: False)  # no pyarrow, no fastparquet: a bare image
    monkeypatch.setattr("profiler.results.store.parquet_available", lambda: False)
    store = ResultsStore(tmp_path)
    store.append_run(record.run, record.jobs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.csv", "runs.csv"]
    runs = store.runs()
    assert list(runs["run_id"]) == [run.run_id] and runs["error"].iloc[0] == ""
    assert store.finished_run_ids() == {run.run_id}
    monkeypatch.undo()  # pyarrow back: the first read writes Parquet again
    assert list(ResultsStore(tmp_path).runs()["session_id"]) == ["s1"]
    assert (tmp_path / "runs.parquet").is_file()


ROOT = Path(__file__).parents[1]


@pytest.mark.slow
def test_the_first_call_script_packs_at_most_8_files_on_a_bare_machine(tmp_path: Path) -> None:
    """The script on CPU, with no nvidia-smi and no GPU: every step says what it found, ≤ 8 files come back."""
    import os
    import subprocess
    import tarfile

    import yaml

    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump({"name": "fc", "device": "cpu", "models": ["tiny_cnn"], "batch_sizes": [2],
                                    "group_sizes": [1, 2], "repetition": True, "sharing": ["timeslice", "mps"],
                                    "warmup_iters": 1, "min_window_iters": 2, "repeats": 1}))
    env = {**os.environ, "OUT": str(tmp_path / "out"), "RESULTS_ROOT": str(tmp_path / "results"),
           "PYTHONPATH": str(ROOT), "PYTHON": "python3"}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "first-call.sh"), "--spec", str(spec), "--device", "cpu",
                           "--budget", "400"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["campaign.log", "env.txt", "gpu-tests.txt", "nvidia-smi.txt", "preflight.json",
                     "results.tar.gz", "summary.txt"]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "preflight ok: False" in summary and "CUDA: no CUDA device" in summary
    assert "status counts: {'ok': 2, 'skipped': 1}" in summary  # MPS skipped with its reason on a CPU
    assert "MPS needs a CUDA device" in summary and "timeslice: 1 ok groups" in summary
    with tarfile.open(tmp_path / "out" / "results.tar.gz") as archive:
        assert any(name.endswith("fc/meta.json") for name in archive.getnames())


@pytest.mark.slow
def test_a_campaign_resumed_mid_block_measures_its_solos_again_in_the_new_session(tmp_path: Path) -> None:
    from common.files import atomic_write_table
    from profiler.campaign.cells import plan_runs
    from profiler.campaign.driver import run_campaign
    from profiler.results.store import ResultsStore

    spec = spec_from_dict({**SPEC, "name": "resume"})
    first = run_campaign(spec, tmp_path)
    runs = first.runs()
    atomic_write_table(runs[runs["kind"] == "solo"], tmp_path / "runs.parquet")  # cut off before the pair
    store = run_campaign(spec, tmp_path)
    runs = ResultsStore(tmp_path).runs().set_index("run_id")
    assert len(runs) == len(plan_runs(spec)) and set(runs["status"]) == {"ok"}
    assert runs["session_id"].nunique() == 1  # the solo was measured again, in the pair's session
    sessions = store.read_meta()["sessions"]
    assert len(sessions) == 2 and sessions[-1]["solos_measured_again"] == ["solo|none|tiny_cnn@2#r0"]
    jobs = store.jobs()
    pair = jobs[jobs["cell_id"].str.startswith("pair")]
    solo = jobs[jobs["cell_id"].str.startswith("solo")]
    assert pair["solo_iter_time_s"].iloc[0] == pytest.approx(solo["iter_time_s"].iloc[0])
