"""Goodput model: Pollux-form fit, statistical efficiency, Sia's bootstrap, and Sia's real profiles."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scheduler.formats.profiles import read_gns_curves, read_sia_profiles
from scheduler.model.configs import Configuration
from scheduler.model.efficiency import statistical_efficiency
from scheduler.model.goodput import ProfileGoodputModel
from scheduler.model.jobs import Job
from scheduler.model.step_time import StepTimeModel, fit_step_time


def synthetic_rows(model: StepTimeModel, gpu_type: str = "g", app: str = "app") -> pd.DataFrame:
    rows = []
    for n, k in ((1, 1), (2, 1), (4, 1), (8, 1), (16, 2), (32, 4)):
        for m in (8, 16, 32, 64, 128):
            rows.append({"application": app, "gpu_type": gpu_type, "num_nodes": k, "num_gpus": n, "local_bsz": m,
                         "step_time": float(model.step_time(m, n, k)), "sync_time": np.nan})
    return pd.DataFrame(rows)


def test_fit_recovers_a_known_step_time_model() -> None:
    truth = StepTimeModel(alpha_c=0.02, beta_c=0.001, alpha_r=0.01, beta_r=0.002, alpha_n=0.05, beta_n=0.004)
    fitted = fit_step_time(synthetic_rows(truth))
    for n, k in ((1, 1), (4, 1), (32, 4)):
        for m in (10, 100):
            assert fitted.step_time(m, n, k) == pytest.approx(truth.step_time(m, n, k), rel=0.02)


def test_statistical_efficiency_is_pollux_formula() -> None:
    eff = statistical_efficiency(np.array([128, 256, 1024]), 128, noise_scale=512.0)
    assert eff[0] == pytest.approx(1.0)
    assert eff[1] == pytest.approx((512 + 128) / (512 + 256))
    assert np.all(np.diff(eff) < 0)
    assert statistical_efficiency(64, 128, 512.0) == pytest.approx(1.0)  # capped below M0


def test_bootstrap_scales_a_one_gpu_profile_by_the_reference_type() -> None:
    """Sia: tput_B(N) ≈ tput_B(1) / tput_A(1) · tput_A(N) when type B only has 1-GPU data."""
    ref = synthetic_rows(StepTimeModel(0.02, 0.001, 0.01, 0.002, 0.05, 0.004), gpu_type="A")
    one_gpu = synthetic_rows(StepTimeModel(0.06, 0.003), gpu_type="B")
    one_gpu = one_gpu[one_gpu.num_gpus == 1]
    model = ProfileGoodputModel(pd.concat([ref, one_gpu], ignore_index=True))
    for n, k in ((4, 1), (16, 2)):
        expected = (model.throughput("app", "B", 1, 64) / model.throughput("app", "A", 1, 64)
                    * model.throughput("app", "A", n, 64 * n, k))
        assert model.throughput("app", "B", n, 64 * n, k) == pytest.approx(expected, rel=1e-9)


def test_rigid_jobs_keep_their_batch_and_local_batch_must_fit() -> None:
    rows = synthetic_rows(StepTimeModel(0.02, 0.001, 0.01, 0.002, 0.05, 0.004))
    model = ProfileGoodputModel(rows)
    rigid = Job("r", "app", batch_size=256)
    est = model.estimate(rigid, "g", 4)
    assert est.batch_size == 256 and est.throughput == pytest.approx(256 / rows.query(
        "num_gpus == 4 and local_bsz == 64").step_time.iloc[0])
    assert model.estimate(Job("big", "app", batch_size=4096), "g", 1) is None  # 4096 per GPU > profiled 128
    assert model.estimate(rigid, "unknown", 1) is None
    adaptive = Job("a", "app", adaptive=True, min_batch_size=64, max_batch_size=2048)
    ests = model.estimate_many(adaptive, [Configuration("g", 1, 1), Configuration("g", 1, 8)])
    assert all(64 <= e.batch_size <= 2048 for e in ests)
    assert ests[1].goodput > ests[0].goodput


@pytest.mark.parametrize("source", ["bundled", pytest.param("sia", marks=pytest.mark.sia_data)])
def test_sia_profiles_and_gns_curves(source: str, request: pytest.FixtureRequest) -> None:
    """Sia-format profiles: the bundled Pollux T4 set (+ derived V100), and Sia's own traces when present."""
    from scheduler.formats.bundled import bundled_profiles_dir

    if source == "sia":
        traces, types = request.getfixturevalue("shared_data") / "sia" / "traces", {"aws", "dgx-ext"}
    else:
        traces, types = bundled_profiles_dir(), {"t4", "v100"}
    frame = read_sia_profiles(traces, applications=["cifar10"], gpu_types=sorted(types))
    assert set(frame.gpu_type) == types
    assert frame.num_gpus.max() >= 16 and (frame.num_nodes > 1).any()
    curves = read_gns_curves(traces, applications=["cifar10"])
    curve = curves["cifar10"]
    assert curve.init_batch_size == 128 and curve.max_batch_size == 4096
    model = ProfileGoodputModel(frame, curves)
    # the fitted model reproduces the measured single-node step times closely (median error)
    errors = []
    for row in frame[frame.num_nodes == 1].itertuples():
        fitted = model._models[("cifar10", row.gpu_type)].step_time(row.local_bsz, row.num_gpus, row.num_nodes)
        errors.append(abs(fitted / row.step_time - 1))
    assert np.median(errors) < 0.15
    # gradient noise grows during training, so large batches become more efficient later
    job = Job("c", "cifar10", adaptive=True)
    early = model.efficiency(job, np.array([2048.0]))[0]
    late = model.efficiency(job.with_state(progress=curve.max_progress * 0.9), np.array([2048.0]))[0]
    assert 0 < early < late <= 1
