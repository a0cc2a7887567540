"""The exploration rule: which ratios the policy plans with for a pair, given what is believed about it.

One function, :func:`planning_ratios`, used by the live server and by the simulator alike. The rule is
*optimism bounded by a confidence interval* (UCB): each member's ratio is planned at the upper end of its
interval, ``r · exp(z · se)`` with ``se = σ / √(n₀ + n)`` in log space (``n₀`` the prior's weight, ``n``
the samples measured), so a pair nobody has run looks better than its prior says and gets tried, and the
bonus shrinks as samples come in. The optimism is bounded: a planned ratio never exceeds
:attr:`ExploreConfig.max_planned_ratio`, so an unknown pair's planned sum stays below two jobs' worth.

A pair that hurts — measured (``n ≥ min_samples``) with the *upper* end of its ratio-sum interval below 1
(δ < 1 beyond its CI: the two jobs together do less than one alone) — is planned as infeasible (ratios 0),
so every packing policy splits it in the next round. An infeasible pair (a ratio of 0 measured or given)
stays infeasible.

The optimism is for what nothing is known of (:attr:`ExploreConfig.optimism` ``"unknown"``, the default): a pair
with neither a prior (a given table, the δ predictor) nor a measurement is planned at its upper bound, so it gets
tried; a pair with a prior or a measurement is planned at its shrunk mean. Optimism over a prior overrides what the
prior says, and optimism over a measurement re-tries a pair measured to gain little, each try costing both jobs
a restart (the simulated Philly 2 at 2× load: with the δ predictor as prior, the interval's optimism kept
re-forming pairs of long yolov3 jobs and lost two thirds of the truth-given gain; ``results/sim/belief-replicates``).
``"all"`` is the earlier rule: every pair at its upper bound.

The optimism is *load-aware* (:func:`contended`): it pays only in a round whose jobs ask for at least
:attr:`ExploreConfig.contention` × the cluster's GPUs (the sum of each job's stated GPU count, ``Job.num_gpus``:
the trace's request in the simulator, ``min_gpus`` in ``serve``). In a calmer round every pair is planned at
its shrunk mean, so a pair nobody has run (time-slicing, ``0.5`` each, or its prior) is not packed to be
tried: at light load packing gains little and each exploration of an unknown pair costs its restarts.
Measured pairs that pay are still packed, and harmful ones still split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from common.errors import InputError

OPTIMISM = ("unknown", "all")  # which pairs the rule plans at their upper bound (module docstring)


@dataclass(frozen=True)
class ExploreConfig:
    """Knobs of the exploration rule (the one source of their defaults)."""

    z: float = 1.0  # width of the optimism, in standard errors
    sigma: float = 0.15  # per-sample noise of a log ratio (a measured mean over a round's iterations)
    max_planned_ratio: float = 0.95  # the bound on optimism: no member is planned faster than this
    min_samples: int = 1  # samples before a pair can be judged harmful
    enabled: bool = True  # False: plan with the shrunk means (no optimism), harmful pairs still split
    # optimism only in rounds whose jobs ask for >= this × the cluster's GPUs (Σ Job.num_gpus / GPUs);
    # 0: in every round (the rule before it was load-aware)
    contention: float = 1.0
    # which pairs are planned optimistically: "unknown" (no prior, never measured) or "all" (the earlier rule)
    optimism: str = "unknown"

    def __post_init__(self) -> None:
        if self.optimism not in OPTIMISM:
            raise InputError(f"optimism {self.optimism!r}", source="explore", field="optimism",
                             valid=", ".join(OPTIMISM))
        for name in ("z", "sigma", "contention"):
            if not getattr(self, name) >= 0:
                raise InputError(f"{name} {getattr(self, name)}", source="explore", field=name, valid="a number >= 0")
        if not 0 < self.max_planned_ratio <= 1.5:
            raise InputError(f"max_planned_ratio {self.max_planned_ratio}", source="explore",
                             field="max_planned_ratio", valid="a number in (0, 1.5]")


DEFAULT_EXPLORE = ExploreConfig()


def standard_error(weight: float, config: ExploreConfig = DEFAULT_EXPLORE) -> float:
    """Standard error of a log ratio backed by ``weight`` samples (prior weight included)."""
    return config.sigma / math.sqrt(max(weight, 1e-6))


def hurts(measured_a: float, measured_b: float, samples: int, config: ExploreConfig = DEFAULT_EXPLORE) -> bool:
    """True when the pair is measured and even the upper end of its measured ratio-sum interval is below 1.

    Judged on the measurements alone (not shrunk toward the prior), so an optimistic prior cannot keep a
    harmful pair together: one or two rounds of samples decide.
    """
    if samples < config.min_samples or measured_a <= 0 or measured_b <= 0:
        return False
    se = standard_error(samples, config)
    ratio_a, ratio_b = measured_a, measured_b
    upper = (ratio_a + ratio_b) * math.exp(config.z * se)
    return upper < 1.0


def contended(demands: Iterable[int], gpus: int, config: ExploreConfig = DEFAULT_EXPLORE) -> bool:
    """Whether a round is loaded enough to explore: its jobs ask for >= ``config.contention`` × ``gpus``.

    ``demands`` = each active job's stated GPU count (``Job.num_gpus``). Sia-style adaptive jobs scale out
    to whatever is free, so busy GPUs say nothing about load; what the jobs asked for does.
    """
    if config.contention <= 0:
        return True
    return sum(demands) >= config.contention * max(gpus, 1)


def planning_ratios(ratio_a: float, ratio_b: float, weight: float,
                    measured: tuple[float, float, int] | None = None,
                    config: ExploreConfig = DEFAULT_EXPLORE, explore: bool = True, known: bool = False
                    ) -> tuple[float, float]:
    """The ratios a policy plans with for a pair believed at ``(ratio_a, ratio_b)`` with ``weight`` evidence.

    ``weight`` = prior weight + samples (the shrinkage's denominator); ``measured`` = the measured mean
    ratios and their sample count, when the pair has run; ``explore`` = False in a calm round
    (:func:`contended`): the shrunk means, no optimism; ``known``: the pair has a prior (or ``measured``), so
    with ``config.optimism == "unknown"`` it is planned at its shrunk mean too.
    """
    if ratio_a <= 0 or ratio_b <= 0:
        return 0.0, 0.0  # infeasible stays infeasible
    if measured is not None and hurts(*measured, config=config):
        return 0.0, 0.0  # split it: planned as infeasible until the evidence says otherwise
    known = known or (measured is not None and measured[2] > 0)
    if not config.enabled or not explore or (known and config.optimism == "unknown"):
        return ratio_a, ratio_b
    bonus = math.exp(config.z * standard_error(weight, config))
    cap = config.max_planned_ratio
    return min(ratio_a * bonus, max(cap, ratio_a)), min(ratio_b * bonus, max(cap, ratio_b))


__all__ = ["DEFAULT_EXPLORE", "OPTIMISM", "ExploreConfig", "contended", "hurts", "planning_ratios", "standard_error"]
