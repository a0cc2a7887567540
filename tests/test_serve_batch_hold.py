"""A running job's batch changes only when the change pays for the restart of its group (``colocate serve``):
the hold on the real round ILP (HiGHS) with the learned goodput model, and a live server on the local backend."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from scheduler.executor.registry import make_executor
from scheduler.ilp.policy import PackingPolicy
from scheduler.learning.gradient_noise import GradientStats
from scheduler.learning.online import LearnedGoodputModel
from scheduler.model.cluster import cluster_from_dict
from scheduler.model.jobs import Job
from scheduler.model.policy import RoundContext
from scheduler.service.batch_hold import HeldBatchModel, batch_holds
from scheduler.service.config import LIVE_ILP, ServeConfig
from scheduler.service.jobs.jobspec import job_from_dict
from scheduler.service.server import Server
from scheduler.service.stability import StabilityConfig
from scheduler.service.state.store import StateStore
from tests.serve_helpers import kill_groups
from tests.test_serve_live_rules import _drive, _job  # the checkpoint-restore contract job and the round driver

CLUSTER = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}})
SPEC = job_from_dict({"name": "a", "model": "resnet18", "steps": 1000, "batch_size": 32, "min_batch_size": 16,
                      "max_batch_size": 64, "adaptive": True, "max_gpus": 1})


def _solo(batch: int, iter_time_s: float, count: int = 30) -> dict:
    return {"application": "resnet18", "gpu_type": "t4", "num_gpus": 1, "batch_size": batch, "partner_type": "",
            "iter_time_s": iter_time_s, "count": count}


# a job that has reported its gradient statistics (before that it keeps its job file's batch): all noise, so every
# batch is as efficient and throughput decides
REPORTED = {"a": GradientStats(0.0, 1.0)}
# what a ResNet-18 measured on one logical GPU of a loaded 2-core machine: batch 64 is 2.7 % faster than 32
NOISY = LearnedGoodputModel([_solo(32, 2.109), _solo(64, 4.109)], {"a": SPEC}, gradients=REPORTED)


def _running(name: str = "a", age_s: float = 60.0, restarts: int = 1, **fields: object) -> Job:
    return Job(name, "resnet18", batch_size=32, min_batch_size=16, max_batch_size=64, adaptive=True, age_s=age_s,
               restarts=restarts, current_gpu_type="t4", current_num_gpus=1, **fields)  # type: ignore[arg-type]


def _batch(model: object, jobs: list[Job]) -> dict[str, int]:
    decision = PackingPolicy(replace(ServeConfig().ilp, mip_gap=0.0)).allocate(jobs, CLUSTER, RoundContext(model))  # type: ignore[arg-type]
    return {a.job: a.batch_size for a in decision.allocations}


def test_a_batch_within_noise_of_the_current_one_does_not_restart_the_job() -> None:
    job = _running()
    assert NOISY.estimate(job, "t4", 1).batch_size == 64  # the model alone would move it to 64 ...
    assert _batch(NOISY, [job]) == {"a": 64}
    holds = batch_holds([job], {"a": 32}, {}, restart_cost_s=25.0, keep_bonus=0.02)
    assert holds["a"].need > 1.5  # (1 + 0.02) / ((60 - 25) / (60 + 25))
    assert _batch(HeldBatchModel(NOISY, holds), [job]) == {"a": 32}  # ... the hold keeps 32


def test_a_batch_that_pays_for_the_restart_is_taken() -> None:
    fast = LearnedGoodputModel([_solo(32, 2.109), _solo(64, 2.109)], {"a": SPEC},  # batch 64 at twice the rate
                               gradients=REPORTED)
    job = _running(age_s=10_000.0, restarts=0)
    holds = batch_holds([job], {"a": 32}, {}, restart_cost_s=25.0, keep_bonus=0.02)
    assert 1.02 < holds["a"].need < 1.03
    assert _batch(HeldBatchModel(fast, holds), [job]) == {"a": 64}
    # the same gain on a young job does not pay for its restart: T - N·S <= 0 leaves it nothing
    young = _running(age_s=20.0, restarts=1)
    assert batch_holds([young], {"a": 32}, {}, 25.0, 0.02)["a"].need == math.inf
    assert _batch(HeldBatchModel(fast, batch_holds([young], {"a": 32}, {}, 25.0, 0.02)), [young]) == {"a": 32}


def test_a_pinned_partner_holds_the_batch_and_every_member_pays_the_restart() -> None:
    old = _running(age_s=10_000.0, restarts=0)
    partner = Job("b", "tiny_cnn", batch_size=8, age_s=10_000.0, current_gpu_type="t4", current_num_gpus=1)
    alone = batch_holds([old, partner], {"a": 32, "b": 8}, {}, 25.0, 0.02)["a"].need
    paired = batch_holds([old, partner], {"a": 32, "b": 8}, {"a": ("b",)}, 25.0, 0.02)["a"].need
    assert paired > alone  # the partner restarts too
    pinned = Job("b", "tiny_cnn", batch_size=8, current_gpu_type="t4", current_num_gpus=1, pinned=True)
    assert batch_holds([old, pinned], {"a": 32, "b": 8}, {"a": ("b",)}, 25.0, 0.02)["a"].need == math.inf
    assert batch_holds([_running(pinned=True)], {"a": 32}, {}, 25.0, 0.02)["a"].need == math.inf


def test_the_hold_applies_only_on_the_current_gpus_and_to_adaptive_jobs() -> None:
    job = _running()
    held = HeldBatchModel(NOISY, batch_holds([job], {"a": 32}, {}, 25.0, 0.02))
    assert held.estimate(job, "t4", 1).batch_size == 32
    on_two = NOISY.estimate(job, "t4", 2)
    assert on_two is not None and held.estimate(job, "t4", 2) == on_two  # a new count restarts anyway
    rigid = Job("r", "resnet18", batch_size=32, current_gpu_type="t4", current_num_gpus=1, age_s=60.0)
    assert batch_holds([rigid], {"r": 32}, {}, 25.0, 0.02) == {}


def test_a_live_server_keeps_a_running_batch_within_noise_and_takes_one_that_pays(tmp_path: Path) -> None:
    state = StateStore(tmp_path / "state")
    one = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    # restarts nearly free and no minimum run: only the hold stands between a small gain and a restart
    config = ServeConfig(round_s=0.3, device="cpu", stop_grace_s=20.0, stability=StabilityConfig(min_run_s=0.0),
                         ilp=replace(LIVE_ILP, restart_cost_s=0.01))
    server = Server(state, one, make_executor("local"), config)
    server.acquire()

    def set_rate(batch: int, samples_per_s: float) -> None:
        with state.transaction() as db:
            db.execute("DELETE FROM measurements WHERE application = 'mine' AND batch_size = ? AND partner_type = ''",
                       (batch,))
            db.execute("INSERT INTO measurements VALUES ('mine', 't4', 1, ?, '', ?, 1000000)",
                       (batch, batch / samples_per_s))

    try:
        set_rate(16, 800.0)
        set_rate(32, 700.0)  # the job starts at 16, its best batch
        state.submit(_job(tmp_path, "a", 100_000, adaptive=True, min_batch_size=16, max_batch_size=32,
                          gradients=True))  # it reports statistics: its batch may change
        _drive(server, lambda: (state.job("a").state == "running" and state.job("a").step or 0) > 5, 120)
        assert state.job("a").batch_size == 16
        set_rate(32, 810.0)  # 1.25 % better: within the keep bonus (2 %), restarts all but free
        ran = iter(range(10))  # ten rounds, with what runs between them (a stop is collected there)
        _drive(server, lambda: next(ran, None) is None, 120)
        assert state.job("a").batch_size == 16 and state.job("a").restarts == 0
        assert [e["kind"] for e in state.events("a")] == ["submitted", "started"]
        set_rate(32, 1600.0)  # twice the rate: worth a restart
        _drive(server, lambda: state.job("a").batch_size == 32 and state.job("a").state == "running", 120)
        assert [e["kind"] for e in state.events("a")].count("resized") == 1
    finally:
        kill_groups(state.dir)
