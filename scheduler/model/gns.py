"""Gradient-noise curves (Pollux, OSDI'21): how a job's gradient statistics evolve along its training.

Values only; :func:`scheduler.formats.profiles.read_gns_curves` reads them from Sia's ``validation-*.csv`` files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
