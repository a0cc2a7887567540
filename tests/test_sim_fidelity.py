"""The simulator behaves as Sia's simulator does (siasosp23/artifacts ``sia-simulator``), item by item, and
never runs a pair that does not fit in memory."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from scheduler.formats.shared_data import shared_data_dir
from scheduler.formats.workload_jobs import Workload, WorkloadJob
from scheduler.ilp.columns import restart_factor
from scheduler.model.cluster import cluster_from_dict, load_cluster
from scheduler.model.colocation import ColocationTable
from scheduler.model.efficiency import read_validation_curves
from scheduler.model.goodput import GoodputEstimate
from scheduler.model.jobs import Job
from scheduler.model.policy import Allocation, JobPlacement, Placement, PolicyTraits, RoundContext
from scheduler.policies.common import Shape, make_decision
from scheduler.policies.gavel import GavelPolicy, _Option
from scheduler.sim.checks import SimulationError, check_group_memory
from scheduler.sim.config import SimConfig
from scheduler.sim.job_model import (
    MemoryCheckedTable,
    MemoryModel,
    scaled_table,
    sia_max_gpus,
    simulation_goodput_model,
)
from scheduler.sim.simulator import Simulator, resolve_policy, simulate

# Fidelity to Sia's simulator is checked on Sia's own traces (its GPU types and validation curves), which
# the project does not ship: these tests are paper reproduction, skipped without the shared data.
TRACES = shared_data_dir() / "sia" / "traces"
needs_traces = pytest.mark.sia_data
SIA64 = "scheduler/examples/sia-64gpu.yaml"


def _validation(app: str) -> dict[int, pd.DataFrame]:
    return {int(f.stem.split("-")[-1]): pd.read_csv(f) for f in (TRACES / app).glob("validation-*.csv")}


# ------------------------------------------------------------------ 1. efficiency at the job's own batch

@needs_traces
def test_efficiency_interpolates_the_validation_curves_at_the_batch_and_epoch():
    curves = read_validation_curves(TRACES, ["cifar10"])["cifar10"]
    raw = _validation("cifar10")
    # epoch 10 starts once progress passes the smallest progress any curve reached after 10 epochs
    boundary = min(df.progress[9] for df in raw.values())
    progress = boundary + 1.0
    assert curves.epoch(progress) == 10
    lo, hi, batch = 1024, 2048, 1536  # halfway between two validated batch sizes
    sqr = (raw[lo].grad_sqr[10] + raw[hi].grad_sqr[10]) / 2
    var = (raw[lo].grad_var[10] + raw[hi].grad_var[10]) / 2
    scale = batch / 128
    expected = (var + sqr) / (var / scale + sqr) / scale
    assert float(curves.efficiency(progress, batch)) == pytest.approx(expected, rel=1e-9)
    assert float(curves.efficiency(progress, 128)) == pytest.approx(1.0)


@needs_traces
def test_sia_efficiency_charges_large_batches_less_than_the_initial_gns_curve():
    sia = simulation_goodput_model(TRACES, ["cifar10"], ["dgx-ext"], efficiency="sia")
    gns = simulation_goodput_model(TRACES, ["cifar10"], ["dgx-ext"], efficiency="gns")
    job = Job("j", "cifar10", progress=5000.0)
    assert float(sia.efficiency(job, 4096.0)) > float(gns.efficiency(job, 4096.0))


# ------------------------------------------------------------------ 2. Gavel maximises total throughput

def _opt(name: str, gpus: int, steps_per_s: float) -> _Option:
    return _Option((name,), Shape("g", gpus, 1), (GoodputEstimate(10, steps_per_s * 10, 1.0),), (1.0,))


@pytest.mark.parametrize("objective", ["max_sum_throughput", "max_min"])
def test_gavel_objectives_differ_as_documented(objective):
    cluster = cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    jobs = [Job("fast", "x"), Job("slow", "y")]
    fractions = GavelPolicy(objective=objective)._solve(jobs, cluster, [_opt("fast", 1, 10.0), _opt("slow", 1, 1.0)])
    fast, slow = fractions.get((("fast",), "g"), 0.0), fractions.get((("slow",), "g"), 0.0)
    if objective == "max_sum_throughput":  # all time to the job with more iterations per second
        assert (fast, slow) == (pytest.approx(1.0), pytest.approx(0.0, abs=1e-6))
    else:  # equal normalised throughput: half each
        assert (fast, slow) == (pytest.approx(0.5), pytest.approx(0.5))


# ------------------------------------------------------------------ 3, 4, 7 on a one-job run

def _one_job(batch: int = 256, app: str = "cifar10") -> Workload:
    return Workload("one", (WorkloadJob(f"{app}-0", app, 0.0, 1, batch),))


@needs_traces
def test_adaptive_jobs_grow_their_batch_to_the_applications_maximum():
    runs = {mode: simulate(SIA64, _one_job(), "sia", config=SimConfig(batch=mode)) for mode in ("app-max", "workload")}
    grown = runs["app-max"].allocations["batch_size"].max()
    assert grown > 256
    assert runs["workload"].allocations["batch_size"].max() <= 256
    assert runs["app-max"].summary["avg_jct_s"] < runs["workload"].summary["avg_jct_s"]


@needs_traces
def test_new_jobs_start_on_one_gpu_and_at_most_double_each_round():
    boot = simulate(SIA64, _one_job(), "sia").allocations.sort_values("round")
    sizes = boot["num_gpus"].tolist()
    assert sizes[0] == 1
    assert all(b <= 2 * a for a, b in itertools.pairwise(sizes))
    assert max(sizes) >= 4
    oracle = simulate(SIA64, _one_job(), "sia", config=SimConfig(throughput="oracle")).allocations
    assert oracle.sort_values("round")["num_gpus"].iloc[0] > 1


@needs_traces
def test_gpu_cap_is_twice_the_observed_and_at_most_64():
    cluster = load_cluster(SIA64)
    model = simulation_goodput_model(TRACES, ["cifar10", "bert"], cluster.type_names)
    assert sia_max_gpus(model, cluster, "cifar10", 0) == 1
    assert sia_max_gpus(model, cluster, "cifar10", 3) == 6
    assert sia_max_gpus(model, cluster, "cifar10", 40) == 64
    assert sia_max_gpus(model, cluster, "cifar10", None) == 64  # 4096 // 32 = 128, then the 64 cap


# ------------------------------------------------------------------ 5. restarts on a change of shape

def _restart_sim(restart_on: str) -> tuple[Simulator, object]:
    cluster = cluster_from_dict({"gpu_types": {"g": {"nodes": 2, "gpus_per_node": 2, "memory_gb": 16}}})
    from scheduler.model.goodput import TableGoodputModel

    model = TableGoodputModel({("a", "g", 1): 1.0, ("a", "g", 2): 2.0})
    work = Workload("w", (WorkloadJob("A", "a", 0.0, 1, 32, work=1e6),))
    policy, adaptive, _ = resolve_policy("fifo")
    sim = Simulator(cluster, work, policy, model, None, SimConfig(restart_on=restart_on), adaptive=adaptive)
    from scheduler.sim.simulator import _Run

    run = _Run(pending=list(sim.states.values()))
    sim._arrivals(run)
    return sim, run


@pytest.mark.parametrize("restart_on, expected", [("placement", [0, 0, 1]), ("shape", [0, 0, 1]), ("gpus", [0, 1, 2])])
def test_restart_rule_shape_versus_gpu_indices(restart_on, expected):
    sim, run = _restart_sim(restart_on)
    job = Job("A", "a")
    counts = []
    # same shape on GPU 0, then GPU 1 of another node (a move), then two GPUs (a new shape)
    for gpus, node, gpu in ((1, 0, (0,)), (1, 1, (1,)), (2, 1, (0, 1))):
        alloc = Allocation("A", "g", gpus, 32)
        decision = make_decision([job], [alloc], "scripted", 0.0)
        placement = Placement({"A": JobPlacement("A", "g", (node,), gpu)}, ())
        sim._apply(run, decision, placement)
        counts.append(run.active["A"].restarts)
    assert counts == expected


# ------------------------------------------------------------------ 6. per-application restart penalty

def test_ilp_uses_the_jobs_own_restart_penalty():
    job = Job("a", "imagenet", age_s=1000, restarts=2, restart_cost_s=250)
    assert restart_factor(job, 25) == pytest.approx((1000 - 500) / 1250)
    assert restart_factor(job.with_state(restart_cost_s=None), 25) == pytest.approx((1000 - 50) / 1025)


@needs_traces
def test_views_carry_sias_penalty_per_application():
    cluster = load_cluster(SIA64)
    work = Workload("w", (WorkloadJob("imagenet-0", "imagenet", 0.0, 1, 200),
                          WorkloadJob("bert-0", "bert", 0.0, 1, 12)))
    policy, adaptive, _ = resolve_policy("sia")
    sim = Simulator(cluster, work, policy, simulation_goodput_model(TRACES, ["imagenet", "bert"], cluster.type_names),
                    None, SimConfig(), adaptive=adaptive)
    views = {n: sim._view(st, 0.0) for n, st in sim.states.items()}
    assert views["imagenet-0"].restart_cost_s == 250 and views["bert-0"].restart_cost_s == 120


# ------------------------------------------------------------------ 8. pair memory

@needs_traces
def test_memory_model_lets_a_job_alone_fit_and_rejects_two_large_ones():
    cluster = load_cluster(SIA64)
    memory = MemoryModel(simulation_goodput_model(TRACES, ["cifar10", "imagenet"], cluster.type_names), cluster)
    alone = memory.footprint_gb("cifar10", "rtx", 1024)
    assert alone + memory.context_gb == pytest.approx(11.0)
    assert not memory.group_fits("rtx", ("cifar10", 1024), ("cifar10", 1024))
    assert memory.group_fits("rtx", ("cifar10", 256), ("cifar10", 256))
    assert memory.group_fits("dgx-ext", ("cifar10", 1024), ("cifar10", 1024))
    a, b = memory.group_locals("rtx", ("cifar10", 1024), ("imagenet", 200))
    assert memory.group_fits("rtx", ("cifar10", a), ("imagenet", b)) and a < 1024 and b < 200
    with pytest.raises(SimulationError, match="GB"):
        check_group_memory(3, 180.0, "rtx", [("x", "cifar10", 1024), ("y", "cifar10", 1024)], memory)


@needs_traces
def test_memory_checked_table_hides_pairs_that_cannot_fit():
    cluster = load_cluster(SIA64)
    memory = MemoryModel(simulation_goodput_model(TRACES, ["imagenet"], cluster.type_names), cluster)
    table = MemoryCheckedTable(ColocationTable.from_rows([(t, "imagenet", "imagenet", 0.7, 0.7) for t in
                                                          cluster.type_names]).ratios, memory)
    big = Job("a", "imagenet", num_gpus=1, batch_size=200)
    small = Job("b", "imagenet", num_gpus=4, batch_size=160)  # 40 per GPU
    assert table.lookup("rtx", big, big) is None
    assert table.lookup("rtx", small, small) == (0.7, 0.7)
    assert table.lookup("dgx-ext", big, big) == (0.7, 0.7)


def _rtx_only():
    return cluster_from_dict({"gpu_types": {"rtx": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 11}}})


def _big_batch_jobs() -> Workload:
    jobs = tuple(WorkloadJob(f"cifar10-{i}", "cifar10", 0.0, 1, 1024, work=2e6) for i in range(6))
    return Workload("big", jobs)


@needs_traces
@pytest.mark.parametrize("policy", ["gavel-packed", "gandiva"])
def test_no_policy_packs_a_pair_that_does_not_fit(policy):
    """Rigid jobs at the largest batch an RTX 2080Ti holds: no pair fits. (The ILP reads the same table;
    adaptive jobs may shrink their micro-batches, which the progress step checks every round.)"""
    table = ColocationTable.from_rows([("rtx", "cifar10", "cifar10", 0.75, 0.75)])
    base = {"round_s": 60.0, "max_time_s": 1800.0}
    checked = simulate(_rtx_only(), _big_batch_jobs(), policy, colocation=table, config=SimConfig(**base))
    assert checked.summary["packed_fraction"] == 0.0
    unchecked = simulate(_rtx_only(), _big_batch_jobs(), policy, colocation=table,
                         config=SimConfig(memory=False, **base))
    assert unchecked.summary["packed_fraction"] > 0.0  # the same runs pack when memory is not checked


@needs_traces
def test_a_scripted_pair_that_does_not_fit_is_an_invariant_violation():
    class PackEverything:
        name, traits = "scripted", PolicyTraits(max_group_size=2)

        def allocate(self, jobs, cluster, context: RoundContext):
            a, b = jobs[0], jobs[1]
            allocs = [Allocation(a.name, "rtx", 1, 1024, b.name), Allocation(b.name, "rtx", 1, 1024, a.name)]
            return make_decision(jobs, allocs, "scripted", 0.0)

    jobs = Workload("two", _big_batch_jobs().jobs[:2])
    table = ColocationTable.from_rows([("rtx", "cifar10", "cifar10", 0.75, 0.75)])
    with pytest.raises(SimulationError, match="memory|GB"):
        simulate(_rtx_only(), jobs, PackEverything(), colocation=table, adaptive=False)


# ------------------------------------------------------------------ sensitivity helper

def test_scaled_table_moves_the_pair_benefit_and_keeps_infeasible_pairs():
    table = ColocationTable.from_rows([("g", "a", "b", 0.7, 0.5), ("g", "a", "c", 0.0, 0.0)])
    weak, strong = scaled_table(table, 0.5), scaled_table(table, 1.5)
    assert sum(weak.ratios[("g", "a", "b")]) == pytest.approx(1.1)
    assert sum(strong.ratios[("g", "a", "b")]) == pytest.approx(1.3)
    assert weak.ratios[("g", "a", "c")] == (0.0, 0.0)
    assert np.allclose(scaled_table(table, 1.0).ratios[("g", "a", "b")], (0.7, 0.5))


def test_sia_log_summary_reads_the_last_round(tmp_path):
    from scheduler.formats.sia_reference import summarize_sia_log

    rounds = [{"timestamp": 60, "submitted_jobs": [{"name": "a-0", "submission_time": 0, "completion_time": None,
                                                     "num_restarts": None}]},
              {"timestamp": 7260, "submitted_jobs": [
                  {"name": "a-0", "submission_time": 0, "completion_time": 3600, "num_restarts": 2},
                  {"name": "b-1", "submission_time": 60, "completion_time": 7260, "num_restarts": 1}]}]
    log = tmp_path / "sia.log"
    log.write_text("\n".join(__import__("json").dumps(r) for r in rounds) + "\n")
    s = summarize_sia_log(log)
    assert (s["jobs"], s["completed"], s["restarts"]) == (2, 2, 3)
    assert s["avg_jct_h"] == pytest.approx(1.5)
    assert s["per_app_jct_s"] == {"a": 3600.0, "b": 7200.0}
    assert s["per_app_restarts"] == {"a": 2, "b": 1}
    from common.errors import InputError

    (tmp_path / "bad.log").write_text("{not json\n")
    with pytest.raises(InputError, match="bad.log"):
        summarize_sia_log(tmp_path / "bad.log")
