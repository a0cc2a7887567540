"""The pair-ratio belief: what the scheduler believes two jobs do to each other on one GPU, and how sure it is.

One belief per (GPU type, job type a, job type b), kept in log space, where ratios multiply:

* a **prior** — a table the user gave (``--colocation``), the δ predictor's output
  (:mod:`scheduler.learning.prior`), or nothing (then plain time-slicing, ``0.5`` each, held weakly) —
  counts as :attr:`PairConfig.prior_weight` samples (:attr:`PairConfig.unknown_weight` for nothing);
* **observations** — ratios ``t/t'`` measured for both members (the live server: a co-located mean
  iteration time over a *measured* solo time of the same configuration, :mod:`scheduler.learning.online`;
  the simulator: the ratios the true table gave a pair that ran), each bounded to
  [:attr:`PairConfig.min_ratio`, :attr:`PairConfig.max_ratio`];
* the **estimate** is the sample-weighted mean of the two, so ratios are shrunk toward the prior by their
  sample counts, with a confidence interval ``exp(mean ± z·σ/√(w₀ + n))``
  (:func:`scheduler.learning.explore.standard_error`).

A pair measured at one batch size informs the same two applications at every other batch size: its
application-level belief is the prior of the exact one. What a policy plans with comes from
:func:`scheduler.learning.explore.planning_ratios` (optimism bounded by the interval; harmful pairs split),
built into a :class:`~scheduler.model.colocation.ColocationTable` by :meth:`PairBelief.planning_table`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.errors import InputError
from scheduler.learning.explore import DEFAULT_EXPLORE, ExploreConfig, planning_ratios, standard_error
from scheduler.model.colocation import ColocationTable

Key = tuple[str, str, str]  # (GPU type, job type a, job type b), a <= b
# (gpu, a, b) -> ratios in that order, optionally with whether the prior knows these two job types (False: a
# generic guess, e.g. the predictor's mean for types it never saw); None when it has no answer
PriorAnswer = tuple[float, float] | tuple[float, float, bool]
PriorFn = Callable[[str, str, str], "PriorAnswer | None"]


@dataclass(frozen=True)
class PairConfig:
    """Bounds and weights of the pair belief (the one source of their defaults)."""

    min_ratio: float = 0.01
    max_ratio: float = 1.1  # co-location never makes a job much faster than alone: more is noise
    prior_weight: float = 1.0  # pseudo-samples of a given or predicted prior (its error ~ one sample's σ)
    unknown_weight: float = 0.15  # "nothing known": (σ / 0.4)², true log ratios spread ~0.4 around it
    unknown_ratio: float = 0.5  # each member at half its solo speed: plain time-slicing

    def __post_init__(self) -> None:
        if not 0 < self.min_ratio < self.unknown_ratio < self.max_ratio <= 1.5:
            raise InputError(f"ratios {self.min_ratio}/{self.unknown_ratio}/{self.max_ratio}", source="pairs",
                             field="min_ratio", valid="0 < min_ratio < unknown_ratio < max_ratio <= 1.5")
        if not (self.prior_weight > 0 and self.unknown_weight > 0):
            raise InputError("prior weights must be > 0", source="pairs", field="prior_weight", valid="a number > 0")

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
    specific: bool = True  # a prior that knows both job types (False: a generic guess for types it never saw)

    @property
    def feasible(self) -> bool:
        return self.ratio_a > 0 and self.ratio_b > 0


def application(job_type: str) -> str:
    """``model@batch`` -> ``model``; an application name stays as it is."""
    return job_type.rpartition("@")[0] or job_type


def table_prior(table: ColocationTable | None) -> PriorFn | None:
    """A prior that looks pairs up in a table: exact types first, then application names."""
    if table is None:
        return None

    def lookup(gpu: str, a: str, b: str) -> tuple[float, float] | None:
        for ka in dict.fromkeys((a, application(a))):
            for kb in dict.fromkeys((b, application(b))):
                hit = table.ratios.get((gpu, ka, kb))
                if hit is not None:
                    return hit
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
    def _prior(self, gpu: str, a: str, b: str) -> tuple[float, float, float, str, bool]:
        """(ratio a, ratio b, weight, source, specific) before this pair's own samples."""
        exact = application(a) != a or application(b) != b
        if exact:  # the same two applications at any batch: their learned belief is this pair's prior
            coarse = self.samples.get(_key(gpu, application(a), application(b))[0])
            if coarse is not None and coarse.n:
                est = self.estimate(gpu, application(a), application(b))
                return est.ratio_a, est.ratio_b, self.config.prior_weight, "prior", True
        hit = self.prior(gpu, a, b) if self.prior is not None else None
        if hit is not None:
            ra, rb = hit[0], hit[1]
            specific = bool(hit[2]) if len(hit) > 2 else True
            if ra <= 0 or rb <= 0:
                return 0.0, 0.0, self.config.prior_weight, "infeasible", True
            return self.config.bound(ra), self.config.bound(rb), self.config.prior_weight, "prior", specific
        u = self.config.unknown_ratio
        return u, u, self.config.unknown_weight, "unknown", False

    def estimate(self, gpu: str, a: str, b: str) -> PairEstimate:
        """The shrunk belief about ``a`` sharing a GPU of type ``gpu`` with ``b`` (ratios in that order)."""
        key, swapped = _key(gpu, a, b)
        first, second = key[1], key[2]
        if key in self.infeasible or _key(gpu, application(a), application(b))[0] in self.infeasible:
            return self._ordered(PairEstimate(0.0, 0.0, 0.0, 0, None, (0.0, 0.0), (0.0, 0.0), "infeasible"), swapped)
        pa, pb, w0, source, specific = self._prior(gpu, first, second)
        if source == "infeasible":
            return self._ordered(PairEstimate(0.0, 0.0, w0, 0, None, (0.0, 0.0), (0.0, 0.0), source), swapped)
        s = self.samples.get(key, _Samples())
        weight = w0 + s.n
        mean_a = (w0 * math.log(pa) + s.log_a) / weight
        mean_b = (w0 * math.log(pb) + s.log_b) / weight
        se = standard_error(weight, self.explore)
        z = self.explore.z
        measured = (math.exp(s.log_a / s.n), math.exp(s.log_b / s.n)) if s.n else None
        est = PairEstimate(
            self.config.bound(math.exp(mean_a)), self.config.bound(math.exp(mean_b)), weight, s.n, measured,
            (math.exp(mean_a - z * se), math.exp(mean_a + z * se)), (math.exp(mean_b - z * se), math.exp(mean_b + z * se)),
            "measured" if s.n else source, specific)
        return self._ordered(est, swapped)

    @staticmethod
    def _ordered(est: PairEstimate, swapped: bool) -> PairEstimate:
        if not swapped:
            return est
        measured = (est.measured[1], est.measured[0]) if est.measured is not None else None
        return PairEstimate(est.ratio_b, est.ratio_a, est.weight, est.samples, measured, est.interval_b,
                            est.interval_a, est.source, est.specific)

    def planned(self, gpu: str, a: str, b: str, explore: bool = True) -> tuple[float, float]:
        """What a policy plans with for the pair (:func:`scheduler.learning.explore.planning_ratios`;
        ``explore`` False in a calm round: no optimism)."""
        est = self.estimate(gpu, a, b)
        if not est.feasible:
            return 0.0, 0.0
        measured = (*est.measured, est.samples) if est.measured is not None else None
        known = est.source == "prior" and est.specific  # a measured pair is known through ``measured``
        return planning_ratios(est.ratio_a, est.ratio_b, est.weight, measured, self.explore, explore, known=known)

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


__all__ = ["DEFAULT_PAIRS", "PairBelief", "PairConfig", "PairEstimate", "PriorAnswer", "application", "chain_priors",
           "table_prior"]
