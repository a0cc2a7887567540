"""The exploration rule: which ratios the policy plans with for a pair, given what is believed about it.

One function, :func:`planning_ratios`, used by the live server and by the simulator alike. The rule is
*optimism bounded by the belief's own interval* (UCB): each member's ratio is planned at the upper end of
its interval, ``r · exp(z · sd)``, ``z`` the normal quantile of :attr:`ExploreConfig.level` and ``sd`` the
belief's standard deviation in log space (:mod:`scheduler.learning.pairs`): the prior's own spread — the
calibrated interval of the δ predictor (:mod:`scheduler.learning.predictor.conformal`), wide for a job type it never
saw or a GPU type its error is large on, narrow where the same pair was measured elsewhere; the noise of one
sample for a table that gives no interval; the spread of ratios around time-slicing where nothing is known —
shrunk by every sample measured, ``sd = 1 / √(1/s₀² + n/σ²)``. So a pair is tried when the top of what it
might be would pay, a confident prediction is planned near its value, and a measured pair near what was
measured. The optimism is bounded: no member is planned above :attr:`ExploreConfig.max_planned_ratio`
unless its belief already is.

A pair that hurts — measured (``n ≥ min_samples``) with the *upper* end of its measured ratio-sum interval
below 1 (δ < 1 beyond its CI: the two jobs together do less than one alone) — is planned as infeasible
(ratios 0), so every packing policy splits it in the next round. An infeasible pair (a ratio of 0 measured or
given) stays infeasible.

The optimism is *load-aware* (:func:`contended`): it pays only in a round whose jobs ask for at least
:attr:`ExploreConfig.contention` × the cluster's GPUs (the sum of each job's stated GPU count, ``Job.num_gpus``:
the trace's request in the simulator, ``min_gpus`` in ``serve``). In a calmer round every pair is planned at
its believed ratio: at light load packing gains little and each exploration costs its restarts. Measured
pairs that pay are still packed, and harmful ones still split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist

from common.bounds import check_number


def z_of(level: float) -> float:
    """The normal quantile of the upper end of a two-sided interval of coverage ``level`` (0.8 → 1.2816)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


@dataclass(frozen=True)
class ExploreConfig:
    """Knobs of the exploration rule (the one source of their defaults)."""

    # the upper end of the belief's 20 % interval (z = 0.25): on the simulated Philly 2 the 80 % interval's top
    # tried every poorly predicted pair in turn, each at two restarts (results/sim/belief-interval/NOTES.md); 30 %
    # still cost the learner without a table 3 % on Philly 2 at 1x, 20 % none at 12 of 12 points of issue 46's
    # grid (results/sim/packing-pays/NOTES.md, 8.9); at 10 % an unknown pair is never tried
    # (not a flag: no command takes an ExploreConfig; tests and experiments construct one)
    level: float = 0.2  # coverage of the interval whose upper end a pair is planned at
    # per-sample noise of a log ratio: a round's mean co-located over a measured solo time. Repeats of one pair
    # on an H100 differ by 1-2 % (results/h100/REPORT.md); 5 % leaves room for a round's shorter window
    sigma: float = 0.05
    max_planned_ratio: float = 0.95  # the bound on optimism: no member is planned faster than this
    min_samples: int = 1  # samples before a pair can be judged harmful
    enabled: bool = True  # False: plan with the believed ratios (no optimism), harmful pairs still split
    # optimism only in rounds whose jobs ask for >= this × the cluster's GPUs (Σ Job.num_gpus / GPUs)
    contention: float = 1.0

    def __post_init__(self) -> None:
        check_number(self.level, field="level", low=0, high=1, low_open=True, high_open=True, source="explore",
                     valid="a coverage in (0, 1)")
        for name in ("sigma", "contention"):
            check_number(getattr(self, name), field=name, low=0, high=math.inf, source="explore",
                         valid="a number >= 0")
        check_number(self.max_planned_ratio, field="max_planned_ratio", low=0, high=1.5, low_open=True,
                     source="explore", valid="a number in (0, 1.5]")

    @property
    def z(self) -> float:
        """Width of the interval's upper end, in standard deviations."""
        return z_of(self.level)


DEFAULT_EXPLORE = ExploreConfig()


def standard_error(samples: float, config: ExploreConfig = DEFAULT_EXPLORE) -> float:
    """Standard error of the mean log ratio of ``samples`` measurements (no prior)."""
    return config.sigma / math.sqrt(max(samples, 1e-6))


def hurts(measured_a: float, measured_b: float, samples: int, config: ExploreConfig = DEFAULT_EXPLORE) -> bool:
    """True when the pair is measured and even the upper end of its measured ratio-sum interval is below 1.

    Judged on the measurements alone (not shrunk toward the prior), so an optimistic prior cannot keep a
    harmful pair together: one or two rounds of samples decide.
    """
    if samples < config.min_samples or measured_a <= 0 or measured_b <= 0:
        return False
    upper = (measured_a + measured_b) * math.exp(config.z * standard_error(samples, config))
    return upper < 1.0


def contended(demands: Iterable[int], gpus: int, config: ExploreConfig = DEFAULT_EXPLORE) -> bool:
    """Whether a round is loaded enough to explore: its jobs ask for >= ``config.contention`` × ``gpus``.

    ``demands`` = each active job's stated GPU count (``Job.num_gpus``). Sia-style adaptive jobs scale out
    to whatever is free, so busy GPUs say nothing about load; what the jobs asked for does.
    """
    if config.contention <= 0:
        return True
    return sum(demands) >= config.contention * max(gpus, 1)


def planning_ratios(ratio_a: float, ratio_b: float, sd_a: float, sd_b: float,
                    measured: tuple[float, float, int] | None = None,
                    config: ExploreConfig = DEFAULT_EXPLORE, explore: bool = True) -> tuple[float, float]:
    """The ratios a policy plans with for a pair believed at ``(ratio_a, ratio_b)``, each with its belief's
    standard deviation in log space (``sd_a``, ``sd_b``).

    ``measured`` = the measured mean ratios and their sample count, when the pair has run; ``explore`` = False
    in a calm round (:func:`contended`): the believed ratios, no optimism.
    """
    if ratio_a <= 0 or ratio_b <= 0:
        return 0.0, 0.0  # infeasible stays infeasible
    if measured is not None and hurts(*measured, config=config):
        return 0.0, 0.0  # split it: planned as infeasible until the evidence says otherwise
    if not config.enabled or not explore:
        return ratio_a, ratio_b
    cap = config.max_planned_ratio
    upper_a, upper_b = ratio_a * math.exp(config.z * sd_a), ratio_b * math.exp(config.z * sd_b)
    return min(upper_a, max(cap, ratio_a)), min(upper_b, max(cap, ratio_b))


__all__ = ["DEFAULT_EXPLORE", "ExploreConfig", "contended", "hurts", "planning_ratios", "standard_error", "z_of"]
