"""The pair-ratio belief: what the scheduler believes two jobs do to each other on one GPU, and how sure it is.

One belief per (GPU type, job type a, job type b), kept in log space, where ratios multiply:

* a **prior** — a table the user gave (``--colocation``), the δ predictor's output
  (:mod:`scheduler.learning.predictor.prior`), or nothing (then plain time-slicing, ``0.5`` each) — with its own
  spread in log space: the prior's interval where it gives one (the predictor's calibrated interval, or a
  table's ``low_a``/``high_a``... columns), one sample's noise for a table without intervals, and
  :attr:`PairConfig.unknown_spread` for nothing; a prior of spread ``s₀`` counts as ``(σ / s₀)²`` samples;
* **observations** — ratios ``t/t'`` measured for both members (the live server: a co-located mean
  iteration time over a *measured* solo time of the same configuration, :mod:`scheduler.learning.online`;
  the simulator: the ratios the true table gave a pair that ran), each bounded to
  [:attr:`PairConfig.min_ratio`, :attr:`PairConfig.max_ratio`];
* the **estimate** is the precision-weighted mean of the two, so ratios are shrunk toward the prior by their
  sample counts, with an interval ``exp(mean ± z·sd)``, ``sd = σ/√(w₀ + n)`` (``σ``, ``z``:
  :class:`scheduler.learning.explore.ExploreConfig`).

A pair measured at one batch size informs the same two applications at every other batch size: its
application-level belief is the prior of the exact one. What a policy plans with comes from
:func:`scheduler.learning.explore.planning_ratios` (the upper end of the interval; harmful pairs split),
built into a :class:`~scheduler.model.colocation.ColocationTable` by :meth:`PairBelief.planning_table`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.errors import InputError
from scheduler.learning.explore import DEFAULT_EXPLORE, ExploreConfig, planning_ratios, z_of
from scheduler.model.colocation import ColocationTable

Key = tuple[str, str, str]  # (GPU type, job type a, job type b), a <= b
Interval = tuple[float, float]


@dataclass(frozen=True)
class PriorAnswer:
    """What a prior says of a pair (ratios in the order asked), with its interval of coverage ``level`` where it
    has one (None: a measured value, as sure as one sample)."""

    ratio_a: float
    ratio_b: float
    interval_a: Interval | None = None
    interval_b: Interval | None = None
    level: float = 0.8

    def swapped(self) -> PriorAnswer:
        return PriorAnswer(self.ratio_b, self.ratio_a, self.interval_b, self.interval_a, self.level)

    def normal(self, sample_spread: float) -> tuple[tuple[float, float], tuple[float, float]]:
        """Each ratio as a normal belief in log space, ``((center, spread), (center, spread))``: with an interval,
        centered on its log midpoint (the prediction corrected by the bias of its held-out residuals) with the
        half-width over z as spread, so the belief's upper end before any sample is the interval's own; without
        one, the ratio itself, as sure as one sample (``sample_spread``)."""
        z = z_of(self.level)

        def one(ratio: float, interval: Interval | None) -> tuple[float, float]:
            if interval is None or not (interval[0] > 0 and interval[1] >= interval[0]):
                return math.log(ratio), sample_spread
            low, high = math.log(interval[0]), math.log(interval[1])
            return (low + high) / 2, max((high - low) / (2 * z), MIN_SPREAD)

        return one(self.ratio_a, self.interval_a), one(self.ratio_b, self.interval_b)


MIN_SPREAD = 1e-3  # a prior is never surer than this (log units): one sample still moves it
# (gpu, a, b) -> what the prior says of the pair, None when it has no answer
PriorFn = Callable[[str, str, str], "PriorAnswer | None"]


@dataclass(frozen=True)
class PairConfig:
    """Bounds and weights of the pair belief (the one source of their defaults)."""

    min_ratio: float = 0.01
    max_ratio: float = 1.1  # co-location never makes a job much faster than alone: more is noise
    prior_weight: float = 1.0  # pseudo-samples of a prior without an interval (a measured table: one sample)
    # "nothing known": measured log ratios spread 0.36 around time-slicing (the root mean square of log(r / 0.5)
    # over the 2,034 ratios of the shipped tables, scheduler.learning.predictor.prior.default_training_frame)
    unknown_spread: float = 0.36
    unknown_ratio: float = 0.5  # each member at half its solo speed: plain time-slicing

    def __post_init__(self) -> None:
        if not 0 < self.min_ratio < self.unknown_ratio < self.max_ratio <= 1.5:
            raise InputError(f"ratios {self.min_ratio}/{self.unknown_ratio}/{self.max_ratio}", source="pairs",
                             field="min_ratio", valid="0 < min_ratio < unknown_ratio < max_ratio <= 1.5")
        if not (self.prior_weight > 0 and self.unknown_spread > 0):
            raise InputError("prior weight and spread must be > 0", source="pairs", field="prior_weight",
                             valid="a number > 0")

    def bound(self, ratio: float) -> float:
        return min(max(float(ratio), self.min_ratio), self.max_ratio)


DEFAULT_PAIRS = PairConfig()


@dataclass(frozen=True)
class PairEstimate:
    """The belief about one pair: shrunk ratios, the evidence behind them and their intervals."""

    ratio_a: float
    ratio_b: float
    weight: float  # prior weight + samples
    samples: int
    measured: tuple[float, float] | None  # the measured means alone (bounded), when the pair ran
    interval_a: tuple[float, float]
    interval_b: tuple[float, float]
    source: str  # "measured", "prior", "unknown", "infeasible"
    sd_a: float = 0.0  # each ratio's standard deviation in log space (prior and samples together)
    sd_b: float = 0.0

    @property
    def feasible(self) -> bool:
        return self.ratio_a > 0 and self.ratio_b > 0


def application(job_type: str) -> str:
    """``model@batch`` -> ``model``; an application name stays as it is."""
    return job_type.rpartition("@")[0] or job_type


def table_prior(table: ColocationTable | None) -> PriorFn | None:
    """A prior that looks pairs up in a table: exact types first, then application names; a row's interval
    (the table's ``low_a``/``high_a``/``low_b``/``high_b`` columns, e.g. a predicted table) comes with it."""
    if table is None:
        return None

    def lookup(gpu: str, a: str, b: str) -> PriorAnswer | None:
        for ka in dict.fromkeys((a, application(a))):
            for kb in dict.fromkeys((b, application(b))):
                hit = table.ratios.get((gpu, ka, kb))
                if hit is not None:
                    bounds = table.intervals.get((gpu, ka, kb))
                    if bounds is None:
                        return PriorAnswer(*hit)
                    return PriorAnswer(hit[0], hit[1], bounds[0], bounds[1], table.interval_level)
        return None

    return lookup


def chain_priors(*priors: PriorFn | None) -> PriorFn | None:
    """The first prior that knows the pair (e.g. the user's table, then the predictor)."""
    present = [p for p in priors if p is not None]
    if not present:
        return None

    def lookup(gpu: str, a: str, b: str) -> PriorAnswer | None:
        for p in present:
            hit = p(gpu, a, b)
            if hit is not None:
                return hit
        return None

    return lookup


def _posterior(prior_mean: float, prior_spread: float, log_sum: float, n: int, sigma: float
               ) -> tuple[float, float, float]:
    """(mean, sd, weight in samples) of a log ratio: a normal prior of ``prior_spread`` and ``n`` samples of
    noise ``sigma`` (the prior counts as (σ / spread)² samples)."""
    w0 = (sigma / prior_spread) ** 2 if sigma > 0 else 1.0
    weight = w0 + n
    mean = (w0 * prior_mean + log_sum) / weight
    sd = sigma / math.sqrt(weight) if sigma > 0 else prior_spread / math.sqrt(1 + n)
    return mean, sd, weight


@dataclass
class _Samples:
    log_a: float = 0.0  # sum of log ratios of member a
    log_b: float = 0.0
    n: int = 0


def _key(gpu: str, a: str, b: str) -> tuple[Key, bool]:
    """The canonical key and whether (a, b) was swapped to reach it."""
    return ((gpu, a, b), False) if a <= b else ((gpu, b, a), True)


@dataclass
class PairBelief:
    """Prior plus observations per pair; :meth:`estimate` shrinks, :meth:`planning_table` explores."""

    prior: PriorFn | None = None
    config: PairConfig = DEFAULT_PAIRS
    explore: ExploreConfig = DEFAULT_EXPLORE
    samples: dict[Key, _Samples] = field(default_factory=dict)
    infeasible: set[Key] = field(default_factory=set)
    version: int = 0  # bumped by every observation: a cache key for tables built from the belief

    # -- learning ----------------------------------------------------------------------------------------
    def observe(self, gpu: str, a: str, b: str, ratio_a: float, ratio_b: float, count: int = 1) -> None:
        """Fold ``count`` samples of measured ratios into the exact pair and its application-level pair."""
        if count <= 0:
            return
        if not (math.isfinite(ratio_a) and math.isfinite(ratio_b)):
            return
        keys = {(a, b), (application(a), application(b))}
        for x, y in keys:
            key, swapped = _key(gpu, x, y)
            if ratio_a <= 0 or ratio_b <= 0:
                self.infeasible.add(key)
                continue
            ra, rb = (ratio_b, ratio_a) if swapped else (ratio_a, ratio_b)
            s = self.samples.setdefault(key, _Samples())
            s.log_a += count * math.log(self.config.bound(ra))
            s.log_b += count * math.log(self.config.bound(rb))
            s.n += count
        self.version += 1

    # -- believing ---------------------------------------------------------------------------------------
    def _prior(self, gpu: str, a: str, b: str) -> tuple[float, float, float, float, str]:
        """(ratio a, ratio b, log spread a, log spread b, source) before this pair's own samples."""
        sample = self.explore.sigma / math.sqrt(self.config.prior_weight)  # a prior worth prior_weight samples
        exact = application(a) != a or application(b) != b
        if exact:  # the same two applications at any batch: their learned belief is this pair's prior
            coarse = self.samples.get(_key(gpu, application(a), application(b))[0])
            if coarse is not None and coarse.n:
                est = self.estimate(gpu, application(a), application(b))
                return est.ratio_a, est.ratio_b, max(est.sd_a, sample), max(est.sd_b, sample), "prior"
        hit = self.prior(gpu, a, b) if self.prior is not None else None
        if hit is not None:
            if hit.ratio_a <= 0 or hit.ratio_b <= 0:
                return 0.0, 0.0, 0.0, 0.0, "infeasible"
            (center_a, spread_a), (center_b, spread_b) = hit.normal(sample)
            return (self.config.bound(math.exp(center_a)), self.config.bound(math.exp(center_b)), spread_a, spread_b,
                    "prior")
        u, s = self.config.unknown_ratio, self.config.unknown_spread
        return u, u, s, s, "unknown"

    def estimate(self, gpu: str, a: str, b: str) -> PairEstimate:
        """The shrunk belief about ``a`` sharing a GPU of type ``gpu`` with ``b`` (ratios in that order)."""
        key, swapped = _key(gpu, a, b)
        first, second = key[1], key[2]
        if key in self.infeasible or _key(gpu, application(a), application(b))[0] in self.infeasible:
            return self._ordered(PairEstimate(0.0, 0.0, 0.0, 0, None, (0.0, 0.0), (0.0, 0.0), "infeasible"), swapped)
        pa, pb, spread_a, spread_b, source = self._prior(gpu, first, second)
        if source == "infeasible":
            return self._ordered(PairEstimate(0.0, 0.0, 0.0, 0, None, (0.0, 0.0), (0.0, 0.0), source), swapped)
        s = self.samples.get(key, _Samples())
        sigma, z = self.explore.sigma, self.explore.z
        mean_a, sd_a, w_a = _posterior(math.log(pa), spread_a, s.log_a, s.n, sigma)
        mean_b, sd_b, w_b = _posterior(math.log(pb), spread_b, s.log_b, s.n, sigma)
        measured = (math.exp(s.log_a / s.n), math.exp(s.log_b / s.n)) if s.n else None
        est = PairEstimate(
            self.config.bound(math.exp(mean_a)), self.config.bound(math.exp(mean_b)), min(w_a, w_b), s.n, measured,
            (math.exp(mean_a - z * sd_a), math.exp(mean_a + z * sd_a)), (math.exp(mean_b - z * sd_b),
                                                                         math.exp(mean_b + z * sd_b)),
            "measured" if s.n else source, sd_a, sd_b)
        return self._ordered(est, swapped)

    @staticmethod
    def _ordered(est: PairEstimate, swapped: bool) -> PairEstimate:
        if not swapped:
            return est
        measured = (est.measured[1], est.measured[0]) if est.measured is not None else None
        return PairEstimate(est.ratio_b, est.ratio_a, est.weight, est.samples, measured, est.interval_b,
                            est.interval_a, est.source, est.sd_b, est.sd_a)

    def planned(self, gpu: str, a: str, b: str, explore: bool = True) -> tuple[float, float]:
        """What a policy plans with for the pair (:func:`scheduler.learning.explore.planning_ratios`;
        ``explore`` False in a calm round: no optimism)."""
        est = self.estimate(gpu, a, b)
        if not est.feasible:
            return 0.0, 0.0
        measured = (*est.measured, est.samples) if est.measured is not None else None
        return planning_ratios(est.ratio_a, est.ratio_b, est.sd_a, est.sd_b, measured, self.explore, explore)

    def planning_table(self, job_types: Mapping[str, Iterable[str]], explore: bool = True) -> ColocationTable:
        """The table a policy reads: every pair of ``job_types[gpu]`` on each GPU type, plus every pair measured
        (``explore``: whether the round is contended, :func:`scheduler.learning.explore.contended`)."""
        keys: set[Key] = set(self.samples) | set(self.infeasible)
        for gpu, types in job_types.items():
            names = sorted(set(types))
            keys.update((gpu, a, b) for i, a in enumerate(names) for b in names[i:])
        return ColocationTable.from_rows((gpu, a, b, *self.planned(gpu, a, b, explore)) for gpu, a, b in sorted(keys))

    def measured_rows(self) -> list[dict[str, Any]]:
        """One row per measured pair: shrunk ratios, measured means, samples and 90 %-style intervals."""
        rows = []
        for (gpu, a, b), s in sorted(self.samples.items()):
            if not s.n:
                continue
            est = self.estimate(gpu, a, b)
            rows.append({"gpu_type": gpu, "type_a": a, "type_b": b, "ratio_a": est.ratio_a, "ratio_b": est.ratio_b,
                         "measured_a": est.measured[0] if est.measured else math.nan,
                         "measured_b": est.measured[1] if est.measured else math.nan, "n": s.n,
                         "low_a": est.interval_a[0], "high_a": est.interval_a[1],
                         "low_b": est.interval_b[0], "high_b": est.interval_b[1]})
        return rows


__all__ = ["DEFAULT_PAIRS", "PairBelief", "PairConfig", "PairEstimate", "PriorAnswer", "PriorFn", "application",
           "chain_priors", "table_prior"]
