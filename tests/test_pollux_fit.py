"""What Sia's scheduler believes of a job it has run, as the simulator's fitted belief models it: Pollux's joint
fit of the step-time model to the points the job ran (``--throughput-fit pollux`` against the earlier per-term
line fit, ``lines``), and its statistical efficiency at other batches extrapolated from the gradient noise it
measured (``--efficiency-belief extrapolated`` against the validation curves at every batch, ``curves``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scheduler.formats.shared_data import shared_data_dir
from scheduler.learning.pollux_fit import FLOOR, _objective, fit_pollux
from scheduler.learning.throughput import ThroughputLearner, pollux_efficiency
from scheduler.model.efficiency import ValidationCurves
from scheduler.model.jobs import Job
from scheduler.model.step_time import StepTimeModel
from scheduler.sim.config import SimConfig

# DeepSpeech2 on Sia's rtx nodes at local batch 20 (Sia's artifact traces, placements-rtx.csv): 1 and 4 GPUs
# measured, the measured all-reduce time at 4 GPUs (0.053 s) far less than what 4 GPUs add to the step (0.316 s)
ONE_AND_FOUR = ([1, 1], [1, 4], [20.0, 20.0], [0.394, 0.710], [0.00074, 0.0534])


def _step(model: StepTimeModel, gpus: int, nodes: int = 1, local: float = 20.0) -> float:
    return float(model.step_time(local, gpus, nodes))


def test_the_measured_configurations_come_out_as_measured():
    pollux = fit_pollux(*ONE_AND_FOUR)
    assert _step(pollux, 1) == pytest.approx(0.394, rel=0.01)
    assert _step(pollux, 4) == pytest.approx(0.710, rel=0.01)  # not just the measured all-reduce time's worth


def test_one_multi_gpu_count_measured_makes_more_gpus_cost_more():
    """Sia's fit splits the 4-GPU network time between α_r and β_r (both free from the same start), so 8 and 16
    GPUs predict longer steps."""
    pollux = fit_pollux(*ONE_AND_FOUR)
    assert pollux.beta_r > 0.01
    assert _step(pollux, 4) < _step(pollux, 8) < _step(pollux, 16, 2)


def test_terms_nothing_measured_are_held_as_pollux_holds_them():
    one = fit_pollux([1], [1], [32.0], [0.2], [0.0])
    assert one.alpha_c == pytest.approx(0.1)  # one local batch: half the compute time is fixed cost
    assert one.beta_c == pytest.approx(0.1 / 32, rel=1e-3)
    assert max(one.alpha_r, one.beta_r, one.alpha_n, one.beta_n) <= 1.1 * FLOOR
    assert _step(one, 8, 2, 32.0) == pytest.approx(0.2, rel=1e-3)  # no all-reduce cost believed yet
    two = fit_pollux([1, 1], [1, 2], [32.0, 32.0], [0.2, 0.26], [0.0, 0.05])
    assert two.beta_r == FLOOR  # nothing over 2 GPUs: no cost growing with the count
    assert two.alpha_n >= 1.1 * two.alpha_r and two.beta_n >= 1.1 * two.beta_r  # no cross-node run
    assert _step(two, 2, 1, 32.0) == pytest.approx(0.26, rel=0.01)


def test_a_linear_model_measured_everywhere_is_recovered():
    true = StepTimeModel(alpha_c=0.05, beta_c=0.002, alpha_r=0.02, beta_r=0.004, alpha_n=0.08, beta_n=0.01)
    shapes = [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (16, 2)]
    k, n, m = zip(*[(nodes, gpus, local) for gpus, nodes in shapes for local in (16.0, 64.0)])
    step = [_step(true, g, nodes, local) for nodes, g, local in zip(k, n, m)]
    sync = [s - (true.alpha_c + true.beta_c * local) if g > 1 else 0.0 for s, g, local in zip(step, n, m)]
    fitted = fit_pollux(k, n, m, step, sync)
    for nodes, gpus, local, measured in zip(k, n, m, step):
        assert _step(fitted, gpus, nodes, local) == pytest.approx(measured, rel=0.03)


def test_the_gradient_is_the_objectives():
    rng = np.random.default_rng(7)
    points = [(link, max(gpus - 2, FLOOR), local, math.log(c), math.log(s)) for link, gpus, local, c, s in
              ((0, 1, 20.0, 0.39, 0.394), (1, 4, 20.0, 0.5, 0.71), (2, 8, 20.0, 0.55, 1.5), (1, 2, 40.0, 0.7, 0.8))]
    for _ in range(5):
        x = np.concatenate([rng.uniform(0.01, 0.5, 6), [rng.uniform(1.0, 3.0)]])
        _, grad = _objective(x, points)
        step = 1e-7
        numeric = [(_objective(x + e, points)[0] - _objective(x - e, points)[0]) / (2 * step) for e in np.eye(7) * step]
        assert np.allclose(grad, numeric, rtol=1e-4, atol=1e-6)


def test_the_learner_fits_what_a_job_measured_with_pollux():
    learner = ThroughputLearner()
    assert learner.fit is fit_pollux
    for gpus, step, sync in ((1, 0.394, 0.00074), (4, 0.710, 0.0534)):
        learner.observe("j", "rtx", 1, gpus, 20.0, step, sync)
    assert learner.model("j", "rtx") == fit_pollux(*ONE_AND_FOUR)


# ------------------------------------------------------------------ the efficiency a scheduler believes

def _curves() -> ValidationCurves:
    """Two epochs, three validated batches; the noise grows relative to the signal with the batch (as in the
    traces), so statistics measured at the smallest batch extrapolate to a lower efficiency at the others."""
    return ValidationCurves("x", np.array([16.0, 32.0, 64.0]), np.array([5.0, 10.0]),
                            sqr=np.array([[4.0, 3.0, 2.0], [1.0, 1.0, 1.0]]),
                            var=np.array([[8.0, 12.0, 20.0], [0.5, 0.5, 0.5]]))


def test_pollux_efficiency_agrees_with_the_curves_at_the_measured_batch_and_extrapolates_elsewhere():
    curves = _curves()
    sqr, var = curves.gradient_stats(0.0, 16.0)
    assert (sqr, var) == (4.0, 8.0)
    grid = np.array([16.0, 32.0, 64.0])
    believed, true = pollux_efficiency(grid, sqr, var, 16.0), curves.efficiency(0.0, grid)
    assert believed[0] == pytest.approx(true[0])
    scale = grid / 16.0
    assert believed == pytest.approx(((var + sqr) / (var / scale + sqr)) / scale)  # Pollux's formula
    assert believed[2] < true[2]  # measured at 16, the job believes larger batches pay off less than they do
    assert curves.gradient_stats(20.0, 48.0) == (1.0, 0.5)  # a later epoch, between validated batches
    assert not believed.flags.writeable


@pytest.mark.sia_data
def test_the_simulator_measures_gradient_noise_where_a_job_runs_and_believes_its_extrapolation():
    from scheduler.formats.workloads import read_workload
    from scheduler.model.cluster import load_cluster
    from scheduler.sim.job_model import simulation_goodput_model
    from scheduler.sim.simulator import Simulator, resolve_policy

    work = read_workload(shared_data_dir() / "sia" / "workloads" / "philly" / "workload-1.csv").head(24)
    cluster = load_cluster("scheduler/examples/sia-64gpu.yaml")
    policy, adaptive, _ = resolve_policy("sia")
    model = simulation_goodput_model(shared_data_dir() / "sia" / "traces", work.applications, cluster.type_names)
    sim = Simulator(cluster, work, policy, model, None, SimConfig(), adaptive=adaptive)
    sim.run()
    learned = sim.belief.learner.gradients  # type: ignore[attr-defined]
    assert set(learned) == {j.name for j in work.jobs}  # every job measured its gradient noise where it ran
    job = next(j for j in work.jobs if j.application == "cifar10")
    view = Job(job.name, job.application, adaptive=True, max_batch_size=4096)
    grid, true = model.grid_efficiency(view)
    assert not np.allclose(pollux_efficiency(grid, *learned[job.name]), true)  # believed: Pollux's extrapolation
