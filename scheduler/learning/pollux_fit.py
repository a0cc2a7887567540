"""Pollux's fit of its iteration-time model to the configurations a job has run (OSDI'21 §3.2, as Sia's scheduler
uses it, SOSP'23 §3.4): the throughput belief's default fit (:mod:`scheduler.learning.throughput`).

The seven parameters of :class:`~scheduler.model.step_time.StepTimeModel` minimise, over the measured points
``i`` (``k`` nodes, ``N`` GPUs, local batch ``m``, step time ``s``, all-reduce time ``y``)::

    RMSE_i(log(α_c + β_c·m_i) − log(s_i − y_i))          compute time
  + RMSE_i(log((α_c + β_c·m_i)^γ + T_sync,i^γ)/γ − log s_i)   step time, T_sync,i = α + β·max(N_i − 2, 10⁻⁸)
  + 10⁻³·(γ − 1)²  +  10⁻²·((β_n/α_n)² + (β_r/α_r)²)       prefer little overlap and no retrogression

with (α, β) = (α_n, β_n) across nodes, (α_r, β_r) inside one node, and 10⁻⁸ on one GPU; every parameter
≥ 10⁻⁸, γ in [1, 10]; L-BFGS-B from (0.1, 0.01) per pair and γ = 1.001. The priors of Pollux's fit hold the
terms nothing measured: one local batch measured fixes α_c at half the mean compute time; no cross-node run
holds (α_n, β_n), no multi-GPU run inside a node (α_r, β_r), no run over 2 GPUs (β_n, β_r) at 10⁻⁸; with no
cross-node run, afterwards, α_n ≥ 1.1·α_r and β_n ≥ 1.1·β_r.

Unlike fitting each term to its own measurement, the joint fit makes the step times of the measured
configurations come out as measured (the network terms absorb what the measured all-reduce time leaves out),
and with a single multi-GPU count measured it splits the network time between α and β, so more GPUs cost
more: both make the belief less optimistic about scaling out than line fits per term.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import minimize
from threadpoolctl import ThreadpoolController

from scheduler.model.step_time import StepTimeModel

FLOOR = 1e-8  # Pollux's lower bound of every time parameter (a term "held at zero")
_START = np.array([0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.0 + 1e-3])  # (α_c, β_c, α_n, β_n, α_r, β_r, γ)
_LOWER = np.array([FLOOR] * 6 + [1.0])
_UPPER = np.array([np.inf] * 6 + [10.0])
AC, BC, AN, BN, AR, BR, GAMMA = range(7)


@functools.cache
def _blas() -> ThreadpoolController:
    """The loaded libraries' thread pools, scanned once (a scan costs ~1 ms, a fit ~3 ms)."""
    return ThreadpoolController()


def _objective(x: Sequence[float], points: Sequence[tuple[int, float, float, float, float]]
               ) -> tuple[float, list[float]]:
    """The objective of the module docstring and its gradient in all seven parameters.

    ``points``: (link, extra, m, log compute, log step) per measured point, link 0 on one GPU, 1 inside a node,
    2 across nodes; extra = max(N − 2, 10⁻⁸). Plain floats: a job has a handful of points, and the fit runs
    each time a job runs a new configuration, where numpy's per-call cost would dominate.
    """
    ac, bc, an, bn, ar, br, g = (float(v) for v in x)
    count = len(points)
    rows = []
    sq1 = sq2 = 0.0
    for link, extra, m, log_compute, log_step in points:
        compute = ac + bc * m
        alpha, beta = (FLOOR, FLOOR) if link == 0 else (ar, br) if link == 1 else (an, bn)
        sync = alpha + beta * extra
        lc, ls = math.log(compute), math.log(sync)
        top = max(g * lc, g * ls)
        total = top + math.log(math.exp(g * lc - top) + math.exp(g * ls - top))
        w_compute = math.exp(g * lc - total)
        pred = total / g
        e1, e2 = lc - log_compute, pred - log_step
        sq1 += e1 * e1
        sq2 += e2 * e2
        rows.append((link, extra, m, compute, sync, lc, ls, w_compute, pred, e1, e2))
    err1, err2 = math.sqrt(sq1 / count), math.sqrt(sq2 / count)
    grad = [0.0] * 7
    for link, extra, m, compute, sync, lc, ls, w_compute, pred, e1, e2 in rows:
        d_pred = e2 / (count * err2) if err2 > 0 else 0.0  # d err2 / d predicted log step
        d_compute = (e1 / (count * err1) if err1 > 0 else 0.0) / compute + d_pred * w_compute / compute
        grad[AC] += d_compute
        grad[BC] += d_compute * m
        if link:
            d_sync = d_pred * (1.0 - w_compute) / sync
            a, b = (AR, BR) if link == 1 else (AN, BN)
            grad[a] += d_sync
            grad[b] += d_sync * extra
        grad[GAMMA] += d_pred * (-pred + w_compute * lc + (1.0 - w_compute) * ls) / g
    value = err1 + err2 + 1e-3 * (g - 1) ** 2 + 1e-2 * ((bn / an) ** 2 + (br / ar) ** 2)
    grad[GAMMA] += 2e-3 * (g - 1)
    for a, b, va, vb in ((AN, BN, an, bn), (AR, BR, ar, br)):
        grad[b] += 2e-2 * vb / va ** 2
        grad[a] -= 2e-2 * vb ** 2 / va ** 3
    return value, grad


def fit_pollux(num_nodes: Sequence[int], num_gpus: Sequence[int], local_bsz: Sequence[float],
               step_time: Sequence[float], sync_time: Sequence[float]) -> StepTimeModel:
    """Fit :class:`StepTimeModel` to measured points as Pollux's scheduler does (module docstring)."""
    k, n = np.asarray(num_nodes, float), np.asarray(num_gpus, float)
    m, step = np.asarray(local_bsz, float), np.asarray(step_time, float)
    sync = np.clip(np.nan_to_num(np.asarray(sync_time, float)), 0.0, None)
    compute = np.maximum(step - sync, FLOOR)
    x0, lower, upper = _START.copy(), _LOWER.copy(), _UPPER.copy()
    held = []
    if len(np.unique(m)) == 1:
        x0[AC] = lower[AC] = upper[AC] = float(np.mean(compute)) / 2
        held.append(AC)
    if not (k > 1).any():
        held += [AN, BN]
    if not ((k <= 1) & (n > 1)).any():
        held += [AR, BR]
    if not (n > 2).any():
        held += [BN, BR]
    for i in held:
        if i != AC:
            x0[i] = upper[i] = lower[i]
    free = [i for i in range(7) if i not in set(held)]
    link = np.where(k > 1, 2, np.where(n > 1, 1, 0))
    points = list(zip(link.tolist(), np.maximum(n - 2, FLOOR).tolist(), m.tolist(), np.log(compute).tolist(),
                      np.log(step).tolist()))
    full = x0.tolist()

    def objective(z: np.ndarray) -> tuple[float, np.ndarray]:
        for i, v in zip(free, z.tolist()):
            full[i] = v
        value, grad = _objective(full, points)
        return value, np.array([grad[i] for i in free])

    # L-BFGS-B's vector work goes through scipy's BLAS: on 7 parameters its threads only spin (≈ 5 s of CPU per
    # simulation on a 2-core machine, the wall time unchanged); one thread gives the same iterates
    with _blas().limit(limits=1, user_api="blas"):
        result = minimize(objective, x0[free], jac=True, method="L-BFGS-B",
                          bounds=list(zip(lower[free], upper[free])), tol=1e-5)
    x = x0.copy()
    x[free] = result.x
    if not (k > 1).any():
        x[AN], x[BN] = max(x[AN], 1.1 * x[AR]), max(x[BN], 1.1 * x[BR])
    ac, bc, an, bn, ar, br, g = (float(v) for v in x)
    return StepTimeModel(alpha_c=ac, beta_c=bc, alpha_r=ar, beta_r=br, alpha_n=an, beta_n=bn, gamma=g)


__all__ = ["fit_pollux"]
