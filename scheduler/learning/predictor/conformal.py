"""Prediction intervals for the δ predictor: split conformal on held-out residuals, one set per evidence level.

A prediction's interval is ``[μ + q_lo, μ + q_hi]`` in log space, ``q_lo`` and ``q_hi`` the lower and upper
(1 − level)/2 order statistics of held-out residuals (log truth − log prediction) of predictions made *the same
way*: residuals of the same evidence level (:data:`scheduler.learning.predictor.evidence.LEVELS` — a pair measured on
another GPU type is predicted far better than a pair of a job type never measured), from the same dataset.
With n exchangeable residuals the ⌈(n + 1)(1 − α/2)⌉-th order statistic bounds a new one with probability at
least 1 − α/2 (Vovk et al. 2005; Lei et al. 2018, split conformal), so the interval covers with probability
about ``level`` — what :mod:`colocate.prediction.predict_eval` checks, held-out pair by held-out pair.

A level with fewer than :data:`MIN_RESIDUALS` residuals borrows those of the coarser levels (wider: the
interval errs toward covering), then of the finer ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MIN_RESIDUALS = 20


def order_bounds(residuals: np.ndarray, level: float) -> tuple[float, float]:
    """(q_lo, q_hi): the split-conformal order statistics of ``residuals`` for a two-sided ``level`` interval.

    With too few residuals for the upper order statistic (n + 1)(1 − α/2) > n, the extremes (an interval
    that cannot promise its level, said in the evaluation's coverage).
    """
    values = np.sort(np.asarray(residuals, dtype=float))
    n = len(values)
    if n == 0:
        return -math.inf, math.inf
    rank = math.ceil((n + 1) * (1.0 - (1.0 - level) / 2) - 1e-9)  # of the upper bound; the lower is its mirror
    hi, lo = min(rank, n), max(n + 1 - rank, 1)
    return float(values[lo - 1]), float(values[hi - 1])


@dataclass
class Calibration:
    """Held-out log residuals per evidence level (an index into the levels, closest first)."""

    level: float
    n_levels: int
    residuals: dict[int, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_arrays(cls, residuals: np.ndarray, levels: np.ndarray, level: float, n_levels: int) -> Calibration:
        residuals, levels = np.asarray(residuals, dtype=float), np.asarray(levels, dtype=int)
        finite = np.isfinite(residuals)
        return cls(level, n_levels, {k: residuals[finite & (levels == k)] for k in range(n_levels)})

    def pooled(self, k: int) -> np.ndarray:
        """The residuals an interval of level ``k`` is read from: its own, with coarser (then finer) levels'
        added while fewer than :data:`MIN_RESIDUALS`."""
        order = [k, *range(k + 1, self.n_levels), *range(k - 1, -1, -1)]
        out: list[np.ndarray] = []
        for j in order:
            out.append(self.residuals.get(j, np.zeros(0)))
            if sum(len(x) for x in out) >= MIN_RESIDUALS:
                break
        return np.concatenate(out) if out else np.zeros(0)

    def bounds(self, k: int) -> tuple[float, float]:
        """(q_lo, q_hi) in log space for a prediction of evidence level ``k``."""
        return order_bounds(self.pooled(k), self.level)

    def interval(self, predicted: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) around ratio (or δ) predictions of the given evidence levels."""
        predicted, levels = np.asarray(predicted, dtype=float), np.asarray(levels, dtype=int)
        low, high = np.empty(len(predicted)), np.empty(len(predicted))
        for k in np.unique(levels):
            q_lo, q_hi = self.bounds(int(k))
            cells = levels == k
            low[cells], high[cells] = predicted[cells] * math.exp(q_lo), predicted[cells] * math.exp(q_hi)
        return low, high

    @property
    def size(self) -> int:
        return sum(len(x) for x in self.residuals.values())


def cross_conformal(predicted: np.ndarray, truth: np.ndarray, levels: np.ndarray, folds: np.ndarray, level: float,
                    n_levels: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals for held-out predictions, each from the residuals of the *other* folds of the same evaluation
    (its own fold's residuals left out), per evidence level: what an interval on a pair nobody measured is."""
    predicted, truth = np.asarray(predicted, dtype=float), np.asarray(truth, dtype=float)
    levels, folds = np.asarray(levels, dtype=int), np.asarray(folds)
    residuals = np.log(truth) - np.log(predicted)
    low, high = np.empty(len(predicted)), np.empty(len(predicted))
    for fold in np.unique(folds):
        own = folds == fold
        calibration = Calibration.from_arrays(residuals[~own], levels[~own], level, n_levels)
        low[own], high[own] = calibration.interval(predicted[own], levels[own])
    return low, high


__all__ = ["MIN_RESIDUALS", "Calibration", "cross_conformal", "order_bounds"]
