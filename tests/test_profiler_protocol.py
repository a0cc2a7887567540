"""Protocol details on CPU: serial warm-up, warm workers, same-GPU baselines, memory columns, precision, OOM."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from common.errors import InputError
from profiler.campaign.cells import Cell, JobType, Run, plan_runs
from profiler.campaign.driver import baselines_from, check_resumable, run_campaign, runs_to_measure
from profiler.campaign.pool import WorkerPool
from profiler.campaign.runner import SoloBaseline, _coordinate, not_run_record
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
    hellos = [float((worker.hello or {})["at"]) for worker in workers]
    assert max(hellos) <= spans[0][0]  # every member built (hello) before the first one warms up
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start  # no two members warm up at the same time
    assert spans[-1][1] <= min(t.start for t in timings)  # all warm before any is timed
    assert all(result["peak_reserved_mib"] >= 0 for result in results)


def _recv(conn, tag: str, timeout_s: float = 60.0):
    """The next message tagged ``tag`` from a worker (others, e.g. progress, are skipped)."""
    while conn.poll(timeout_s):
        message = conn.recv()
        assert message[0] != "error", message
        if message[0] == tag:
            return message
    raise AssertionError(f"no {tag!r} from the worker within {timeout_s} s")


@pytest.mark.slow
def test_a_job_stops_only_after_an_iteration_ends_past_the_coordinators_stop() -> None:
    """A job that ended an iteration and then lost the CPU before it read the stop would end the common window
    before the iterations its partners were counted for (3 of 4 in a CI run): it runs until one ends later."""
    spec = spec_from_dict(TINY)
    with WorkerPool(spec, resolve_device("cpu")) as pool:
        (worker,) = pool.acquire(Cell((JobType("tiny_cnn", 2),), "timeslice"))
        try:
            _recv(worker.conn, "hello")
            worker.conn.send(("warmup", 1))
            _recv(worker.conn, "ready")
            worker.conn.send(("go",))
            started = float(_recv(worker.conn, "started")[1])
            worker.conn.send(("window", started))
            # a stop stamped later than the worker's last end: what a worker preempted after an iteration sees
            stop_at = time.perf_counter() + 0.5
            worker.conn.send(("stop", stop_at))
            result = _recv(worker.conn, "result")[1]
        finally:
            pool.release([worker], healthy=True)
    assert result["ends"][-1] >= stop_at
    assert result["ends"][0] < stop_at - 0.2  # it was not idle meanwhile: it kept iterating


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
    assert base.process_memory_mib == 600.0
    assert base.memory_need_mib(512) == 612.0  # an NVML figure below the allocator peak + headroom never wins
    assert base.memory_need_mib(100) == 600.0  # ... and one above it does


def test_a_pairs_baselines_come_from_solos_of_its_own_session(tmp_path: Path) -> None:
    spec = spec_from_dict({**TINY, "group_sizes": [1], "repeats": 1})
    run = plan_runs(spec)[0]
    store = ResultsStore(tmp_path)
    for session, seconds, status in (("s-old", 0.010, "ok"), ("s-new", 0.020, "ok")):
        record = not_run_record(run, spec, resolve_device("cpu"), status, "", session_id=session)
        record.run.update(run_id=f"{session}-{run.run_id}")
        for job in record.jobs:
            job.update(run_id=f"{session}-{run.run_id}", iter_time_s=seconds)
        store.append_run(record.run, record.jobs)
    runs = store.runs()
    assert set(runs["session_id"]) == {"s-old", "s-new"} and runs["host"].notna().all()
    job = run.cell.jobs[0]
    assert baselines_from(store, session_id="s-new")[job].iter_time_s == pytest.approx(0.020)
    assert baselines_from(store, session_id="s-other") == {}  # another session's times are never used
    assert baselines_from(store)[job].iter_time_s == pytest.approx(0.015)  # no session given: all rows


def test_a_resumed_block_measures_its_solos_again_but_not_infeasible_ones() -> None:
    spec = spec_from_dict({**TINY, "batch_sizes": [2, 4], "repetition": True, "repeats": 1})
    planned = plan_runs(spec)
    solos = {r.cell.jobs[0].batch_size: r for r in planned if r.cell.kind == "solo"}
    finished = {solos[2].run_id, solos[4].run_id}  # an earlier session measured both solos, no pair
    todo = runs_to_measure(planned, finished, {})
    assert [r.run_id for r in todo] == [r.run_id for r in planned]  # both solos again, before their pairs
    pair4 = next(r for r in planned if r.cell.kind == "pair" and r.cell.batch_key == 4)
    finished |= {r.run_id for r in planned if r.cell.batch_key == 2}
    infeasible = {solos[4].cell.jobs[0]: SoloBaseline(None, None, "infeasible", "out of memory")}
    todo = runs_to_measure(planned, finished, infeasible)
    assert [r.run_id for r in todo] == [pair4.run_id]  # batch 2 done; batch 4's solo did not fit: not again


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
