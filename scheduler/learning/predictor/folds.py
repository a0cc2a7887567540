"""The δ predictor's held-out predictions: the two protocols of its evaluation, and its intervals' calibration.

* ``pair`` — leave one pair out: each measured pair of a dataset is held out in turn and predicted from
  everything else, its own measurements on other GPU types and sharing modes included (the closest evidence
  there is, :mod:`scheduler.learning.predictor.evidence`); with ``everywhere`` the pair is held out of every dataset (a
  pair nobody in the cluster measured: the simulator's ``--belief predicted``).
* ``type`` — leave one job type (``model@batch``) out: every pair with the type, in every dataset, is held out;
  its solo measurements stay, and so do the pairs of its model at other batch sizes. What a cluster meets when
  a known network arrives at a new batch size.
* ``model`` — leave one model out: every pair with a type of the model (all its batch sizes and precisions), in
  every dataset, is held out; only the model's solo measurements stay. What a cluster meets when a network
  nobody has paired arrives.

The residuals of these held-out predictions calibrate the intervals (:mod:`scheduler.learning.predictor.conformal`):
the predictions of a filled table take their intervals from both protocols' residuals, each evidence level
from the protocol that produces it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from scheduler.learning.predictor.config import PredictorConfig
from scheduler.learning.predictor.conformal import Calibration
from scheduler.learning.predictor.evidence import LEVELS, Evidence, PairSet, Predictor
from scheduler.learning.predictor.new_model import describe

PROTOCOLS = ("pair", "type", "model")
PROTOCOL_TITLES = {"pair": "leave one pair out", "type": "leave one job type (model@batch) out",
                   "model": "leave one model out (all its batches)"}
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Fold:
    """Observations held out (indices into the pair set) and the pairs of the dataset then predicted."""

    name: str
    held: np.ndarray
    pairs: np.ndarray


def folds(pairs: PairSet, d: int, protocol: str, *, everywhere: bool = False, groups: int = 0) -> list[Fold]:
    """The folds of ``protocol`` for dataset ``d``; ``groups`` > 0 merges pairs into that many folds (K-fold
    instead of leave-one-out, for a prior fitted at start-up)."""
    mine = pairs.dataset == d
    if protocol in ("type", "model"):
        out = []
        for t in (pairs.types if protocol == "type" else pairs.model_names):
            held = pairs.of_type(t) if protocol == "type" else pairs.of_model(t)
            here = np.unique(pairs.pair[held[mine[held]]])
            # a dataset of one model has nothing left to learn from once it is held out: no fold
            if len(here) and mine.sum() > mine[held].sum():
                out.append(Fold(t, held, here))
        return out
    if protocol != "pair":
        raise ValueError(f"protocol {protocol!r}: one of {PROTOCOLS}")
    ids = np.unique(pairs.pair[mine])
    chunks = np.array_split(ids, groups) if 0 < groups < len(ids) else [ids[i:i + 1] for i in range(len(ids))]
    a_of, b_of = pairs.pair_types(d)
    key = pairs.unordered_key()
    out = []
    for chunk in chunks:
        if not len(chunk):
            continue
        held = np.nonzero(mine & np.isin(pairs.pair, chunk))[0]
        if everywhere:  # the same two types in every dataset
            held = np.nonzero(np.isin(key, key[held]))[0]
        name = "+".join(pairs.types[t] for t in (a_of[chunk[0]], b_of[chunk[0]])) + (" …" if len(chunk) > 1 else "")
        out.append(Fold(name, held, chunk))
    return out


@dataclass(frozen=True)
class HeldOut:
    """Held-out predictions of one dataset under one protocol: one entry per (fold, pair) predicted."""

    fold: np.ndarray  # fold number
    pair: np.ndarray  # pair index in the dataset
    ratio_a: np.ndarray  # predicted ratios of the pair's type_a / type_b
    ratio_b: np.ndarray
    level_a: np.ndarray  # evidence level of each prediction (index into LEVELS)
    level_b: np.ndarray


@dataclass(frozen=True)
class FoldFit:
    """One fold of an evaluation: what was held out, the training mask, the model fitted without it and its
    predictions for the fold's pairs (global type indices ``a``, ``b``)."""

    number: int
    fold: Fold
    mask: np.ndarray
    evidence: Evidence
    a: np.ndarray
    b: np.ndarray
    ratio_a: np.ndarray
    ratio_b: np.ndarray
    level_a: np.ndarray
    level_b: np.ndarray
    choice: str = ""  # the nested choice for a new model's cells (new_model.describe), "" when none met


def fold_fits(pairs: PairSet, d: int, protocol: str, config: PredictorConfig, *, everywhere: bool = False,
              groups: int = 0) -> Iterator[FoldFit]:
    """Fit without each fold and predict its pairs of dataset ``d`` (run it under one BLAS thread:
    :func:`held_out`)."""
    a_of, b_of = pairs.pair_types(d)
    warm: dict = {}  # the previous fold's completion per pattern: a convex problem's nearby start
    for number, fold in enumerate(folds(pairs, d, protocol, everywhere=everywhere, groups=groups)):
        mask = np.ones(len(pairs), dtype=bool)
        mask[fold.held] = False
        evidence = Evidence(pairs, mask)
        model = Predictor(evidence, d, mask, config, warm)
        a, b = a_of[fold.pairs], b_of[fold.pairs]
        ratios, levels = model.predict(np.concatenate([a, b]), np.concatenate([b, a]))
        n = len(a)
        yield FoldFit(number, fold, mask, evidence, a, b, ratios[:n], ratios[n:], levels[:n], levels[n:],
                      describe(model.choice))


def held_out(pairs: PairSet, d: int, protocol: str, config: PredictorConfig, *, everywhere: bool = False,
             groups: int = 0, progress: Progress | None = None) -> HeldOut:
    """Every fold's predictions, with one BLAS thread: the matrices are small, and on a busy machine
    OpenBLAS's thread hand-offs made each small SVD many times slower."""
    from threadpoolctl import threadpool_limits

    parts: list[tuple[np.ndarray, ...]] = []
    total = len(folds(pairs, d, protocol, everywhere=everywhere, groups=groups)) if progress else 0
    with threadpool_limits(limits=1, user_api="blas"):
        for fit in fold_fits(pairs, d, protocol, config, everywhere=everywhere, groups=groups):
            n = len(fit.a)
            parts.append((np.full(n, fit.number), fit.fold.pairs, fit.ratio_a, fit.ratio_b, fit.level_a, fit.level_b))
            if progress is not None:
                progress(fit.number + 1, total)
    if not parts:
        empty = np.zeros(0)
        return HeldOut(empty.astype(int), empty.astype(int), empty, empty, empty.astype(int), empty.astype(int))
    fold_ids, pair_ids, ra, rb, la, lb = (np.concatenate(p) for p in zip(*parts))
    return HeldOut(fold_ids, pair_ids, ra, rb, la, lb)


def ratio_calibration(pairs: PairSet, d: int, results: list[HeldOut], level: float) -> Calibration:
    """The residuals of held-out ratio predictions (both members of each pair) per evidence level."""
    truth_a, truth_b = pairs.pair_ratios(d)
    residuals, levels = [], []
    for r in results:
        residuals += [np.log(truth_a[r.pair]) - np.log(r.ratio_a), np.log(truth_b[r.pair]) - np.log(r.ratio_b)]
        levels += [r.level_a, r.level_b]
    return Calibration.from_arrays(np.concatenate(residuals) if residuals else np.zeros(0),
                                   np.concatenate(levels) if levels else np.zeros(0, dtype=int), level, len(LEVELS))


__all__ = ["PROTOCOLS", "PROTOCOL_TITLES", "Fold", "FoldFit", "HeldOut", "fold_fits", "folds", "held_out", "ratio_calibration"]
