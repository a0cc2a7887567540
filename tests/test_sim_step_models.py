"""True step times interpolated from the profile rows, and the throughput a scheduler learns from the
configurations a job ran (scheduler.learning.throughput), as Sia's simulator models both."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from common.errors import InputError
from scheduler.formats.shared_data import shared_data_dir
from scheduler.formats.workload_jobs import Workload, WorkloadJob
from scheduler.learning.throughput import LearnedThroughputGoodput, ThroughputLearner, fit_observed
from scheduler.model.cluster import cluster_from_dict, load_cluster
from scheduler.model.configs import Configuration
from scheduler.model.goodput import ProfileGoodputModel
from scheduler.model.jobs import Job
from scheduler.model.step_time import StepTimeModel, StepTimes
from scheduler.sim.config import SimConfig
from scheduler.sim.job_model import AccumulatingGoodput, simulation_goodput_model
from scheduler.sim.simulator import Simulator, resolve_policy, simulate

TRUE = StepTimeModel(alpha_c=0.05, beta_c=0.002, alpha_r=0.02, beta_r=0.004, alpha_n=0.08, beta_n=0.01)


def _rows(gpu: str = "a", shapes=((1, 1), (2, 1), (4, 1), (8, 2)), batches=(16, 32, 64), model=TRUE,
          bump: float = 1.0) -> pd.DataFrame:
    """Profile rows from a known model; ``bump`` scales the 2-GPU rows so a fit cannot pass through them."""
    rows = []
    for n, k in shapes:
        for m in batches:
            step = float(model.step_time(m, n, k)) * (bump if n == 2 else 1.0)
            sync = step - (model.alpha_c + model.beta_c * m) if n > 1 else 0.0
            rows.append({"application": "x", "gpu_type": gpu, "num_nodes": k, "num_gpus": n, "local_bsz": float(m),
                         "step_time": step, "sync_time": sync})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ true step times

def test_interpolated_step_times_pass_through_the_rows_and_are_linear_between_them():
    rows = _rows(bump=1.3)
    steps = StepTimes(rows, "interpolated")
    two = rows[(rows.num_gpus == 2)].set_index("local_bsz")["step_time"]
    got = steps.step_time("x", "a", np.array([16.0, 32.0, 24.0]), 2, 1)
    assert got[:2] == pytest.approx([two[16.0], two[32.0]])
    assert got[2] == pytest.approx((two[16.0] + two[32.0]) / 2)  # halfway, linearly
    # the fit cannot follow the bumped rows; the fitted mode keeps measured points only where measured
    fitted = StepTimes(rows, "fitted")
    assert fitted.step_time("x", "a", np.array([16.0]), 2, 1)[0] == pytest.approx(two[16.0])
    assert fitted.step_time("x", "a", np.array([24.0]), 2, 1)[0] != pytest.approx(got[2], rel=1e-3)


def test_an_unprofiled_shape_is_interpolated_across_gpu_counts_and_falls_back_to_the_fit_outside():
    steps = StepTimes(_rows(), "interpolated")
    t2, t4 = (steps.step_time("x", "a", np.array([32.0]), n, 1)[0] for n in (2, 4))
    t3 = steps.step_time("x", "a", np.array([32.0]), 3, 1)[0]
    assert min(t2, t4) <= t3 <= max(t2, t4)
    step, sync = steps.times("x", "a", np.array([32.0]), 3, 1)
    assert 0 < sync[0] < step[0]
    beyond = steps.step_time("x", "a", np.array([32.0]), 16, 4)[0]  # outside every row: the fit's value
    assert beyond == pytest.approx(float(steps.models[("x", "a")].step_time(32.0, 16, 4)))


def test_interpolation_across_shapes_is_scipys_piecewise_linear_one():
    from scipy.interpolate import LinearNDInterpolator

    rows = _rows(bump=1.2)
    steps = StepTimes(rows, "interpolated")
    reference = LinearNDInterpolator(rows[["num_nodes", "num_gpus", "local_bsz"]].to_numpy(float),
                                     rows[["step_time", "sync_time"]].to_numpy(float))
    local = np.array([20.0, 40.0, 60.0])
    for n, k in ((3, 1), (5, 2), (6, 2)):
        ours = steps._interp[("x", "a")].times(local, n, k)
        theirs = reference(np.column_stack([np.full(3, k), np.full(3, n), local]))
        assert np.allclose(ours[0], theirs[:, 0], equal_nan=True)
        assert np.allclose(ours[1], theirs[:, 1], equal_nan=True)


def test_unknown_step_time_mode_is_refused():
    with pytest.raises(ValueError, match="interpolated, fitted"):
        StepTimes(_rows(), "exact")


# ------------------------------------------------------------------ the fit on what a job ran

def test_one_point_on_one_gpu_believes_perfect_scaling_and_half_fixed_cost():
    model = fit_observed([1], [1], [32.0], [0.2], [0.0])
    assert model.alpha_c == pytest.approx(0.1) and model.beta_c == pytest.approx(0.1 / 32)
    assert float(model.step_time(32.0, 8, 2)) == pytest.approx(0.2, rel=1e-6)  # no all-reduce cost yet


def test_the_fit_recovers_a_linear_model_and_keeps_cross_node_no_faster_than_inside():
    n, k, m = [1, 1, 2, 4, 2, 4], [1] * 6, [16.0, 64.0, 16.0, 16.0, 64.0, 64.0]
    step = [float(TRUE.step_time(mi, ni, ki)) for mi, ni, ki in zip(m, n, k)]
    sync = [s - (TRUE.alpha_c + TRUE.beta_c * mi) if ni > 1 else 0.0 for s, mi, ni in zip(step, m, n)]
    model = fit_observed(k, n, m, step, sync)
    assert (model.alpha_c, model.beta_c) == (pytest.approx(TRUE.alpha_c), pytest.approx(TRUE.beta_c))
    assert (model.alpha_r, model.beta_r) == (pytest.approx(TRUE.alpha_r), pytest.approx(TRUE.beta_r))
    assert model.gamma == 1.0
    assert model.alpha_n == pytest.approx(1.1 * TRUE.alpha_r) and model.beta_n == pytest.approx(1.1 * TRUE.beta_r)


def test_learner_keeps_the_first_measurement_and_refits_only_on_new_points():
    learner = ThroughputLearner()
    assert learner.model("j", "a") is None and learner.max_gpus("j") == 0
    assert learner.observe("j", "a", 1, 1, 32, 0.2, 0.0)
    assert not learner.observe("j", "a", 1, 1, 32, 0.5, 0.0)  # the same configuration again
    first = learner.model("j", "a")
    assert learner.model("j", "a") is first and learner.fits == 1
    learner.observe("j", "b", 1, 2, 32, 0.3, 0.1)
    assert learner.gpu_types("j") == ["a", "b"] and learner.max_gpus("j") == 2 and learner.version("j") == 2
    assert learner.knows("j", "b", 1, 2, 32.0) and not learner.knows("j", "b", 1, 4, 32.0)
    learner.forget("j")
    assert learner.gpu_types("j") == [] and learner.model("j", "a") is None


def test_jobs_that_measured_the_same_points_share_one_fit_and_one_answer_bit_for_bit():
    belief, _ = _belief()
    configs = (Configuration("a", 1, 1), Configuration("a", 1, 4), Configuration("b", 1, 4), Configuration("b", 2, 8))
    first, second = (Job(name, "x", adaptive=True, max_batch_size=256) for name in ("j1", "j2"))
    for job in (first, second):
        belief.learner.observe(job.name, "a", 1, 1, 32.0, 0.2, 0.0)
        belief.learner.observe(job.name, "a", 1, 2, 32.0, 0.3, 0.08)
    shared = belief.estimate_arrays(first, configs)
    assert belief.estimate_arrays(second, configs) is shared and belief.learner.fits == 1
    # what a belief that never saw the first job answers for the second: the same, to the last bit
    alone, _ = _belief()
    alone.learner.observe("j2", "a", 1, 1, 32.0, 0.2, 0.0)
    alone.learner.observe("j2", "a", 1, 2, 32.0, 0.3, 0.08)
    fresh = alone.estimate_arrays(second, configs)
    for name in ("goodput", "batch_size", "throughput", "efficiency"):
        assert np.array_equal(getattr(fresh, name), getattr(shared, name), equal_nan=True)
    # once one of them measures something new it has its own fit and answer
    belief.learner.observe("j2", "a", 1, 4, 32.0, 0.5, 0.25)
    assert belief.estimate_arrays(second, configs) is not shared and belief.learner.fits == 2
    assert belief.estimate_arrays(first, configs) is shared


# ------------------------------------------------------------------ the policy's belief

def _belief(blind_first_run: bool = False):
    rows = pd.concat([_rows("a"), _rows("b", model=StepTimeModel(0.1, 0.004, 0.02, 0.004, 0.08, 0.01))])
    cluster = cluster_from_dict({"gpu_types": {"a": {"nodes": 2, "gpus_per_node": 4, "memory_gb": 16},
                                               "b": {"nodes": 2, "gpus_per_node": 4, "memory_gb": 16}}})
    inner = AccumulatingGoodput(ProfileGoodputModel(rows, step_times="interpolated"))
    return LearnedThroughputGoodput(inner, cluster, blind_first_run=blind_first_run), inner


def test_a_blind_belief_values_a_never_run_job_alike_everywhere_until_it_ran():
    blind, inner = _belief(blind_first_run=True)
    profiled, _ = _belief()
    job = Job("j", "x", adaptive=True, max_batch_size=256)
    configs = (Configuration("a", 1, 1), Configuration("b", 1, 1), Configuration("a", 1, 4))
    truth = inner.estimate_arrays(job, configs)
    assert truth.goodput[0] != pytest.approx(truth.goodput[1])  # the profiles tell the types apart ...
    before = blind.estimate_arrays(job, configs)
    assert np.allclose(before.goodput, truth.goodput.min(), rtol=2e-3)  # ... the blind belief does not,
    assert before.goodput[0] == before.goodput[2] > before.goodput[1]  # but for its tie-break: first-listed type
    assert np.array_equal(before.batch_size, truth.batch_size) and np.array_equal(before.throughput, truth.throughput)
    again = blind.estimate_arrays(job, configs)
    assert np.array_equal(again.goodput, before.goodput)  # nothing learned, nothing changes
    assert np.allclose(profiled.estimate_arrays(job, configs).goodput, truth.goodput)
    for belief in (blind, profiled):
        belief.learner.observe("j", "a", 1, 1, 32.0, 0.2, 0.0)
    after = blind.estimate_arrays(job, configs)  # once it ran, the fit and its projection, as without blindness
    assert np.allclose(after.goodput, profiled.estimate_arrays(job, configs).goodput)
    assert after.goodput[0] != pytest.approx(after.goodput[1])


def test_belief_is_the_base_model_until_the_job_ran_then_the_fit_and_its_projection():
    belief, inner = _belief()
    job = Job("j", "x", adaptive=True, max_batch_size=256)
    configs = (Configuration("a", 1, 4), Configuration("b", 1, 4))
    before = belief.estimate_arrays(job, configs)
    assert np.allclose(before.goodput, inner.estimate_arrays(job, configs).goodput)
    belief.learner.observe("j", "a", 1, 1, 32.0, 0.2, 0.0)
    after = belief.estimate_arrays(job, configs)
    fit = belief.learner.model("j", "a")
    batch = after.batch_size[0]
    assert after.throughput[0] == pytest.approx(batch / float(fit.step_time(batch / 4, 4, 1)))
    ratio = belief.ratio("x", "b", "a")
    assert ratio == pytest.approx(inner.throughput("x", "b", 1, 64) / inner.throughput("x", "a", 1, 64))
    assert after.goodput[1] == pytest.approx(after.goodput[0] * ratio)  # projected from the type it ran on
    assert belief.estimate_arrays(job, configs) is after  # kept while nothing new was learned ...
    belief.learner.observe("j", "a", 1, 4, 64.0, 0.6, 0.3)  # ... and recomputed once it was
    slower = belief.estimate_arrays(job, configs)
    assert slower is not after and slower.throughput[0] < after.throughput[0]
    assert belief.max_observed("j") == 4


# ------------------------------------------------------------------ in the simulator (Sia's traces)

TRACES = shared_data_dir() / "sia" / "traces"
SIA64 = "scheduler/examples/sia-64gpu.yaml"


@pytest.mark.sia_data
def test_the_simulator_learns_each_configuration_a_job_ran():
    cluster = load_cluster(SIA64)
    work = Workload("one", (WorkloadJob("cifar10-0", "cifar10", 0.0, 1, 256),))
    policy, adaptive, _ = resolve_policy("sia")
    sim = Simulator(cluster, work, policy, simulation_goodput_model(TRACES, ["cifar10"], cluster.type_names,
                                                              step_times="interpolated"), None, SimConfig(),
                    adaptive=adaptive)
    result = sim.run()
    assert isinstance(sim.belief, LearnedThroughputGoodput)
    ran = {(r.gpu_type, r.num_gpus) for r in result.allocations.itertuples()}
    learned = {(t, key[1]) for t, seen in sim.belief.learner.points["cifar10-0"].items() for key in seen}
    assert learned == ran
    assert sim.belief.max_observed("cifar10-0") == max(n for _, n in ran)


@pytest.mark.sia_data
@pytest.mark.parametrize("measure", ["each", "first"])
def test_a_job_measures_every_batch_it_ran_in_a_round_or_only_the_first(measure):
    """A cifar10 job crosses many epochs a round and its batch grows between them: Sia's simulator records a
    point at each (``each``, the default); ``first`` keeps one point a round, at the batch the round began with."""
    cluster = load_cluster(SIA64)
    work = Workload("one", (WorkloadJob("cifar10-0", "cifar10", 0.0, 1, 256),))
    policy, adaptive, _ = resolve_policy("sia")
    sim = Simulator(cluster, work, policy, simulation_goodput_model(TRACES, ["cifar10"], cluster.type_names,
                                                              step_times="interpolated"), None,
                    SimConfig(measure_batches=measure), adaptive=adaptive)
    result = sim.run()
    assert SimConfig().measure_batches == "each" and result.meta["model"]["measure_batches"] == measure
    rounds = result.allocations.groupby(["gpu_type", "num_nodes", "num_gpus"]).size()
    points = pd.Series([(t, key[0], key[1]) for t, seen in sim.belief.learner.points["cifar10-0"].items()
                        for key in seen]).value_counts()
    more = [points[c] > rounds[c] for c in rounds.index]
    assert any(more) if measure == "each" else not any(more)
    with pytest.raises(InputError, match="measure_batches"):
        SimConfig(measure_batches="last")


@pytest.mark.sia_data
def test_every_throughput_and_step_time_model_runs_and_the_old_pair_is_the_old_model():
    work = Workload("two", (WorkloadJob("cifar10-0", "cifar10", 0.0, 1, 256),
                            WorkloadJob("bert-1", "bert", 30.0, 1, 12)))
    jct = {}
    for throughput in ("fitted", "bootstrap", "oracle"):
        for steps in ("interpolated", "fitted"):
            cfg = SimConfig(throughput=throughput, step_times=steps)
            jct[(throughput, steps)] = simulate(SIA64, work, "sia", config=cfg).summary["avg_jct_s"]
    assert all(v > 0 for v in jct.values())
    assert len({round(v, 3) for v in jct.values()}) > 1  # the knobs change what happens
    # the earlier behaviour: a goodput model loaded with fitted step times, the bootstrap belief
    old = SimConfig(throughput="bootstrap", step_times="fitted")
    model = simulation_goodput_model(TRACES, ["cifar10", "bert"], load_cluster(SIA64).type_names)
    assert simulate(SIA64, work, "sia", config=old, profiles=model).summary["avg_jct_s"] == jct[("bootstrap", "fitted")]


@pytest.mark.sia_data
def test_first_run_blind_is_the_default_and_profiled_starts_a_job_where_the_profiles_say():
    work = Workload("two", (WorkloadJob("cifar10-0", "cifar10", 0.0, 1, 256),
                            WorkloadJob("bert-1", "bert", 30.0, 1, 12)))
    assert SimConfig().first_run == "blind"
    blind = simulate(SIA64, work, "sia")
    profiled = simulate(SIA64, work, "sia", config=SimConfig(first_run="profiled"))
    first = profiled.allocations.sort_values("time_s").groupby("job").first()
    assert set(first.gpu_type) == {"dgx-ext"}  # the fastest type in Sia's profiles, known before the first run
    assert blind.summary["avg_jct_s"] != profiled.summary["avg_jct_s"]
    assert blind.meta["model"]["first_run"] == "blind" and profiled.meta["model"]["first_run"] == "profiled"
    with pytest.raises(InputError, match="first_run"):
        SimConfig(first_run="oracle")


@pytest.mark.sia_data
def test_shared_fits_answers_and_skipped_remeasurements_change_no_simulation(monkeypatch):
    """The memoised paths of the fitted belief (fits, answers, step-time tables and which fit answers each shape
    shared between jobs, a configuration the learner knows not measured again) and of the simulator's goodput
    re-reads (kept by the profile model's state key, skipped inside one state) against the plain ones: the same
    run, job by job and round by round."""
    from scheduler.formats.workloads import read_workload
    from scheduler.model.state_memo import StateMemo

    philly = read_workload(shared_data_dir() / "sia" / "workloads" / "philly" / "workload-1.csv")
    work = philly.head(24)
    fast = simulate(SIA64, work, "sia")
    fitted = ThroughputLearner.model

    def unshared_model(self, owner, gpu_type):
        self._by_points.clear()
        return fitted(self, owner, gpu_type)

    def unshared_answer(self, job, configs, types, grid, eff):
        models = {t: self.learner.model(job.name, t) for t in types}
        self._plans.clear()
        return self._answer(job, configs, models, grid, eff, self.inner.estimate_arrays(job, configs))

    monkeypatch.setattr(ThroughputLearner, "model", unshared_model)
    monkeypatch.setattr(ThroughputLearner, "knows", lambda *_: False)
    monkeypatch.setattr(LearnedThroughputGoodput, "_shared_answer", unshared_answer)
    throughputs = LearnedThroughputGoodput._throughputs

    def uncached_throughputs(self, *args):
        self._rates.clear()
        return throughputs(self, *args)

    monkeypatch.setattr(LearnedThroughputGoodput, "_throughputs", uncached_throughputs)
    monkeypatch.setattr(StateMemo, "__call__", lambda self, compute, job, *rest: compute(job, *rest))
    monkeypatch.setattr(StateMemo, "same_state", lambda self, job, other: False)  # every substep re-read
    plain = simulate(SIA64, work, "sia")
    assert fast.summary["avg_jct_s"] == plain.summary["avg_jct_s"] and fast.summary["restarts"] == plain.summary["restarts"]
    pd.testing.assert_frame_equal(fast.jobs, plain.jobs)
    pd.testing.assert_frame_equal(fast.allocations, plain.allocations)


def test_simulate_refuses_an_unknown_step_time_model_in_one_line(tmp_path):
    import subprocess
    import sys

    from scheduler.formats.bundled import bundled_profiles_dir, default_cluster

    workload = tmp_path / "w.csv"
    workload.write_text("name,time,application,num_replicas,batch_size,work\ncifar10-0,0,cifar10,1,128,300000\n")
    proc = subprocess.run([sys.executable, "-m", "colocate.cli", "simulate", "--cluster", str(default_cluster()),
                           "--workload", str(workload), "--policy", "sia", "--profiles", str(bundled_profiles_dir()),
                           "--step-times", "exact"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "step_times" in proc.stderr and "interpolated, fitted" in proc.stderr and "Traceback" not in proc.stderr
