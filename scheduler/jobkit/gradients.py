"""The gradient noise scale, measured during training, and the learning rate scaled with the batch size.

**Estimating** |G|² (the squared norm of the true gradient) and tr Σ (the trace of the per-example gradient
covariance) as Pollux / AdaptDL do: a minibatch gradient of b examples has E|g_b|² = |G|² + tr Σ / b, so the
squared norms of two gradients of one step at batch sizes b < B give the unbiased estimates

    |G|² ≈ (B·|g_B|² − b·|g_b|²) / (B − b)        tr Σ ≈ (|g_b|² − |g_B|²) / (1/b − 1/B)

The small gradient is one micro-batch of one replica (read before the all-reduce: the first micro-batch of
gradient accumulation, or the first half of the batch when there is no accumulation), the big one the whole
step's global batch. One step's estimates are noisy (either may be negative), so each is smoothed by an
exponential moving average with Adam's bias correction; the gradient noise scale is B_noise = tr Σ / |G|²
(McCandlish et al. 2018).

**Scaling the learning rate** from the batch ``base_batch`` its learning rate was tuned for to the batch B now,
with s = B / base_batch: ``adascale`` (default) multiplies it by AdaScale's gain

    r = (σ² + |G|²) / (σ²/s + |G|²),   σ² = tr Σ / base_batch   (the gradient variance at the base batch)

which lies in [1, s]: close to s while the noise dominates (large batches help), close to 1 once the
gradient is clean (they do not); ``linear`` by s, ``sqrt`` by √s, ``none`` leaves it. AdaScale's gain is 1
until the statistics have a value. The names are :data:`common.lr_scaling.LR_SCALINGS` (a job file's
``lr_scaling`` is checked against them too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from common.lr_scaling import LR_SCALINGS  # declared once, with the job file's validator (torch-free)


@dataclass
class GradientNoise:
    """Exponential moving averages of the |G|² and tr Σ estimates (``smoothing``: the weight of the past)."""

    smoothing: float = 0.9
    sqr_avg: float = 0.0
    var_avg: float = 0.0
    updates: int = 0

    def update(self, small_sqr: float, small_batch: int, big_sqr: float, big_batch: int) -> None:
        """Fold in one step's squared norms: ``small_sqr`` = |g_b|² at ``small_batch`` = b, ``big_sqr`` = |g_B|²."""
        if not big_batch > small_batch >= 1 or not (math.isfinite(small_sqr) and math.isfinite(big_sqr)):
            return
        sqr = (big_batch * big_sqr - small_batch * small_sqr) / (big_batch - small_batch)
        var = (small_sqr - big_sqr) / (1.0 / small_batch - 1.0 / big_batch)
        self.sqr_avg = self.smoothing * self.sqr_avg + (1 - self.smoothing) * sqr
        self.var_avg = self.smoothing * self.var_avg + (1 - self.smoothing) * var
        self.updates += 1

    def _corrected(self, value: float) -> float:
        return value / (1 - self.smoothing ** self.updates)

    @property
    def grad_sqr(self) -> float | None:
        """The smoothed |G|², or None before the first estimate (or while it is not positive: no noise scale)."""
        if self.updates == 0:
            return None
        value = self._corrected(self.sqr_avg)
        return value if value > 0 else None

    @property
    def grad_var(self) -> float | None:
        """The smoothed tr Σ (≥ 0), or None before the first estimate."""
        if self.updates == 0:
            return None
        return max(self._corrected(self.var_avg), 0.0)

    @property
    def noise_scale(self) -> float | None:
        sqr, var = self.grad_sqr, self.grad_var
        return None if sqr is None or var is None else var / sqr

    def state_dict(self) -> dict[str, Any]:
        return {"sqr_avg": self.sqr_avg, "var_avg": self.var_avg, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sqr_avg, self.var_avg = float(state["sqr_avg"]), float(state["var_avg"])
        self.updates = int(state["updates"])


def lr_factor(scaling: str, batch: int, base_batch: int, noise: GradientNoise | None = None) -> float:
    """What multiplies the learning rate tuned for ``base_batch`` at ``batch`` (see the module docstring)."""
    scale = batch / base_batch
    if scaling == "none" or scale == 1.0:
        return 1.0
    if scaling == "linear":
        return scale
    if scaling == "sqrt":
        return math.sqrt(scale)
    if scaling != "adascale":
        raise ValueError(f"unknown lr scaling {scaling!r}: one of {', '.join(LR_SCALINGS)}")
    sqr = noise.grad_sqr if noise is not None else None
    var = noise.grad_var if noise is not None else None
    if sqr is None or var is None:
        return 1.0
    sigma2 = var / base_batch
    return (sigma2 + sqr) / (sigma2 / scale + sqr)


def squared_norm(parameters: Any) -> float:
    """Σ |grad|² over ``parameters`` (those with a gradient), as a Python float."""
    import torch

    grads = [p.grad.detach() for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.stack([g.float().pow(2).sum() for g in grads]).sum())
