"""Truth and belief apart in the simulator: what a packing policy believes about pairs, learned as it runs.

The simulator's colocation table is the *truth*: it decides how fast a pair really runs. With
``--belief truth`` (the default, every earlier result) the policy plans with the truth as well. Any other
belief gives the policy a :class:`SimBelief` instead, which starts from a prior and learns, with the same
code as ``colocate serve`` (:class:`scheduler.learning.pairs.PairBelief`, the exploration rule of
:mod:`scheduler.learning.explore`), from the pairs the policy runs:

* ``none`` — nothing known: every pair starts at time-slicing, held weakly, and is explored;
* ``predicted`` — the δ predictor's output for each pair, fitted on the table's *other* pairs
  (leave-the-pair-out, :func:`scheduler.learning.predictor.prior.leave_pair_out_table`);
* ``table:FILE`` — a colocation table the user has (pairs it lacks are unknown);
* ``noisy:σ`` — the truth × lognormal noise of σ per ratio (a misleading prior; seeded), with the interval that
  noise implies.

Each prior comes with its interval where it has one (``predicted``: the held-out residuals of the table's
other pairs, :func:`scheduler.learning.predictor.prior.leave_pair_out_table`), and the exploration rule plans each
pair at the upper end of its belief's interval (:mod:`scheduler.learning.explore`).

A pair that ran together for part of a round yields one sample: the ratios the truth gave it, exactly. The
belief is told so: its per-sample noise is :data:`SAMPLE_NOISE` (an H100's repeats of one pair agree within
1–2 %), not ``serve``'s :attr:`~scheduler.learning.explore.ExploreConfig.sigma`, so a measured pair is planned at
what it measured and not re-tried on an interval its samples do not have. Which pairs cannot run
at all is memory, not interference: a pair the truth marks infeasible is infeasible in every belief, as
the memory model makes it. Every observation is logged (:meth:`SimBelief.frame`: round, pair, truth,
belief, planned ratios, samples), so a run shows belief against truth over time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from common.errors import InputError
from scheduler.learning.explore import DEFAULT_EXPLORE, ExploreConfig, contended
from scheduler.learning.pairs import PairBelief, PriorAnswer, table_prior
from scheduler.model.colocation import ColocationTable

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from scheduler.model.jobs import Job

BELIEFS = ("truth", "none", "predicted", "table:FILE", "noisy:SIGMA")
SAMPLE_NOISE = 0.01  # log-ratio noise of one simulated sample: the truth's own ratio, as exact as an H100 repeat
BELIEF_COLUMNS = ("round", "time_s", "gpu_type", "type_a", "type_b", "truth_a", "truth_b", "belief_a", "belief_b",
                  "planned_a", "planned_b", "samples")


@dataclass(frozen=True)
class BeliefSpec:
    """A parsed ``--belief`` value."""

    kind: str  # truth, none, predicted, table, noisy
    path: str | None = None
    sigma: float = 0.0

    @property
    def learns(self) -> bool:
        return self.kind != "truth"

    @classmethod
    def parse(cls, text: str) -> BeliefSpec:
        """The one parser of a ``--belief`` text (:func:`parse_belief`)."""
        return parse_belief(text)

    def __str__(self) -> str:
        """The text that parses back to this value (a run's printed config)."""
        if self.kind == "table":
            return f"table:{self.path}"
        if self.kind == "noisy":
            return f"noisy:{self.sigma!r}"
        return self.kind


def parse_belief(text: str) -> BeliefSpec:
    """``truth | none | predicted | table:FILE | noisy:SIGMA`` → :class:`BeliefSpec`; bad input → InputError."""
    kind, _, arg = str(text).partition(":")
    if kind in ("truth", "none", "predicted") and not arg:
        return BeliefSpec(kind)
    if kind == "table" and arg:
        return BeliefSpec(kind, path=arg)
    if kind == "noisy":
        try:
            sigma = float(arg)
        except ValueError:
            sigma = -1.0
        if sigma >= 0 and math.isfinite(sigma):
            return BeliefSpec(kind, sigma=sigma)
    raise InputError(f"{text!r}", source="simulate", field="belief", valid=" | ".join(BELIEFS) + " (SIGMA >= 0)")


def noisy_table(truth: ColocationTable, sigma: float, seed: int, level: float = 0.8) -> ColocationTable:
    """The truth with each ratio × exp(N(0, σ²)), bounded to the table's range, each with the interval of
    coverage ``level`` that this noise implies; infeasible stays infeasible."""
    from scheduler.formats.colocation_table import MAX_RATIO
    from scheduler.learning.explore import z_of

    rng = np.random.default_rng(seed)
    rows, intervals = [], []
    width = float(np.exp(z_of(level) * sigma))
    for (gpu, a, b), (ra, rb) in sorted(truth.ratios.items()):
        if a > b:
            continue
        if ra <= 0 or rb <= 0:
            rows.append((gpu, a, b, 0.0, 0.0))
            continue
        na, nb = np.exp(rng.normal(0.0, sigma, 2))
        ra, rb = min(ra * na, MAX_RATIO), min(rb * nb, MAX_RATIO)
        rows.append((gpu, a, b, ra, rb))
        intervals.append((gpu, a, b, (ra / width, ra * width), (rb / width, rb * width)))
    return ColocationTable.with_intervals(ColocationTable.from_rows(rows).ratios, intervals, level)


def read_belief_table(spec: BeliefSpec) -> ColocationTable:
    """The colocation CSV of ``table:FILE``; a missing or bad file → InputError naming it."""
    if not Path(str(spec.path)).is_file():
        raise InputError("belief table not found", source=str(spec.path), field="belief",
                         valid="table:FILE with FILE a colocation CSV")
    from scheduler.formats.colocation_table import load_colocation_table

    return load_colocation_table(str(spec.path))


def prior_table(spec: BeliefSpec, truth: ColocationTable, seed: int = 0) -> ColocationTable | None:
    """The table a belief starts from (None for ``none``)."""
    if spec.kind == "none":
        return None
    if spec.kind == "predicted":
        from scheduler.learning.predictor.prior import leave_pair_out_table

        return leave_pair_out_table(truth)
    if spec.kind == "table":
        return read_belief_table(spec)
    if spec.kind == "noisy":
        return noisy_table(truth, spec.sigma, seed)
    raise InputError(f"{spec.kind!r} has no prior table", source="simulate", field="belief", valid=", ".join(BELIEFS))


class SimBelief:
    """The policy's view of the pairs in one simulation: a prior, learned online from the pairs that run."""

    def __init__(self, spec: BeliefSpec, truth: ColocationTable, wrap: Callable[[ColocationTable], ColocationTable],
                 seed: int = 0, explore: ExploreConfig = DEFAULT_EXPLORE) -> None:
        self.spec, self.truth, self.wrap = spec, truth, wrap
        self.prior = prior_table(spec, truth, seed)
        given = table_prior(self.prior)

        def prior(gpu: str, a: str, b: str) -> PriorAnswer | None:
            known = truth.ratios.get((gpu, a, b))
            if known is not None and (known[0] <= 0 or known[1] <= 0):
                return PriorAnswer(0.0, 0.0)  # memory: known without trying
            return given(gpu, a, b) if given is not None else None

        self.belief = PairBelief(prior, explore=replace(explore, sigma=SAMPLE_NOISE))
        self.keys = sorted(k for k in truth.ratios if k[1] <= k[2])  # the pairs that exist (the truth knows them)
        self.rows: list[dict[str, Any]] = []
        self._views: dict[bool, tuple[int, ColocationTable]] = {}

    def view(self, jobs: Sequence[Job] = (), gpus: int = 0) -> ColocationTable:
        """The table the policy reads this round, for its active ``jobs`` on ``gpus`` GPUs: optimistic only
        when the round is contended (:func:`scheduler.learning.explore.contended`; no jobs given: contended).
        Rebuilt only when something was learned."""
        explore = not jobs or contended((j.num_gpus for j in jobs), gpus, self.belief.explore)
        hit = self._views.get(explore)
        if hit is None or hit[0] != self.belief.version:
            planned = ColocationTable.from_rows((gpu, a, b, *self.belief.planned(gpu, a, b, explore))
                                                for gpu, a, b in self.keys)
            hit = self._views[explore] = (self.belief.version, self.wrap(planned))
        return hit[1]

    def _truth_key(self, gpu: str, job_a: Job, job_b: Job) -> tuple[str, str] | None:
        """The table keys the truth answers the pair under (its own lookup order)."""
        keys_a = (job_a.job_type, job_a.application) if job_a.batch_size else (job_a.application,)
        keys_b = (job_b.job_type, job_b.application) if job_b.batch_size else (job_b.application,)
        for ka in keys_a:
            for kb in keys_b:
                if (gpu, ka, kb) in self.truth.ratios:
                    return ka, kb
        return None

    def observe(self, round_index: int, time_s: float, gpu: str, jobs: Sequence[Job]) -> None:
        """A pair ran together this round: one sample of its true ratios."""
        if len(jobs) != 2:
            return  # groups of three: their ratios are predicted from the pairs, not measured
        key = self._truth_key(gpu, jobs[0], jobs[1])
        if key is None:
            return
        truth = self.truth.ratios[(gpu, key[0], key[1])]
        self.belief.observe(gpu, key[0], key[1], *truth)
        est = self.belief.estimate(gpu, *key)
        planned = self.belief.planned(gpu, *key)
        self.rows.append({"round": round_index, "time_s": time_s, "gpu_type": gpu, "type_a": key[0],
                          "type_b": key[1], "truth_a": truth[0], "truth_b": truth[1], "belief_a": est.ratio_a,
                          "belief_b": est.ratio_b, "planned_a": planned[0], "planned_b": planned[1],
                          "samples": est.samples})

    def prior_error(self) -> float:
        """Mean |prior belief − truth| of the ratio sums over the feasible pairs (before any sample)."""
        fresh = PairBelief(self.belief.prior, explore=self.belief.explore)
        errors = []
        for gpu, a, b in self.keys:
            ta, tb = self.truth.ratios[(gpu, a, b)]
            if ta > 0 and tb > 0:
                est = fresh.estimate(gpu, a, b)
                errors.append(abs(est.ratio_a + est.ratio_b - ta - tb))
        return float(np.mean(errors)) if errors else 0.0

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.rows, columns=list(BELIEF_COLUMNS))


def sim_belief(spec: BeliefSpec, truth: ColocationTable | None, wrap: Callable[[ColocationTable], ColocationTable],
               seed: int = 0, explore: ExploreConfig = DEFAULT_EXPLORE) -> SimBelief | None:
    """The simulator's belief for ``--belief`` (None: the policy reads the truth)."""
    if not spec.learns or truth is None:
        return None
    return SimBelief(spec, truth, wrap, seed, explore)


__all__ = ["BELIEFS", "BELIEF_COLUMNS", "BeliefSpec", "SimBelief", "noisy_table", "parse_belief", "prior_table",
           "read_belief_table", "sim_belief"]
