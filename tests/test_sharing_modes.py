"""The sharing-mode registry: one entry per mode, used by specs, cells, the profiler's runner and every executor.

A mode registered in a test (``fair``) must flow through all of them without any other code change:
that is the seam a new mode is added at (ARCHITECTURE.md).
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from common.errors import InputError, SharingUnavailable
from profiler.campaign.cells import expand_cells
from profiler.campaign.spec import spec_from_dict
from profiler.gpu import sharing
from profiler.gpu.sharing import SharingMode, register_sharing_mode, sharing_label, sharing_mode, sharing_mode_names
from scheduler.executor.command import RunSettings
from scheduler.executor.k8s import K8sOptions, emit_k8s
from scheduler.executor.plan import build_plan
from scheduler.executor.slurm.emit import SlurmOptions, emit_slurm

PAIR = {"allocations": [
    {"job": "a", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": "b", "node": 0, "gpus": [0],
     "sharing": "fair"},
    {"job": "b", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": "a", "node": 0, "gpus": [0]},
], "unallocated": []}


@pytest.fixture
def fair(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A made-up mode registered for one test; ``events`` records its set-up and tear-down."""
    events: list[str] = []

    def enter(stack: ExitStack, gpu: str | None, pct: int | None) -> dict[str, str]:
        events.append(f"up {gpu} {pct}")
        stack.callback(events.append, "down")
        return {"FAIR_SHARE": str(pct)}

    mode = SharingMode("fair", "fair share", enter=enter, slurm_setup=("start-fair-share",),
                       slurm_teardown=("  stop-fair-share",), k8s_mode="fair-core", thread_partitions=True)
    monkeypatch.setattr(sharing, "_REGISTRY", dict(sharing._REGISTRY))
    register_sharing_mode(mode)
    return events


def test_built_in_modes_and_labels() -> None:
    assert sharing_mode_names() == ("timeslice", "mps")
    assert sharing_mode("none").shared is False
    assert sharing_label("mps", 50) == "mps50" and sharing_label("mps", None) == "mps"
    assert sharing_label("mps", float("nan")) == "mps" and sharing_label("timeslice", 50) == "timeslice"
    assert sharing_label("gavel-import", None) == "gavel-import"  # unknown names are shown as stored
    with pytest.raises(KeyError, match="valid: timeslice, mps"):
        sharing_mode("mpss")
    with pytest.raises(ValueError, match="already registered"):
        register_sharing_mode(SharingMode("mps", "again"))


def test_timeslice_needs_nothing_and_mps_needs_a_gpu() -> None:
    with ExitStack() as stack:
        assert sharing_mode("timeslice").enter(stack, None, None) == {}
        with pytest.raises(SharingUnavailable, match="needs a CUDA device"):
            sharing_mode("mps").enter(stack, None, None)
    assert sharing_mode("timeslice").unavailable_reason("cpu") is None
    assert "needs a CUDA device" in (sharing_mode("mps").unavailable_reason("cpu") or "")


def test_a_registered_mode_is_valid_in_specs_and_gets_thread_partitions(fair: list[str]) -> None:
    spec = spec_from_dict({"name": "t", "models": ["tiny_cnn", "resnet18"], "batch_sizes": [4],
                           "group_sizes": [1, 2], "sharing": ["fair"], "mps_thread_percentages": [25, 75]})
    labels = sorted(cell.mode_label for cell in expand_cells(spec) if cell.kind == "pair")
    assert labels == ["fair25", "fair75"]
    with pytest.raises(InputError, match="timeslice, mps, fair"):
        spec_from_dict({"name": "t", "models": ["tiny_cnn"], "batch_sizes": [4], "sharing": ["unfair"]})


def test_a_registered_mode_sets_up_and_tears_down_around_its_clients(fair: list[str]) -> None:
    with ExitStack() as stack:
        env = sharing_mode("fair").enter(stack, "3", 40)
        assert env == {"FAIR_SHARE": "40"} and fair == ["up 3 40"]
    assert fair == ["up 3 40", "down"]


def test_executors_take_a_registered_mode_from_the_registry(fair: list[str], tmp_path: Path) -> None:
    plan = build_plan(PAIR, applications={"a": "tiny_cnn", "b": "tiny_cnn"})
    (script,) = emit_slurm(plan, tmp_path / "slurm", RunSettings(), SlurmOptions())
    text = script.read_text()
    assert "start-fair-share" in text and "stop-fair-share" in text and "nvidia-cuda-mps-control" not in text
    assert text.index("start-fair-share") > text.index("trap cleanup EXIT")  # torn down by the trap
    pods = emit_k8s(plan, tmp_path / "k8s", RunSettings(), K8sOptions())
    assert all("nvidia.com/vgpu-mode: fair-core" in pod.read_text() for pod in pods)
    with pytest.raises(InputError, match="timeslice, mps, fair"):
        build_plan(PAIR, applications={"a": "tiny_cnn", "b": "tiny_cnn"}, sharing="unfair")


def test_the_worker_pool_takes_a_modes_service_and_environment_from_the_registry(tmp_path: Path) -> None:
    """A mode with a service: the pool starts it once, keys its workers by label, proves clients through it,
    and stops it (its tear-down hook) before a plain run; plain workers are isolated by the default hook."""
    from profiler.campaign.cells import Cell, JobType
    from profiler.campaign.pool import PLAIN, WorkerPool, mode_key
    from profiler.gpu.devices import resolve_device

    events: list[str] = []
    mode = SharingMode(
        "pooled", "pooled", thread_partitions=True,
        start_service=lambda pin, index: events.append(f"start {pin} {index}") or "handle",
        stop_service=lambda handle: events.append(f"stop {handle}") or True,
        worker_environment=lambda handle, root, env, pct: sharing.WorkerEnvironment({"POOLED": f"{handle}/{pct}"}),
        check_clients=lambda handle, workers: f"{handle}: {[pid for _, pid in workers]} not served")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sharing, "_REGISTRY", dict(sharing._REGISTRY))
        register_sharing_mode(mode)
        job = JobType("tiny_cnn", 2)
        assert mode_key(Cell((job, job), "pooled", 30)) == "pooled30"
        assert mode_key(Cell((job, job), "timeslice")) == mode_key(Cell((job,), "none")) == PLAIN
        spec = spec_from_dict({"name": "t", "models": ["tiny_cnn"], "batch_sizes": [2], "sharing": ["pooled"]})
        with WorkerPool(spec, resolve_device("cpu")) as pool:
            pool.open_service(mode)
            assert pool.daemon == "handle" and events == ["start None None"]
            assert pool.check_clients(Cell((job, job), "timeslice"), []) is None  # plain modes prove nothing
            assert pool.check_clients(Cell((job, job), "pooled", 30), []) == "handle: [] not served"
            assert mode.worker_environment(pool.daemon, tmp_path, {}, 30).env == {"POOLED": "handle/30"}
            pool._close_service()
            assert pool.daemon is None and events == ["start None None", "stop handle"]
    plain = sharing_mode("timeslice").worker_environment(None, tmp_path, {"OMP_NUM_THREADS": "1"}, None)
    assert plain.env == {"OMP_NUM_THREADS": "1", "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"),
                         "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "log")} and plain.pipe_dir == str(tmp_path / "pipe")
    assert sharing_mode("mps").start_service is not None and sharing_mode("timeslice").start_service is None
