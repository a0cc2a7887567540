"""Protocol details on CPU: serial warm-up, warm workers, same-GPU baselines, memory columns, precision, OOM."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from common.errors import InputError
from profiler.campaign.cells import Cell, JobType, Run, plan_runs
from profiler.campaign.driver import baselines_from, check_resumable, run_campaign
from profiler.campaign.pool import WorkerPool
from profiler.campaign.runner import _coordinate, not_run_record
from profiler.campaign.spec import spec_from_dict
from profiler.gpu.devices import resolve_device
from profiler.measure.worker import is_out_of_memory
from profiler.results.store import ResultsStore

TINY = {"name": "proto", "device": "cpu", "models": ["tiny_cnn"], "batch_sizes": [2], "group_sizes": [1, 2],
        "repetition": True, "sharing": ["timeslice"], "warmup_iters": 3, "min_window_iters": 4, "repeats": 2}


@pytest.mark.slow
def test_group_members_warm_up_one_at_a_time_before_the_barrier() -> None:
    spec = spec_from_dict(TINY)
    target = resolve_device("cpu")
    job = JobType("tiny_cnn", 2)
    with WorkerPool(spec, target) as pool:
        workers = pool.acquire(Cell((job, job, job), "timeslice"))
        try:
            timings, results, _ = _coordinate(workers, pool, spec, target, None, None)
        finally:
            pool.release(workers, healthy=True)
    spans = sorted(result["warmup_span"] for result in results)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start  # no two members warm up at the same time
    assert spans[-1][1] <= min(t.start for t in timings)  # all warm before any is timed
    assert all(result["peak_reserved_mib"] >= 0 for result in results)


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["warm", "fresh"])
def test_warm_workers_serve_every_run_of_their_job_type_and_fresh_ones_one(tmp_path: Path, workers: str) -> None:
    spec = spec_from_dict({**TINY, "name": f"w-{workers}", "workers": workers})
    pids: dict[str, list[int]] = {}
    store = run_campaign(spec, tmp_path, on_run_start=lambda run, p: pids.setdefault(run.run_id, list(p)))
    assert set(store.runs()["status"]) == {"ok"}
    every = [pid for run_pids in pids.values() for pid in run_pids]
    if workers == "warm":
        # solos and pairs of tiny_cnn@2 are one block: two processes serve all four runs
        assert len(set(every)) == 2
    else:
        assert len(set(every)) == len(every) == 2 + 2 * 2
    session = store.read_meta()["sessions"][-1]
    assert 0 < session["efficiency"] < 1


def test_a_results_directory_refuses_another_gpu_model_and_keeps_old_meta_readable(tmp_path: Path) -> None:
    spec = spec_from_dict({**TINY, "device": "cuda"})
    store = ResultsStore(tmp_path)
    old_spec = {k: v for k, v in spec.to_dict().items() if k not in ("seq_len", "workers")}  # an older meta.json
    store.write_meta({"spec": old_spec, "device": {"name": "NVIDIA H100 80GB HBM3"}})
    check_resumable(store, spec, tmp_path, "NVIDIA H100 80GB HBM3")  # same GPU, missing keys = defaults
    with pytest.raises(InputError, match="measured on 'NVIDIA H100 80GB HBM3'.*'NVIDIA H200'"):
        check_resumable(store, spec, tmp_path, "NVIDIA H200")


def test_solo_baselines_come_from_rows_of_the_same_gpu_type(tmp_path: Path) -> None:
    spec = spec_from_dict({**TINY, "group_sizes": [1]})
    run = plan_runs(spec)[0]
    store = ResultsStore(tmp_path)
    for gpu_type, seconds in (("h100", 0.010), ("h200", 0.008)):
        record = not_run_record(run, spec, resolve_device("cpu"), "ok", "")
        record.run.update(run_id=f"{gpu_type}-{run.run_id}", gpu_type=gpu_type)
        for job in record.jobs:
            job.update(run_id=f"{gpu_type}-{run.run_id}", iter_time_s=seconds, peak_memory_mib=100.0,
                       nvml_process_memory_mib=600.0)
        store.append_run(record.run, record.jobs)
    job = run.cell.jobs[0]
    assert baselines_from(store, "h100", typed_cells=False)[job].iter_time_s == pytest.approx(0.010)
    assert baselines_from(store, "h200", typed_cells=False)[job].iter_time_s == pytest.approx(0.008)
    base = baselines_from(store, "h100", typed_cells=False)[job]
    assert base.process_memory_mib == 600.0 and base.memory_need_mib(512) == 600.0  # NVML figure wins


@pytest.mark.slow
def test_memory_and_precision_columns_and_bf16_groups(tmp_path: Path) -> None:
    spec = spec_from_dict({**TINY, "name": "prec", "precision": ["fp32", "bf16"], "repeats": 1})
    store = run_campaign(spec, tmp_path)
    runs, jobs = store.runs(), store.jobs()
    assert set(runs["status"]) == {"ok"}
    assert set(runs["precision"]) == {"fp32", "bf16"}
    assert "pair|timeslice|tiny_cnn@2:bf16+tiny_cnn@2:bf16" in set(runs["cell_id"])
    assert set(jobs["job_type"]) == {"tiny_cnn@2", "tiny_cnn@2:bf16"}
    bf16_pair = jobs[jobs["cell_id"] == "pair|timeslice|tiny_cnn@2:bf16+tiny_cnn@2:bf16"]
    bf16_solo = jobs[jobs["cell_id"] == "solo|none|tiny_cnn@2:bf16"]
    assert bf16_pair["solo_iter_time_s"].iloc[0] == pytest.approx(bf16_solo["iter_time_s"].iloc[0])
    assert (jobs["peak_allocated_mib"] >= 0).all() and jobs["nvml_process_memory_mib"].isna().all()  # no NVML


def test_out_of_memory_is_recognised_however_it_surfaces() -> None:
    import torch

    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert is_out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate`"))
    assert is_out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB"))
    assert not is_out_of_memory(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not is_out_of_memory(ValueError("shape mismatch"))


def test_cuda_campaigns_get_a_window_floor_and_a_lease_sized_timeout() -> None:
    cuda = spec_from_dict({**TINY, "device": "cuda"})
    assert cuda.min_window_seconds == 2.0 and cuda.run_timeout_s == 120.0
    cpu = spec_from_dict(TINY)
    assert cpu.min_window_seconds is None and cpu.run_timeout_s == 600.0
    assert spec_from_dict({**TINY, "device": "cuda", "min_window_seconds": 5}).min_window_seconds == 5.0
    for key, value, message in (("precision", ["fp16"], "precision[0]"), ("workers", "hot", "workers"),
                                ("seq_len", 4096, "seq_len")):
        with pytest.raises(InputError, match=re.escape(message)):
            spec_from_dict({**TINY, key: value})


def test_a_cut_off_after_one_batch_size_leaves_its_groups_with_baselines() -> None:
    spec = spec_from_dict({**TINY, "batch_sizes": [2, 4], "group_sizes": [1, 2, 3], "repeats": 1})
    runs = plan_runs(spec)
    # a cut-off after the first batch size's block leaves every group of batch 2 with its solos measured
    first_block = [r for r in runs if r.cell.batch_key == 2]
    assert runs[: len(first_block)] == first_block
    solos = {r.cell.jobs[0] for r in first_block if r.cell.kind == "solo"}
    assert all(job in solos for r in first_block for job in r.cell.jobs)


def test_unused_run_record_keeps_run_identity() -> None:
    spec = spec_from_dict(TINY)
    run = Run(Cell((JobType("tiny_cnn", 2),), "none"), 0)
    record = not_run_record(run, spec, resolve_device("cpu"), "skipped", "why")
    assert record.run["precision"] == "fp32" and record.jobs[0]["precision"] == "fp32"
