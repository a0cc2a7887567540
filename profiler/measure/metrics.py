"""The measurement math: overlap window, per-job iteration times, δ, slowdowns and confidence intervals.

Definitions (README, "Profiling campaigns"; thesis eq. 4.1):

* window  = [max_j start_j, min_j last_end_j]: after the first job stops the others run alone, so only
  the overlap counts;
* t'_j    = mean length of job j's iterations that begin and end inside the window (t_j: the same, solo);
* δ       = Σ_j t_j / max_j t'_j — packing beats running back to back when δ > 1;
* slowdown_j = t'_j / t_j;   ratio_j = t_j / t'_j (co-located over solo throughput);
* throughput_sum = Σ_j t_j / t'_j (what Gavel and Lucid publish; δ ≤ throughput_sum).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Two-sided 95 % Student-t critical values for 1..30 degrees of freedom; 1.96 beyond.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


@dataclass(frozen=True)
class JobTiming:
    """One job's iteration boundaries: when timing started and the end time of every iteration."""

    start: float
    ends: Sequence[float]


@dataclass(frozen=True)
class WindowStats:
    mean_s: float
    std_s: float
    iterations: int


def overlap_window(timings: Sequence[JobTiming]) -> tuple[float, float]:
    """The common window [latest start, earliest last end]; empty (end <= start) if jobs never overlapped."""
    if not timings or any(len(t.ends) == 0 for t in timings):
        return (0.0, 0.0)
    return (max(t.start for t in timings), min(t.ends[-1] for t in timings))


def iteration_stats(timing: JobTiming, window: tuple[float, float]) -> WindowStats:
    """Mean and std of the job's iterations lying entirely inside ``window``."""
    lo, hi = window
    boundaries = np.asarray([timing.start, *timing.ends], dtype=float)
    inside = boundaries[(boundaries >= lo) & (boundaries <= hi)]
    if inside.size < 2:
        return WindowStats(math.nan, math.nan, 0)
    intervals = np.diff(inside)
    return WindowStats(float(intervals.mean()), float(intervals.std(ddof=1)) if intervals.size > 1 else 0.0,
                       int(intervals.size))


def delta(solo: Sequence[float], colocated: Sequence[float]) -> float:
    """δ = Σ t_j / max t'_j."""
    _check(solo, colocated)
    return float(sum(solo) / max(colocated))


def throughput_sum(solo: Sequence[float], colocated: Sequence[float]) -> float:
    """Σ t_j / t'_j, the normalized throughput sum."""
    _check(solo, colocated)
    return float(sum(t / tc for t, tc in zip(solo, colocated)))


def slowdowns(solo: Sequence[float], colocated: Sequence[float]) -> list[float]:
    """t'_j / t_j per job."""
    _check(solo, colocated)
    return [tc / t for t, tc in zip(solo, colocated)]


def _check(solo: Sequence[float], colocated: Sequence[float]) -> None:
    if len(solo) != len(colocated) or not solo:
        raise ValueError("solo and co-located times must be non-empty and of equal length")
    if any(not (x > 0) for x in [*solo, *colocated]):
        raise ValueError("iteration times must be positive")


@dataclass(frozen=True)
class MeanCI:
    mean: float
    half_width: float  # 95 % two-sided Student-t half-width; nan with a single sample
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width


def mean_ci(values: Sequence[float]) -> MeanCI:
    """Mean and 95 % confidence interval over repeats (NaNs dropped)."""
    data = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if data.size == 0:
        return MeanCI(math.nan, math.nan, 0)
    if data.size == 1:
        return MeanCI(float(data[0]), math.nan, 1)
    dof = data.size - 1
    critical = _T95[dof - 1] if dof <= len(_T95) else 1.96
    half = critical * data.std(ddof=1) / math.sqrt(data.size)
    return MeanCI(float(data.mean()), float(half), int(data.size))
