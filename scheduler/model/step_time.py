"""Pollux's (OSDI'21 §3.2) iteration-time model, fitted to profile rows: the throughput half of goodput.
:mod:`scheduler.model.goodput` re-exports :class:`StepTimeModel` and :func:`fit_step_time`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclass(frozen=True)
class StepTimeModel:
    """Pollux's (OSDI'21 §3.2) iteration-time model for one application on one GPU type.

    ``T_grad(m) = α_c + β_c·m`` (local batch m), ``T_sync = 0`` on one GPU, ``α_r + β_r·(N−2)`` inside one
    node and ``α_n + β_n·(N−2)`` across nodes, and ``T_iter = (T_grad^γ + T_sync^γ)^(1/γ)`` (γ ≥ 1 models
    the overlap of computation and all-reduce). Throughput = N·m / T_iter samples/s.
    """

    alpha_c: float
    beta_c: float
    alpha_r: float = 0.0
    beta_r: float = 0.0
    alpha_n: float = 0.0
    beta_n: float = 0.0
    gamma: float = 1.0

    def step_time(self, local_bsz: "np.ndarray | float", num_gpus: int, num_nodes: int = 1) -> "np.ndarray":
        m = np.asarray(local_bsz, dtype=float)
        grad = self.alpha_c + self.beta_c * m
        if num_gpus <= 1:
            return grad
        if num_nodes <= 1:
            sync = self.alpha_r + self.beta_r * (num_gpus - 2)
        else:
            sync = self.alpha_n + self.beta_n * (num_gpus - 2)
        sync = max(sync, 0.0)
        g = self.gamma
        return (grad ** g + sync ** g) ** (1.0 / g)

    def throughput(self, local_bsz: "np.ndarray | float", num_gpus: int, num_nodes: int = 1) -> "np.ndarray":
        m = np.asarray(local_bsz, dtype=float)
        return num_gpus * m / self.step_time(m, num_gpus, num_nodes)


def _linear_fit(x: "np.ndarray", y: "np.ndarray") -> tuple[float, float]:
    """Least-squares ``y ≈ a + b·x`` with a, b ≥ 0 (one distinct x: a line through the origin)."""
    if len(x) == 0:
        return 0.0, 0.0
    if len(np.unique(x)) < 2:
        mean_x = float(np.mean(x))
        if mean_x == 0:
            return max(float(np.mean(y)), 0.0), 0.0
        return 0.0, max(float(np.mean(y)) / mean_x, 0.0)
    b, a = np.polyfit(x, y, 1)
    if b < 0:  # noisy data: a flat line is the best monotone fit
        return max(float(np.mean(y)), 0.0), 0.0
    if a < 0:
        return 0.0, max(float(np.sum(x * y) / np.sum(x * x)), 0.0)
    return float(a), float(b)


def fit_step_time(rows: "pd.DataFrame") -> StepTimeModel:
    """Fit :class:`StepTimeModel` to profile rows of one (application, GPU type) (see :mod:`scheduler.formats.profiles`)."""
    m = rows["local_bsz"].to_numpy(float)
    n = rows["num_gpus"].to_numpy(int)
    k = rows["num_nodes"].to_numpy(int)
    step = rows["step_time"].to_numpy(float)
    sync = rows["sync_time"].to_numpy(float)
    has_sync = np.isfinite(sync)
    compute = np.where(has_sync & (n > 1), np.maximum(step - np.nan_to_num(sync), 1e-9), step)
    # compute time does not depend on N; single-GPU rows are the cleanest, use every row if they are few
    solo = n == 1
    use = solo if solo.sum() >= 2 else np.ones_like(solo)
    alpha_c, beta_c = _linear_fit(m[use], compute[use])
    grad = alpha_c + beta_c * m
    observed_sync = np.where(has_sync, np.nan_to_num(sync), np.maximum(step - grad, 0.0))
    local = (n > 1) & (k == 1)
    remote = (n > 1) & (k > 1)
    alpha_r, beta_r = _linear_fit((n[local] - 2).astype(float), observed_sync[local])
    alpha_n, beta_n = _linear_fit((n[remote] - 2).astype(float), observed_sync[remote])
    if not remote.any():  # no multi-node data: assume the network is no better than the local links
        alpha_n, beta_n = alpha_r, beta_r
    if not local.any():
        alpha_r, beta_r = alpha_n, beta_n
    best = StepTimeModel(alpha_c, beta_c, alpha_r, beta_r, alpha_n, beta_n, 1.0)
    multi = n > 1
    if multi.any():
        best_err = float("inf")
        for gamma in (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 10.0):
            cand = StepTimeModel(alpha_c, beta_c, alpha_r, beta_r, alpha_n, beta_n, gamma)
            pred = np.array([cand.step_time(mi, int(ni), int(ki)) for mi, ni, ki in zip(m[multi], n[multi], k[multi])])
            err = float(np.mean(np.log(pred / step[multi]) ** 2))
            if err < best_err:
                best, best_err = cand, err
    return best
