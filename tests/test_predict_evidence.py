"""The δ predictor's evidence levels, learned transfer factors and conformal intervals, on data made to show them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scheduler.learning.predictor.config import PredictorConfig
from scheduler.learning.predictor.conformal import Calibration, cross_conformal, order_bounds
from scheduler.learning.predictor.evidence import LEVELS, Dataset, Evidence, PairSet, Predictor
from scheduler.learning.predictor.folds import folds, held_out, ratio_calibration

TYPES = [f"m{k // 3}@{2 ** (4 + k % 3)}" for k in range(12)]  # four models at three batch sizes each


def _tables(transfer: float, noise: float, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two GPU types' pairs: log r on the second = ``transfer`` × log r on the first (+ noise)."""
    rng = np.random.default_rng(seed)
    sense, press = rng.uniform(0.3, 1.0, len(TYPES)), rng.uniform(0.5, 1.0, len(TYPES))
    pair_term = rng.normal(0, 0.25, (len(TYPES), len(TYPES)))
    rows_a, rows_b = [], []
    for i, a in enumerate(TYPES):
        for j in range(i, len(TYPES)):
            la = np.log(sense[i] * press[j]) + pair_term[i, j]
            lb = np.log(sense[j] * press[i]) + pair_term[j, i]
            rows_a.append({"type_a": a, "type_b": TYPES[j], "ratio_a": np.exp(la), "ratio_b": np.exp(lb)})
            ta, tb = transfer * la + rng.normal(0, noise), transfer * lb + rng.normal(0, noise)
            rows_b.append({"type_a": a, "type_b": TYPES[j], "ratio_a": np.exp(ta), "ratio_b": np.exp(tb)})
    return pd.DataFrame(rows_a), pd.DataFrame(rows_b)


def _pairs(first: pd.DataFrame, second: pd.DataFrame) -> PairSet:
    empty = pd.DataFrame(index=TYPES)  # no solo features: the evidence and the job effects do the work
    return PairSet([Dataset("k80/timeslice", first, empty), Dataset("v100/timeslice", second, empty)])


def _error(pairs: PairSet, result) -> float:  # noqa: ANN001
    truth, _ = pairs.pair_ratios(1)
    return float(np.abs(np.log(result.ratio_a) - np.log(truth[result.pair])).mean())


def test_the_same_pair_on_another_gpu_type_is_the_closest_evidence_with_a_learned_transfer_factor() -> None:
    pairs = _pairs(*_tables(transfer=0.6, noise=0.0))
    config = PredictorConfig()
    with_pair = held_out(pairs, 1, "pair", config)
    assert set(LEVELS[k] for k in with_pair.level_a) == {"pair"}
    without = held_out(pairs, 1, "pair", config, everywhere=True)  # nobody measured it on either GPU type
    assert "pair" not in {LEVELS[k] for k in without.level_a}
    assert _error(pairs, with_pair) < 0.02 < _error(pairs, without)  # 0.6 × the K80's log ratio, learned
    noise_first, _ = _tables(transfer=0.6, noise=0.0, seed=2)
    _, second = _tables(transfer=0.6, noise=0.0)
    unrelated = _pairs(noise_first, second)  # the other GPU type's ratios say nothing of these
    blind = held_out(unrelated, 1, "pair", config, everywhere=True)
    assert _error(unrelated, held_out(unrelated, 1, "pair", config)) < 1.5 * _error(unrelated, blind)


def test_a_new_job_type_is_predicted_from_its_model_at_other_batch_sizes() -> None:
    first, _ = _tables(transfer=1.0, noise=0.0)
    pairs = PairSet([Dataset("v100/timeslice", first, pd.DataFrame(index=TYPES))])
    by_type = folds(pairs, 0, "type")
    assert len(by_type) == len(TYPES) and all(len(f.pairs) == len(TYPES) for f in by_type)
    held = by_type[4]  # m1@32: every pair of it, in every dataset, is gone
    mask = np.ones(len(pairs), dtype=bool)
    mask[held.held] = False
    evidence = Evidence(pairs, mask)
    assert not evidence.measured[0, pairs.index["m1@32"]]
    model = Predictor(evidence, 0, mask, PredictorConfig())
    t = pairs.index["m1@32"]
    others = np.array([pairs.index[x] for x in TYPES if x != "m1@32"])
    _, levels = model.predict(np.full(len(others), t), others)
    assert {LEVELS[k] for k in levels} == {"new type, model known"}  # m1@16 and m1@64 were measured


def test_conformal_order_statistics_and_pooling() -> None:
    residuals = np.arange(1, 20, dtype=float)  # 19 values: (n + 1) · 0.9 = 18 → the 18th, (n + 1) · 0.1 = 2 → the 2nd
    assert order_bounds(residuals, 0.8) == (2.0, 18.0)
    assert order_bounds(np.array([0.1, 0.2]), 0.8) == (0.1, 0.2)  # too few: the extremes
    calibration = Calibration.from_arrays(np.r_[np.full(5, 0.01), np.linspace(-1, 1, 40)],
                                          np.r_[np.zeros(5, dtype=int), np.full(40, 2)], 0.8, len(LEVELS))
    assert len(calibration.pooled(0)) == 45  # five of its own: the coarser level's are added
    low, high = calibration.bounds(0)
    assert low < -0.5 and high > 0.5  # wider: the interval errs toward covering
    rng = np.random.default_rng(0)
    truth = np.exp(rng.normal(0, 0.3, 2000))
    predicted = np.ones(2000)
    lo, hi = cross_conformal(predicted, truth, np.full(2000, 2), np.arange(2000) // 2, 0.8, len(LEVELS))
    assert 0.77 <= float(((truth >= lo) & (truth <= hi)).mean()) <= 0.83


def test_held_out_residuals_calibrate_the_filled_intervals_per_level() -> None:
    pairs = _pairs(*_tables(transfer=0.6, noise=0.05))
    config = PredictorConfig()
    results = [held_out(pairs, 1, "pair", config), held_out(pairs, 1, "type", config)]
    calibration = ratio_calibration(pairs, 1, results, config.level)
    close, new = calibration.bounds(LEVELS.index("pair")), calibration.bounds(LEVELS.index("new type"))
    assert close[1] - close[0] < new[1] - new[0]  # a pair measured elsewhere is known far better than a new type
    with pytest.raises(ValueError):
        folds(pairs, 1, "batch")
