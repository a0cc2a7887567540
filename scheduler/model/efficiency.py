"""Statistical efficiency: how much of a step's samples turn into progress at a batch size.

:func:`statistical_efficiency` is Pollux's form from a gradient-noise scale; :class:`ValidationCurves` hold Sia's
per-epoch gradient statistics at the validated batches (``validation-*.csv`` of its traces, read by
:func:`read_validation_curves`), from which a job's efficiency at its own batch and epoch is interpolated; a
:class:`GnsCurve` holds a job's gradient statistics along its training (Pollux, OSDI'21), read from the same files
by :func:`scheduler.formats.profiles.read_gns_curves`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class ValidationCurves:
    """Gradient statistics of one application measured at several global batch sizes, per epoch (Sia).

    Sia's simulator (``applications.py``) takes the gradient statistics of epoch ``e`` at a batch ``M`` by
    linear interpolation between the two validated batch sizes around ``M``; the epoch is the number of
    epoch boundaries a job's progress has crossed, a boundary being the smallest progress any curve
    reached by that epoch. ``sqr``/``var`` are ``[epoch, batch]`` arrays.
    """

    application: str
    batch_sizes: "np.ndarray"
    boundaries: "np.ndarray"
    sqr: "np.ndarray"
    var: "np.ndarray"

    @property
    def init_batch_size(self) -> int:
        return int(self.batch_sizes[0])

    @cached_property
    def _boundary_list(self) -> list[float]:
        return [float(b) for b in self.boundaries]

    def epoch(self, progress: float) -> int:
        # bisect on a list finds what ``np.searchsorted(side="right")`` finds (NaN past the end too) at a
        # tenth of its cost for one value: the simulator asks for an epoch on every goodput read
        return min(bisect_right(self._boundary_list, progress), len(self.boundaries) - 1)

    def efficiency(self, progress: float, batch_size: "np.ndarray | float") -> "np.ndarray":
        """``gain / scale`` with ``gain = (var + sqr) / (var / scale + sqr)``, ``scale = M / M0`` (≤ 1)."""
        return self.efficiency_at_epoch(self.epoch(progress), batch_size)

    def gradient_stats(self, progress: float, batch_size: float) -> tuple[float, float]:
        """(squared gradient norm, gradient variance) of the job's epoch at ``batch_size``, as Sia's simulator
        measures them for a running job (``get_grad_stats``): interpolated between the validated batches."""
        e = self.epoch(progress)
        M = max(float(batch_size), float(self.batch_sizes[0]))
        return float(np.interp(M, self.batch_sizes, self.sqr[e])), float(np.interp(M, self.batch_sizes, self.var[e]))

    def efficiency_at_epoch(self, e: int, batch_size: "np.ndarray | float") -> "np.ndarray":
        """:meth:`efficiency` with the epoch already known (the same at every progress inside it)."""
        M = np.maximum(np.asarray(batch_size, dtype=float), self.batch_sizes[0])
        sqr = np.interp(M, self.batch_sizes, self.sqr[e])
        var = np.interp(M, self.batch_sizes, self.var[e])
        scale = M / self.batch_sizes[0]
        denom = var / scale + sqr
        gain = np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), 1.0)
        return np.minimum(gain / scale, 1.0)


def read_validation_curves(root: "str | Path", applications: "Sequence[str] | None" = None
                           ) -> "dict[str, ValidationCurves]":
    """Every ``<root>/<app>/validation-<batch>.csv`` of a Sia traces directory, as :class:`ValidationCurves`.

    All curves of an application are cut to the shortest (Sia's ``max_epochs`` is at most that length).
    """
    import pandas as pd

    out: dict[str, ValidationCurves] = {}
    base = Path(root)
    if not base.is_dir():
        return out
    for app_dir in sorted(d for d in base.iterdir() if d.is_dir()):
        if applications is not None and app_dir.name not in applications:
            continue
        frames = {}
        for f in app_dir.glob("validation-*.csv"):
            size = f.stem.split("-")[-1]
            if size.isdigit():
                frames[int(size)] = pd.read_csv(f, usecols=["progress", "grad_sqr", "grad_var"], comment="#")
        if not frames:
            continue
        sizes = sorted(frames)
        n = min(len(frames[b]) for b in sizes)
        col = {k: np.stack([frames[b][k].to_numpy(float)[:n] for b in sizes], axis=1)
               for k in ("progress", "grad_sqr", "grad_var")}
        out[app_dir.name] = ValidationCurves(app_dir.name, np.asarray(sizes, dtype=float), col["progress"].min(axis=1),
                                             col["grad_sqr"], col["grad_var"])
    return out


def statistical_efficiency(batch_size: "np.ndarray | float", init_batch_size: int, noise_scale: float) -> "np.ndarray":
    """Pollux's efficiency ``(φ + M0) / (φ + M)`` for global batch M ≥ M0, capped at 1 below M0."""
    M = np.asarray(batch_size, dtype=float)
    if not np.isfinite(noise_scale):
        return np.ones_like(M)
    eff = (noise_scale + init_batch_size) / (noise_scale + M)
    return np.minimum(eff, 1.0)


# estimates kept per model before the caches start over (an entry is a few kB; Sia's 960-job newtrace
# workload with colocate asks for about 6,000 distinct ones, and the whole simulation peaks at 220 MB)


@dataclass(frozen=True)
class GnsCurve:
    """Gradient statistics along training for one application, measured at batch ``init_batch_size``.

    ``progress`` is increasing; ``grad_sqr`` (|g|²) and ``grad_var`` (tr Σ) are interpolated along it.
    ``max_batch_size`` is the largest batch Sia validated for the application (its adaptive upper limit).
    """

    application: str
    init_batch_size: int
    max_batch_size: int
    progress: tuple[float, ...]
    grad_sqr: tuple[float, ...]
    grad_var: tuple[float, ...]

    @property
    def max_progress(self) -> float:
        """Progress at the end of the reference curve (training done)."""
        return self.progress[-1]

    def noise_scale(self, progress: float) -> float:
        """Pollux's φ = M0 · tr Σ / |g|² at ``progress`` (linear interpolation, clamped to the curve)."""
        p = np.asarray(self.progress)
        sqr = float(np.interp(progress, p, self.grad_sqr))
        var = float(np.interp(progress, p, self.grad_var))
        if sqr <= 0:
            return float("inf")
        return self.init_batch_size * var / sqr
