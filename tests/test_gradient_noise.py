"""Live goodput: statistical efficiency from the gradient statistics a job reports
(scheduler/learning/gradient_noise.py) and its use by serve's learned goodput model (scheduler/learning/online.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.learning import gradient_noise as gn
from scheduler.learning.online import LearnedGoodputModel
from scheduler.model.efficiency import GnsCurve, ValidationCurves, statistical_efficiency
from scheduler.model.jobs import Job

noise = st.floats(min_value=1e-3, max_value=1e6)
base = st.integers(min_value=1, max_value=4096)


@given(noise, base, st.floats(min_value=1.0, max_value=1e6))
def test_efficiency_is_in_0_1_and_1_at_and_below_the_base_batch(b: float, m0: int, m: float) -> None:
    e = float(gn.efficiency(m, m0, b))
    assert 0 < e <= 1
    assert float(gn.efficiency(m0, m0, b)) == pytest.approx(1.0)
    if m <= m0:
        assert e == 1.0


@given(noise, base, st.floats(min_value=0.0, max_value=1e5), st.floats(min_value=1e-3, max_value=1e5))
def test_efficiency_falls_with_the_batch_beyond_m0(b: float, m0: int, extra: float, more: float) -> None:
    m = m0 + extra
    assert float(gn.efficiency(m + more, m0, b)) < float(gn.efficiency(m, m0, b)) or math.isclose(
        float(gn.efficiency(m + more, m0, b)), float(gn.efficiency(m, m0, b)), rel_tol=1e-12)
    assert float(gn.efficiency(m0 + more, m0, b)) < 1.0


@given(noise, st.floats(min_value=1e-3, max_value=1e6), base, st.floats(min_value=1.0, max_value=1e5))
def test_efficiency_rises_with_the_noise_scale(b: float, more: float, m0: int, extra: float) -> None:
    m = m0 + extra
    low, high = float(gn.efficiency(m, m0, b)), float(gn.efficiency(m, m0, b + more))
    assert high >= low
    if high < 1 - 1e-9:  # away from the float ceiling the increase is strict
        assert high > low or math.isclose(high, low, rel_tol=1e-12)


def test_efficiency_is_pollux_form_with_known_numbers() -> None:
    # B = 64, M0 = 32: E(128) = 96 / 192 = 0.5; E(32) = 1; E(16) = 1 (capped)
    assert float(gn.efficiency(128, 32, 64.0)) == pytest.approx(0.5)
    assert [gn.efficiency(m, 32, 64.0) for m in (16, 32)] == [1.0, 1.0]
    assert float(gn.efficiency(10**6, 32, math.inf)) == 1.0  # |G|² = 0: pure noise, every batch as efficient
    assert gn.noise_scale(0.0, 3.0) == math.inf and gn.noise_scale(2.0, 6.0) == 3.0


@given(st.floats(min_value=1e-6, max_value=1e6), st.floats(min_value=0.0, max_value=1e6), base,
       st.lists(st.floats(min_value=1.0, max_value=1e5), min_size=1, max_size=5))
def test_the_contracts_per_example_variance_converts_to_sias_variance_at_m0(
        sqr: float, trace: float, m0: int, batches: list[float]) -> None:
    """Sia/Pollux store var = tr Σ / M0; their efficiency from that var equals ours from tr Σ."""
    var = gn.variance_at_base(trace, m0)
    assert gn.per_example_variance(var, m0) == pytest.approx(trace, rel=1e-12, abs=1e-300)
    curve = GnsCurve("app", m0, 10**6, (0.0, 1.0), (sqr, sqr), (var, var))
    assert curve.noise_scale(0.5) == pytest.approx(gn.noise_scale(sqr, trace), rel=1e-9)
    m = np.array(sorted({m0 + b for b in batches}), dtype=float)
    grid = np.array([m0, m[-1] + 1.0])
    sia = ValidationCurves("app", grid, np.array([0.0]), np.full((1, 2), sqr), np.full((1, 2), var))
    ours = [gn.efficiency(x, m0, gn.noise_scale(sqr, trace)) for x in m]
    np.testing.assert_allclose(sia.efficiency_at_epoch(0, m), ours, rtol=1e-9)
    np.testing.assert_allclose(statistical_efficiency(m, m0, gn.noise_scale(sqr, trace)), ours, rtol=1e-12)


def test_reports_are_smoothed_once_each_with_the_latest_learning_rate() -> None:
    first = gn.fold(None, {"step": 10, "grad_sqr": 2.0, "grad_var": 20.0, "lr": 0.1})
    assert first == gn.GradientStats(2.0, 20.0, 0.1, 1, 10)
    assert gn.fold(first, {"step": 10, "grad_sqr": 100.0, "grad_var": 1.0}) is first  # the same report again
    assert gn.fold(first, {"step": 12}) is first  # no statistics in this record
    assert gn.fold(None, {"step": 3, "grad_sqr": 1.0}) is None  # half a report: nothing yet
    second = gn.fold(first, {"step": 20, "grad_sqr": 4.0, "grad_var": 40.0, "lr": None})
    assert second is not None and (second.grad_sqr, second.grad_var, second.lr, second.reports) == (3.0, 30.0, 0.1, 2)
    stats = second
    for step in range(30, 300, 10):  # a late change of the statistics wins after a few reports (an EMA)
        stats = gn.fold(stats, {"step": step, "grad_sqr": 1.0, "grad_var": 1000.0})
    assert stats is not None and stats.noise_scale == pytest.approx(1000.0, rel=0.01)


def test_shown_statistics_name_every_field() -> None:
    stats = gn.GradientStats(2.0, 128.0, 0.05, 3, 9)
    view = gn.shown(stats, 128, 32)
    assert view == {"grad_sqr": 2.0, "grad_var": 128.0, "noise_scale": 64.0, "lr": 0.05, "efficiency": 0.5,
                    "gradient_reports": 3}
    assert gn.shown(None, 32, 32)["noise_scale"] is None and gn.shown(None, 32, 32)["gradient_reports"] == 0


def _job(name: str = "j", **kw) -> Job:
    fields = dict(name=name, application="mlp", arrival=0.0, num_gpus=1, max_gpus=1, batch_size=32,
                  min_batch_size=32, max_batch_size=1024, adaptive=True)
    return Job(**{**fields, **kw})


def _spec() -> SimpleNamespace:
    return SimpleNamespace(gpu_types=(), min_gpus=1)


def test_an_unprofiled_jobs_batch_follows_its_measured_noise_scale() -> None:
    """Before its first report the job keeps its job file's batch M0 (throughput alone would take the largest);
    then a small noise scale takes a small batch, a large one a larger one."""
    job = _job()
    chosen = {}
    for label, stats in (("none", None), ("small", gn.GradientStats(1.0, 8.0)), ("large", gn.GradientStats(1.0, 4096.0))):
        model = LearnedGoodputModel([], {"j": _spec()}, gradients={"j": stats} if stats else {})
        est = model.estimate(job, "cpu", 1)
        assert est is not None
        chosen[label] = est.batch_size
        if stats is not None:
            assert est.efficiency == pytest.approx(float(stats.efficiency(est.batch_size, 32)))
    assert chosen["none"] == 32 and chosen["small"] < chosen["large"] <= 1024
    assert chosen["small"] <= 64


def test_a_profiled_jobs_curve_gives_way_to_its_measurements() -> None:
    """With a profile's curve saying "large batches are efficient", a job that measures a small noise scale is
    given its own efficiency (and batch); without a report it keeps its job file's batch M0 (the profile's arrays
    would take 1024: a curve of another run, and a batch the job's learning rate does not follow yet)."""
    from scheduler.model.configs import Configuration
    from scheduler.model.goodput import GoodputModelBase

    class Profile(GoodputModelBase):
        applications = {"mlp"}

        def throughput(self, application, gpu_type, num_gpus, batch_size, num_nodes=1):
            return batch_size / (0.01 + 0.0001 * batch_size)

        def efficiency(self, job, batch_size):
            return statistical_efficiency(batch_size, 32, 1e6)

        def grid_efficiency(self, job):
            grid = np.array([32.0, 64.0, 128.0, 256.0, 512.0, 1024.0])
            return grid, self.efficiency(job, grid)

        def estimate(self, job, gpu_type, num_gpus, num_nodes=1):
            from scheduler.model.goodput import GoodputEstimate

            return GoodputEstimate(1024, self.throughput("mlp", gpu_type, num_gpus, 1024), 1.0)

    configs = (Configuration("cpu", 1, 1),)
    job = _job()
    assert Profile().grid_efficiency(job)[1][-1] > 0.99  # the profile alone: 1024 is as efficient as 32
    plain = LearnedGoodputModel([], {"j": _spec()}, base=Profile()).estimate_arrays(job, configs)
    assert plain.batch_size[0] == 32
    measured = LearnedGoodputModel([], {"j": _spec()}, base=Profile(), gradients={"j": gn.GradientStats(1.0, 4.0)})
    arrays = measured.estimate_arrays(job, configs)
    assert arrays.batch_size[0] == 32 and arrays.efficiency[0] == 1.0


def test_a_held_profiled_job_gets_the_per_configuration_figures_from_the_fast_path() -> None:
    """Before its first report a profiled adaptive job is held at M0; the base model's arrays (as for a rigid job)
    give exactly what the per-configuration path gives, GPU counts above the batch excluded, for every bundled
    application, batch and configuration."""
    from scheduler.formats.bundled import PROFILES_DIR
    from scheduler.formats.profiles import load_goodput_model
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.model.configs import configurations
    from scheduler.model.goodput import GoodputModelBase

    base = load_goodput_model(PROFILES_DIR)
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 2, "gpus_per_node": 4, "memory_gb": 16},
                                               "v100": {"nodes": 2, "gpus_per_node": 8, "memory_gb": 32}}})
    configs = tuple(configurations(cluster))
    model = LearnedGoodputModel([], {}, base=base)
    checked = 0
    for app in sorted(base.applications or ()):
        curve = base.curves.get(app)
        for m0 in (4, curve.init_batch_size if curve else 32):
            job = Job(name=f"{app}-{m0}", application=app, batch_size=m0, min_batch_size=m0,
                      max_batch_size=(curve.max_batch_size if curve else m0) * 4, adaptive=True)
            fast, slow = model.estimate_arrays(job, configs), GoodputModelBase.estimate_arrays(model, job, configs)
            assert np.array_equal(np.isnan(fast.goodput), np.isnan(slow.goodput)), job
            assert np.allclose(np.nan_to_num(fast.goodput), np.nan_to_num(slow.goodput), rtol=1e-9), job
            assert set(np.unique(fast.batch_size[~np.isnan(fast.goodput)])) <= {m0}
            assert np.isnan(fast.goodput[np.array([c.num_gpus > m0 for c in configs])]).all()
            checked += int((~np.isnan(fast.goodput)).sum())
    assert checked > 50
