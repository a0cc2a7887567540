"""True step times interpolated from the profile rows, and the throughput a scheduler learns from the
configurations a job ran (scheduler.learning.throughput), as Sia's simulator models both."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scheduler.formats.shared_data import shared_data_dir
from scheduler.formats.workload_jobs import Workload, WorkloadJob
from scheduler.learning.throughput import LearnedThroughputGoodput, ThroughputLearner
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

# ------------------------------------------------------------------ the policy's belief

def _belief():
    rows = pd.concat([_rows("a"), _rows("b", model=StepTimeModel(0.1, 0.004, 0.02, 0.004, 0.08, 0.01))])
    cluster = cluster_from_dict({"gpu_types": {"a": {"nodes": 2, "gpus_per_node": 4, "memory_gb": 16},
                                               "b": {"nodes": 2, "gpus_per_node": 4, "memory_gb": 16}}})
    inner = AccumulatingGoodput(ProfileGoodputModel(rows, step_times="interpolated"))
    return LearnedThroughputGoodput(inner, cluster), inner


def test_a_never_run_job_is_valued_alike_everywhere_until_it_ran_then_the_fit_and_its_projection():
    belief, inner = _belief()
    job = Job("j", "x", adaptive=True, max_batch_size=256)
    configs = (Configuration("a", 1, 1), Configuration("b", 1, 1), Configuration("a", 1, 4))
    truth = inner.estimate_arrays(job, configs)
    assert truth.goodput[0] != pytest.approx(truth.goodput[1])  # the profiles tell the types apart ...
    before = belief.estimate_arrays(job, configs)
    assert np.allclose(before.goodput, truth.goodput.min(), rtol=2e-3)  # ... the belief does not,
    assert before.goodput[0] == before.goodput[2] > before.goodput[1]  # but for its tie-break: first-listed type
    assert np.array_equal(before.batch_size, truth.batch_size) and np.array_equal(before.throughput, truth.throughput)
    assert np.array_equal(belief.estimate_arrays(job, configs).goodput, before.goodput)  # nothing learned
    belief.learner.observe("j", "a", 1, 1, 32.0, 0.2, 0.0)
    after = belief.estimate_arrays(job, configs)
    fit = belief.learner.model("j", "a")
    batch = after.batch_size[2]
    assert after.throughput[2] == pytest.approx(batch / float(fit.step_time(batch / 4, 4, 1)))
    ratio = belief.ratio("x", "b", "a")
    assert ratio == pytest.approx(inner.throughput("x", "b", 1, 64) / inner.throughput("x", "a", 1, 64))
    assert after.goodput[1] == pytest.approx(after.goodput[0] * ratio)  # projected from the type it ran on
    assert belief.estimate_arrays(job, configs) is after  # kept while nothing new was learned ...
    belief.learner.observe("j", "a", 1, 4, 64.0, 0.6, 0.3)  # ... and recomputed once it was
    slower = belief.estimate_arrays(job, configs)
    assert slower is not after and slower.throughput[2] < after.throughput[2]
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
def test_a_job_measures_every_batch_it_ran_in_a_round():
    """A cifar10 job crosses many epochs a round and its batch grows between them: Sia's simulator records a
    point at each, so some configurations hold more points than the rounds that ran them."""
    cluster = load_cluster(SIA64)
    work = Workload("one", (WorkloadJob("cifar10-0", "cifar10", 0.0, 1, 256),))
    policy, adaptive, _ = resolve_policy("sia")
    sim = Simulator(cluster, work, policy, simulation_goodput_model(TRACES, ["cifar10"], cluster.type_names,
                                                                    step_times="interpolated"), None,
                    SimConfig(), adaptive=adaptive)
    result = sim.run()
    rounds = result.allocations.groupby(["gpu_type", "num_nodes", "num_gpus"]).size()
    points = pd.Series([(t, key[0], key[1]) for t, seen in sim.belief.learner.points["cifar10-0"].items()
                        for key in seen]).value_counts()
    assert any(points[c] > rounds[c] for c in rounds.index)


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
                           "--set", "sim.step_times=exact"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "step_times" in proc.stderr and "interpolated, fitted" in proc.stderr and "Traceback" not in proc.stderr
