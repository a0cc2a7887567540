"""GPU suite: the same protocol on CUDA — NVML sampling, MPS membership, isolation, OOM, memory, preflight.

Skipped without CUDA. ``scripts/first-call.sh`` runs its MPS and isolation tests in the first GPU call and
``scripts/gpu-campaign.sh`` all of it in a results directory's first window. Assertions are on real values:
a window of at least 2 s and 3 iterations per job, δ in the range two jobs sharing a GPU can give, MPS and
time-sliced runs served by different processes.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.campaign.driver import run_campaign
from profiler.campaign.spec import spec_from_dict
from profiler.gpu.preflight import _read_line

HAS_MPS = shutil.which("nvidia-cuda-mps-control") is not None

pytestmark = pytest.mark.gpu

SMALL = {
    "name": "gpu-smoke", "device": "cuda", "models": ["resnet18", "tiny_cnn"], "batch_sizes": [32],
    "image_size": 32, "group_sizes": [1, 2], "sharing": ["timeslice"], "warmup_iters": 10,
    "min_window_iters": 20, "repeats": 2,
}
# δ = Σ t_j / max t'_j of a pair: 1 when sharing gains nothing, up to 2 when it is free; below 1 means the
# pair runs slower than one after the other. Outside this range something is mis-measured.
PLAUSIBLE_PAIR_DELTA = (0.6, 2.1)
CLIENT_TIMEOUT_S = 120.0


def assert_measured(store: object) -> None:
    """Every ok run has a window of at least 2 s with at least 3 iterations of every job in it."""
    runs, jobs = store.runs(), store.jobs()  # type: ignore[attr-defined]
    ok = runs[runs["status"] == "ok"]
    assert (ok["window_s"] >= 2.0).all(), ok[["run_id", "window_s"]]
    ok_jobs = jobs[jobs["run_id"].isin(ok["run_id"])]
    assert (ok_jobs["iters_in_window"] >= 3).all(), ok_jobs[["run_id", "iters_in_window"]]
    pairs = ok[ok["kind"] == "pair"]
    low, high = PLAUSIBLE_PAIR_DELTA
    assert pairs["delta"].between(low, high).all(), pairs[["run_id", "delta"]]


def test_cuda_campaign_times_with_events_and_samples_nvml(tmp_path: Path) -> None:
    store = run_campaign(spec_from_dict(SMALL), tmp_path)
    runs = store.runs()
    assert set(runs["status"]) == {"ok"}
    assert_measured(store)
    pair = runs[runs["kind"] == "pair"].iloc[0]
    assert pair["nvml_samples"] >= 10 and pair["sm_clock_mean_mhz"] > 100  # ≥ 2 s sampled every 100 ms
    assert runs["gpu_uuid"].astype(str).str.startswith("GPU-").all() and runs["driver"].notna().all()
    assert runs["session_id"].nunique() == 1
    assert runs["gpu_type"].iloc[0] != "cpu"
    jobs = store.jobs()
    assert (jobs["peak_memory_mib"] > 0).all()
    meta = store.read_meta()
    assert meta["nvml"]["enabled"] is True and meta["versions"]["cuda"]


@pytest.mark.skipif(shutil.which("nvidia-cuda-mps-control") is None, reason="MPS control binary not installed")
def test_mps_pairs_run_under_a_private_daemon_that_is_quit(tmp_path: Path) -> None:
    spec = spec_from_dict({**SMALL, "name": "gpu-mps", "sharing": ["mps"], "mps_thread_percentages": [50, 100],
                           "repeats": 1})
    store = run_campaign(spec, tmp_path)
    runs = store.runs()
    mps = runs[runs["sharing"] == "mps"]
    assert len(mps) == 2 and set(mps["status"]) == {"ok"}, mps[["run_id", "status", "error"]]
    assert sorted(mps["mps_thread_percentage"].astype(int)) == [50, 100]
    assert_measured(store)
    leftovers = [p for p in Path("/tmp").glob("colocate-mps-*") if p.is_dir()]
    assert leftovers == []  # our daemon's private pipe/log dirs are gone: it was quit
    from profiler.gpu.mps import CONTROL_BINARY, foreign_mps_processes

    assert not [p for p in foreign_mps_processes() if p["command"] == CONTROL_BINARY
                and "colocate-mps-" in str(p["pipe_dir"])]


def test_out_of_memory_is_recorded_as_infeasible_and_the_campaign_goes_on(tmp_path: Path) -> None:
    spec = spec_from_dict({**SMALL, "name": "gpu-oom", "models": ["vgg19", "tiny_cnn"], "image_size": 224,
                           "batch_sizes": [16384], "repeats": 1, "group_sizes": [1, 2]})
    store = run_campaign(spec, tmp_path)
    runs = store.runs().set_index("cell_id")
    oom = runs.loc["solo|none|vgg19@16384"]
    assert oom["status"] == "infeasible" and "out of memory" in oom["error"]
    assert runs.loc["solo|none|tiny_cnn@16384"]["status"] in {"ok", "infeasible"}
    pair = runs.loc["pair|timeslice|tiny_cnn@16384+vgg19@16384"]
    assert pair["status"] == "infeasible"


def _cuda_client(env: dict[str, str]) -> subprocess.Popen[str]:
    from profiler.gpu.preflight import CLIENT_SCRIPT

    return subprocess.Popen([sys.executable, "-c", CLIENT_SCRIPT], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.skipif(not HAS_MPS, reason="MPS control binary not installed")
def test_a_plain_pool_worker_never_joins_a_daemon_whose_pipe_its_parent_exports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The isolation that matters: the campaign process itself exports a live daemon's pipe (a site-wide
    MPS, or our own), yet a time-sliced pool worker runs as plain CUDA; a client given the pipe joins."""
    from profiler.campaign.cells import Cell, JobType
    from profiler.campaign.pool import WorkerPool
    from profiler.gpu.devices import resolve_device
    from profiler.gpu.mps import mps_daemon
    from profiler.gpu.nvml import mps_client_pids

    target = resolve_device("cuda")
    base = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_") and k != "CUDA_VISIBLE_DEVICES"}
    spec = spec_from_dict({**SMALL, "name": "gpu-iso", "models": ["tiny_cnn"], "group_sizes": [1]})
    with mps_daemon(target.pin, nvml_index=target.nvml_index) as daemon:
        for key, value in daemon.client_env().items():
            monkeypatch.setenv(key, value)  # the parent's environment points at the live daemon
        joined = _cuda_client({**base, **daemon.client_env()})  # positive control: this one must join
        with WorkerPool(spec, target) as pool:
            job = JobType("tiny_cnn", 32)
            workers = pool.acquire(Cell((job,), "timeslice"))
            try:
                from profiler.campaign.runner import _coordinate

                _coordinate(workers, pool, spec, target, None, None)  # the worker holds a CUDA context now
                assert _read_line(joined, CLIENT_TIMEOUT_S).startswith("ready")
                missing = daemon.missing_clients([joined.pid, workers[0].pid], mps_client_pids)
                assert missing == [workers[0].pid]  # the client is listed, the pool worker is not
                assert (workers[0].hello or {})["env"]["CUDA_MPS_PIPE_DIRECTORY"] != str(daemon.pipe_dir)
            finally:
                pool.release(workers, healthy=False)
                joined.communicate("\n", timeout=60)
    assert not daemon.root.exists()  # quit was polled to the end and the directories removed


@pytest.mark.skipif(not HAS_MPS, reason="MPS control binary not installed")
def test_mps_and_time_sliced_pairs_are_served_by_different_processes(tmp_path: Path) -> None:
    spec = spec_from_dict({**SMALL, "name": "gpu-pids", "models": ["tiny_cnn"], "repetition": True,
                           "sharing": ["timeslice", "mps"], "repeats": 1})
    pids: dict[str, set[int]] = {}
    store = run_campaign(spec, tmp_path, on_run_start=lambda run, p: pids.setdefault(run.cell.mode_label,
                                                                                     set()).update(p))
    runs = store.runs()
    assert set(runs["status"]) == {"ok"}, runs[["run_id", "status", "error"]]
    assert_measured(store)
    assert pids["mps"] and pids["timeslice"] and not pids["mps"] & pids["timeslice"]


def test_solo_memory_is_the_steady_state_peak_and_nvml_includes_the_context(tmp_path: Path) -> None:
    spec = spec_from_dict({**SMALL, "name": "gpu-mem", "models": ["resnet18"], "group_sizes": [1], "repeats": 1})
    store = run_campaign(spec, tmp_path)
    job = store.jobs().iloc[0]
    assert job["status"] == "ok"
    assert 0 < job["peak_allocated_mib"] <= job["peak_memory_mib"]  # allocated <= reserved
    if not math.isnan(job["nvml_process_memory_mib"]):  # NVML may not see our pid inside a container
        # read after the window: the steady-state cache plus a CUDA context of a few hundred MiB
        assert job["peak_memory_mib"] + 100 < job["nvml_process_memory_mib"] < job["peak_memory_mib"] + 2048
    meta = store.read_meta()
    assert meta["device"]["uuid"].startswith("GPU-") and meta["device"]["compute_mode"]
    assert isinstance(meta["foreign_mps"], list)


def test_the_allocator_cache_does_not_grow_inside_the_timed_window(tmp_path: Path) -> None:
    from profiler.campaign.cells import Cell, JobType
    from profiler.campaign.pool import WorkerPool
    from profiler.campaign.runner import _coordinate
    from profiler.gpu.devices import resolve_device

    spec = spec_from_dict({**SMALL, "name": "gpu-regrow", "models": ["resnet18"], "group_sizes": [1]})
    target = resolve_device("cuda")
    with WorkerPool(spec, target) as pool:
        job = JobType("resnet18", 32)
        for _ in range(2):  # a cold worker, then the same worker re-warmed after idling (cache emptied)
            workers = pool.acquire(Cell((job,), "timeslice"))
            _, results, _ = _coordinate(workers, pool, spec, target, None, None)
            pool.release(workers, healthy=True)
            result = results[0]
            assert result["peak_reserved_mib"] == pytest.approx(result["reserved_at_start_mib"], abs=2.0)
            assert len(result["ends"]) >= 3


def test_a_gpu_uuid_in_cuda_visible_devices_keeps_nvml_sampling_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from profiler.gpu.devices import resolve_device
    from profiler.gpu.nvml import gpu_inventory

    inventory = gpu_inventory()
    assert inventory, "NVML sees no GPU"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", inventory[0]["uuid"])
    target = resolve_device("cuda")
    assert target.nvml_index == inventory[0]["index"] and target.uuid == inventory[0]["uuid"]


def test_bf16_and_tf32_campaigns_run_on_cuda(tmp_path: Path) -> None:
    spec = spec_from_dict({**SMALL, "name": "gpu-prec", "precision": ["tf32", "bf16"], "repeats": 1})
    runs = run_campaign(spec, tmp_path).runs()
    assert set(runs["status"]) == {"ok"} and set(runs["precision"]) == {"tf32", "bf16"}


def test_transformers_run_in_a_campaign(tmp_path: Path) -> None:
    spec = spec_from_dict({**SMALL, "name": "gpu-tf", "models": ["gpt2_small", "bert_base"], "batch_sizes": [8],
                           "seq_len": 128, "precision": ["bf16"], "repeats": 1})
    runs = run_campaign(spec, tmp_path).runs()
    assert set(runs["status"]) == {"ok"}, runs[["run_id", "status", "error"]]


@pytest.mark.skipif(not HAS_MPS, reason="MPS control binary not installed")
def test_preflight_proves_mps_end_to_end() -> None:
    from profiler.gpu.preflight import run_preflight

    report = run_preflight("cuda")
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["MPS"]["ok"] is True, checks["MPS"]["detail"]
    assert report["ok"] is True, report
