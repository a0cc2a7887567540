"""GPU suite: the same protocol on CUDA — NVML sampling, MPS membership, isolation, OOM, memory, preflight.

Skipped without CUDA. ``scripts/gpu-campaign.sh`` runs it (``pytest -m gpu``) first in every GPU window.
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

HAS_MPS = shutil.which("nvidia-cuda-mps-control") is not None

pytestmark = pytest.mark.gpu

SMALL = {
    "name": "gpu-smoke", "device": "cuda", "models": ["resnet18", "tiny_cnn"], "batch_sizes": [32],
    "image_size": 32, "group_sizes": [1, 2], "sharing": ["timeslice"], "warmup_iters": 10,
    "min_window_iters": 20, "repeats": 2,
}


def test_cuda_campaign_times_with_events_and_samples_nvml(tmp_path: Path) -> None:
    store = run_campaign(spec_from_dict(SMALL), tmp_path)
    runs = store.runs()
    assert set(runs["status"]) == {"ok"}
    pair = runs[runs["kind"] == "pair"].iloc[0]
    assert math.isfinite(pair["delta"]) and pair["delta"] > 0
    assert pair["nvml_samples"] >= 1 and pair["sm_clock_mean_mhz"] > 0
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
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.skipif(not HAS_MPS, reason="MPS control binary not installed")
def test_only_clients_with_our_pipe_join_our_daemon_and_isolated_ones_never_do(tmp_path: Path) -> None:
    from profiler.gpu.devices import resolve_device
    from profiler.gpu.mps import isolated_root, mps_daemon
    from profiler.gpu.nvml import mps_client_pids

    target = resolve_device("cuda")
    base = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_") and k != "CUDA_VISIBLE_DEVICES"}
    private = isolated_root(tmp_path)
    with mps_daemon(target.pin, nvml_index=target.nvml_index) as daemon:
        joined = _cuda_client({**base, **daemon.client_env()})
        isolated = _cuda_client({**base, **target.worker_env(), "CUDA_MPS_PIPE_DIRECTORY": str(private / "pipe"),
                                 "CUDA_MPS_LOG_DIRECTORY": str(private / "log")})
        try:
            for client in (joined, isolated):
                assert client.stdout is not None and client.stdout.readline().startswith("ready")
            missing = daemon.missing_clients([joined.pid, isolated.pid], mps_client_pids)
            assert missing == [isolated.pid]  # the MPS client is listed, the isolated plain one is not
        finally:
            for client in (joined, isolated):
                client.communicate("\n", timeout=60)
    assert not daemon.root.exists()  # quit was polled to the end and the directories removed


def test_solo_memory_is_the_steady_state_peak_and_nvml_includes_the_context(tmp_path: Path) -> None:
    spec = spec_from_dict({**SMALL, "name": "gpu-mem", "models": ["resnet18"], "group_sizes": [1], "repeats": 1})
    store = run_campaign(spec, tmp_path)
    job = store.jobs().iloc[0]
    assert job["status"] == "ok"
    assert 0 < job["peak_allocated_mib"] <= job["peak_memory_mib"]  # allocated <= reserved
    if not math.isnan(job["nvml_process_memory_mib"]):  # NVML may not see our pid inside a container
        assert job["nvml_process_memory_mib"] > job["peak_memory_mib"]  # + CUDA context
    meta = store.read_meta()
    assert meta["device"]["uuid"].startswith("GPU-") and meta["device"]["compute_mode"]
    assert isinstance(meta["foreign_mps"], list)


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
