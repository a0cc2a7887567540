"""Statistical efficiency from the gradient statistics a running job reports (``colocate serve``'s live goodput).

A job may add to its progress record (:mod:`scheduler.executor.job_files`) ``grad_sqr`` = |G|², the squared norm
of the true gradient, ``grad_var`` = tr Σ, the trace of the covariance of *one example's* gradient, and ``lr``,
the learning rate it trains at. Their ratio is the gradient noise scale (McCandlish et al. 2018; Pollux's φ)::

    B_noise = tr Σ / |G|²

A step at global batch M sees the gradient with noise tr Σ / M. Pollux (OSDI'21) measures how many samples a
step at M is worth relative to the job's base batch M0 (the batch its learning rate was set for: the job
file's ``batch_size``) and calls the ratio per sample its *statistical efficiency*::

    E(M) = (B_noise + M0) / (B_noise + M)         M ≥ M0;   E(M) = 1 for M ≤ M0 (capped)

so E(M0) = 1, E falls with M beyond M0 (each extra sample is worth less once the noise is averaged away)
and rises with B_noise (a noisy gradient keeps profiting from a larger batch). The scheduler maximises
goodput = throughput(M) × E(M) over the batches a job allows (:class:`scheduler.learning.online.LearnedGoodputModel`).

Sia's and Pollux's traces store the variance *at the base batch*, ``var = tr Σ / M0``
(:class:`scheduler.model.efficiency.GnsCurve`, :class:`~scheduler.model.efficiency.ValidationCurves`), whence
their φ = M0 · var / sqr: the same B_noise (:func:`variance_at_base`, :func:`per_example_variance`).

Reports are smoothed before use (:func:`smoothed`): |G|² and tr Σ separately (their ratio from averages is
steadier than an average of noisy ratios, as Pollux does), a running mean over the first
:data:`FULL_WEIGHT_REPORTS` reports, then an exponential average of weight :data:`SMOOTHING` (the statistics
drift as training goes on: late reports must count). A report is folded once: a poll that finds the same step
again folds nothing.

No numpy here: ``colocate jobs --json`` shows these figures and imports nothing heavy (:func:`efficiency` is
:func:`scheduler.model.efficiency.statistical_efficiency` for one batch; the tests check they agree).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SMOOTHING = 0.25  # weight of a new report once FULL_WEIGHT_REPORTS have been folded
FULL_WEIGHT_REPORTS = 4


@dataclass(frozen=True)
class GradientStats:
    """One job's smoothed gradient statistics: |G|², tr Σ (per example), its learning rate, reports folded."""

    grad_sqr: float
    grad_var: float
    lr: float | None = None
    reports: int = 1
    step: int = 0  # the progress step of the last report folded

    @property
    def noise_scale(self) -> float:
        """B_noise = tr Σ / |G|² (∞ when |G|² = 0: nothing but noise, every batch size is as efficient)."""
        return noise_scale(self.grad_sqr, self.grad_var)

    def efficiency(self, batch_size: float, base_batch: int) -> float:
        """E(M) at each global batch ``batch_size`` for a job whose base batch is ``base_batch`` (module docstring)."""
        return efficiency(batch_size, base_batch, self.noise_scale)

    def as_row(self) -> dict[str, Any]:
        return {"grad_sqr": self.grad_sqr, "grad_var": self.grad_var, "lr": self.lr, "reports": self.reports,
                "step": self.step}


def noise_scale(grad_sqr: float, grad_var: float) -> float:
    """B_noise = ``grad_var`` / ``grad_sqr``; ∞ when ``grad_sqr`` is 0."""
    return grad_var / grad_sqr if grad_sqr > 0 else math.inf


def efficiency(batch_size: float, base_batch: int, noise: float) -> float:
    """E(M) = (B + M0) / (B + M), capped at 1 (M ≤ M0), for noise scale B = ``noise`` and M0 = ``base_batch``
    (B = ∞: 1 at every batch)."""
    if not math.isfinite(noise):
        return 1.0
    return min((noise + base_batch) / (noise + float(batch_size)), 1.0)


def variance_at_base(grad_var: float, base_batch: int) -> float:
    """The variance a Sia/Pollux trace stores for a job (at its base batch M0): tr Σ / M0."""
    return grad_var / base_batch


def per_example_variance(var_at_base: float, base_batch: int) -> float:
    """tr Σ from a trace's variance at the base batch M0: var · M0 (inverse of :func:`variance_at_base`)."""
    return var_at_base * base_batch


def report(progress: Mapping[str, Any] | None) -> tuple[float, float, float | None] | None:
    """(grad_sqr, grad_var, lr) of a checked progress record, or None until the job reports both statistics."""
    if not progress or progress.get("grad_sqr") is None or progress.get("grad_var") is None:
        return None
    lr = progress.get("lr")
    return float(progress["grad_sqr"]), float(progress["grad_var"]), None if lr is None else float(lr)


def smoothed(previous: GradientStats | None, grad_sqr: float, grad_var: float, lr: float | None,
             step: int) -> GradientStats:
    """``previous`` with one more report folded in: weight w = max(1 / (n + 1), :data:`SMOOTHING`) for the n-th
    report (a running mean first, an exponential average after), ``x ← (1 − w)·x + w·x_new`` for |G|² and
    tr Σ each; the learning rate is the latest (it is set, not measured)."""
    if previous is None:
        return GradientStats(grad_sqr, grad_var, lr, 1, step)
    w = max(1.0 / (previous.reports + 1), SMOOTHING)
    return GradientStats((1 - w) * previous.grad_sqr + w * grad_sqr, (1 - w) * previous.grad_var + w * grad_var,
                         lr if lr is not None else previous.lr, previous.reports + 1, step)


def fold(previous: GradientStats | None, progress: Mapping[str, Any] | None) -> GradientStats | None:
    """The statistics after a poll found ``progress``: ``previous`` with its report folded in, ``previous`` itself
    when the record has no statistics or is the report already folded (same step), None when there are none."""
    got = report(progress)
    if got is None:
        return previous
    step = int((progress or {}).get("step") or 0)
    if previous is not None and previous.step == step:
        return previous
    return smoothed(previous, *got, step)


def from_row(row: Mapping[str, Any]) -> GradientStats:
    """A checked ``gradients`` row (:mod:`scheduler.service.state.rows`) as statistics."""
    lr = row.get("lr")
    return GradientStats(float(row["grad_sqr"]), float(row["grad_var"]), None if lr is None else float(lr),
                         int(row["reports"]), int(row["step"]))


def shown(stats: GradientStats | None, batch_size: int | None, base_batch: int) -> dict[str, Any]:
    """What ``colocate jobs --json`` and ``learned`` show of a job's statistics: all None until it reports."""
    if stats is None:
        return {"grad_sqr": None, "grad_var": None, "noise_scale": None, "lr": None, "efficiency": None,
                "gradient_reports": 0}
    scale = stats.noise_scale
    eff = float(stats.efficiency(batch_size, base_batch)) if batch_size else None
    return {"grad_sqr": stats.grad_sqr, "grad_var": stats.grad_var,
            "noise_scale": scale if math.isfinite(scale) else None, "lr": stats.lr,
            "efficiency": None if eff is None else round(eff, 4), "gradient_reports": stats.reports}


__all__ = ["FULL_WEIGHT_REPORTS", "SMOOTHING", "GradientStats", "efficiency", "fold", "from_row", "noise_scale",
           "per_example_variance", "report", "shown", "smoothed", "variance_at_base"]
