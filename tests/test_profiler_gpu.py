"""GPU suite: the same protocol on CUDA, with NVML sampling, MPS and a real OOM. Skipped without CUDA."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from profiler.campaign import run_campaign
from profiler.spec import spec_from_dict

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
