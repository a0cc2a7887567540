"""What the δ predictor knows about a pair, closest evidence first, and the fit that weighs it.

A *pair set* holds the measured pairs of several datasets at once — one dataset per GPU type and sharing mode
(Gavel's K80, P100 and V100; an H100 under MPS and time-sliced; the GPU types of a colocation table) — as
directed observations: the log ratio log r(a|b) of job type a sharing a GPU with b. For a pair nobody measured
in dataset d, the evidence, closest first:

1. ``pair``: the same two job types measured in another dataset — another GPU type or sharing mode;
2. ``models``: the same two *models* measured in d at another batch size or precision (``resnet50@128`` and
   ``resnet50@64:bf16`` are both ``resnet50``);
3. ``types``: both job types measured in d against other partners (their sensitivity and pressure, and the
   residual structure the completion finds);
4. a job type never measured in a pair in d: its model at another batch (``new type, model known``), else
   only its solo features (``new type``);
5. a job type whose *model* has no type measured in a pair in d (``new model``): the mixture of measured types
   alike alone (:mod:`scheduler.learning.predictor.new_model`).

**One model, conditioned on the evidence at hand.** :func:`scheduler.learning.predictor.ratio_model.fit_arrays` fits
levels 3–4 (solo features, job effects, completion) and, for each closer evidence k the query has, a term
``[k available]·(α_k + β_k·e_k)``: β_k is the learned *transfer factor* (how much of, say, the K80's log
ratio carries to the V100), α_k its offset. The model is fitted once per *pattern* of available evidence,
with exactly the terms that pattern has: a pair of a new job type (no close evidence) is predicted by a model
whose job effects were fitted without the close evidence, not by one that leaned on evidence it now lacks.
Where evidence is strong its β is large and the coarser terms only correct it; where it is weak (a
time-sliced ratio says little about MPS) β goes to 0 and the coarser levels carry the prediction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from scheduler.formats.colocation_table import MAX_RATIO
from scheduler.learning.predictor import new_model
from scheduler.learning.predictor.config import PredictorConfig
from scheduler.learning.predictor.ratio_model import MIN_RATIO, SELECT_MAX_ROWS, Fitted, fit_arrays

# closest first: the same pair elsewhere; the same models at another batch; both types measured with others;
# a type never measured in a pair here, but its model is (at another batch); a type known only alone;
# a type whose model no pair here has (a network never paired)
LEVELS = ("pair", "models", "types", "new type, model known", "new type", "new model")
INNER_TOL = 1e-3  # soft-impute tolerance of the nested selection's refits (log-ratio units)
UNKNOWN = "?"  # the job type every unseen type of a table maps to: no observations, so no job effects


def model_of(job_type: str) -> str:
    """``resnet50@64:bf16`` → ``resnet50``: the network, whatever its batch size and precision."""
    return job_type.partition("@")[0]


@dataclass(frozen=True)
class Dataset:
    """One dataset's input: ``pairs`` (type_a, type_b, ratio_a, ratio_b; feasible pairs only) and ``features``
    (standardized solo features, indexed by every job type of the dataset; no columns for a bare table)."""

    name: str
    pairs: pd.DataFrame
    features: pd.DataFrame


class PairSet:
    """Several datasets' pairs as directed observations over one list of job types."""

    def __init__(self, datasets: Sequence[Dataset]) -> None:
        self.names = tuple(d.name for d in datasets)
        types: dict[str, None] = {}
        for d in datasets:
            types.update(dict.fromkeys(d.features.index))
            types.update(dict.fromkeys(d.pairs["type_a"]))
            types.update(dict.fromkeys(d.pairs["type_b"]))
        self.types = tuple(types)
        self.index = {t: i for i, t in enumerate(self.types)}
        models = {m: i for i, m in enumerate(dict.fromkeys(model_of(t) for t in self.types))}
        self.model = np.array([models[model_of(t)] for t in self.types], dtype=int)
        self.model_names = tuple(models)
        self.n_models = len(models)
        self.local: list[np.ndarray] = []  # per dataset: global type index -> local row (-1: not in it)
        self.features: list[np.ndarray] = []
        parts = []
        self._pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        for k, d in enumerate(datasets):
            members = list(dict.fromkeys([*d.features.index, *d.pairs["type_a"], *d.pairs["type_b"]]))
            local = np.full(len(self.types), -1, dtype=int)
            local[[self.index[t] for t in members]] = np.arange(len(members))
            self.local.append(local)
            matrix = np.zeros((len(members), d.features.shape[1]))
            known = [t for t in members if t in d.features.index]
            if known and d.features.shape[1]:
                matrix[local[[self.index[t] for t in known]]] = d.features.loc[known].to_numpy(dtype=float)
            self.features.append(matrix)
            a = d.pairs["type_a"].map(self.index).to_numpy(dtype=int)
            b = d.pairs["type_b"].map(self.index).to_numpy(dtype=int)
            ra = np.log(np.clip(d.pairs["ratio_a"].to_numpy(dtype=float), MIN_RATIO, MAX_RATIO))
            rb = np.log(np.clip(d.pairs["ratio_b"].to_numpy(dtype=float), MIN_RATIO, MAX_RATIO))
            pair = np.arange(len(d.pairs))
            self._pairs.append((a, b, np.exp(ra), np.exp(rb)))
            parts.append((np.full(2 * len(pair), k), np.concatenate([a, b]), np.concatenate([b, a]),
                          np.concatenate([pair, pair]), np.concatenate([ra, rb])))
        self.dataset, self.victim, self.aggressor, self.pair, self.y = (np.concatenate(p) for p in zip(*parts))

    def __len__(self) -> int:
        return len(self.y)

    def pair_types(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Global type indices of each pair of dataset ``d`` (type_a, type_b)."""
        return self._pairs[d][0], self._pairs[d][1]

    def pair_ratios(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """The measured ratios of each pair of dataset ``d`` (bounded as fitted)."""
        return self._pairs[d][2], self._pairs[d][3]

    def unordered_key(self) -> np.ndarray:
        """Per observation: its two types as one number, whichever is the victim (the same pair anywhere)."""
        n = len(self.types)
        return np.minimum(self.victim, self.aggressor) * n + np.maximum(self.victim, self.aggressor)

    def of_type(self, job_type: str) -> np.ndarray:
        """Every observation, in any dataset, of a pair with ``job_type`` in it."""
        t = self.index[job_type]
        return np.nonzero((self.victim == t) | (self.aggressor == t))[0]

    def of_model(self, model: str) -> np.ndarray:
        """Every observation, in any dataset, of a pair with a job type of ``model`` in it (any batch size or
        precision)."""
        m = self.model_names.index(model)
        return np.nonzero((self.model[self.victim] == m) | (self.model[self.aggressor] == m))[0]


class Evidence:
    """The training observations (``mask``) as sums and counts per dataset and directed pair of types and of
    models, from which every cell's evidence is read (held-out observations are simply not in ``mask``)."""

    def __init__(self, pairs: PairSet, mask: np.ndarray) -> None:
        self.pairs = pairs
        n_d, n, m = len(pairs.names), len(pairs.types), pairs.n_models
        d, v, a, y = pairs.dataset[mask], pairs.victim[mask], pairs.aggressor[mask], pairs.y[mask]
        self.total, self.count = np.zeros((n_d, n, n)), np.zeros((n_d, n, n))
        np.add.at(self.total, (d, v, a), y)
        np.add.at(self.count, (d, v, a), 1.0)
        self.model_total, self.model_count = np.zeros((n_d, m, m)), np.zeros((n_d, m, m))
        mv, ma = pairs.model[v], pairs.model[a]
        np.add.at(self.model_total, (d, mv, ma), y)
        np.add.at(self.model_count, (d, mv, ma), 1.0)
        self.measured = (self.count.sum(axis=2) + self.count.sum(axis=1)) > 0  # (dataset, type): in some pair

    @property
    def keys(self) -> int:
        """Evidence columns: key 0 = the same models in the dataset; key 1 + d' = the same pair in dataset d'."""
        return 1 + len(self.pairs.names)

    def values(self, d: int, v: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values, available) of every evidence key for the cells (d, v, a): arrays of shape (cells, keys)."""
        out = np.zeros((len(v), self.keys))
        have = np.zeros((len(v), self.keys), dtype=bool)
        mv, ma = self.pairs.model[v], self.pairs.model[a]
        # the same models at another batch or precision: the model pair's sum without this exact pair
        count = self.model_count[d, mv, ma] - self.count[d, v, a]
        total = self.model_total[d, mv, ma] - self.total[d, v, a]
        mirror = (mv == ma) & (v != a)  # two types of one model: the pair's other member is in the same group
        count = count - np.where(mirror, self.count[d, a, v], 0.0)
        total = total - np.where(mirror, self.total[d, a, v], 0.0)
        have[:, 0] = count > 0.5
        out[:, 0] = np.divide(total, count, out=np.zeros_like(total), where=have[:, 0])
        for other in range(len(self.pairs.names)):
            if other == d:
                continue
            count = self.count[other, v, a]
            have[:, 1 + other] = count > 0
            out[:, 1 + other] = np.divide(self.total[other, v, a], count, out=np.zeros_like(count),
                                          where=count > 0)
        return out, have

    def levels(self, d: int, v: np.ndarray, a: np.ndarray, have: np.ndarray) -> np.ndarray:
        """The closest evidence level of each cell (an index into :data:`LEVELS`)."""
        known = self.measured[d, v] & self.measured[d, a]
        level = np.where(known, LEVELS.index("types"), LEVELS.index("new type"))
        level[have[:, 0]] = np.where(known, LEVELS.index("models"), LEVELS.index("new type, model known"))[have[:, 0]]
        level[self.new_model(d, v, a) & ~have.any(axis=1)] = LEVELS.index("new model")
        level[have[:, 1:].any(axis=1)] = LEVELS.index("pair")
        return level

    def new_model(self, d: int, v: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Cells with a member whose model has no type measured in a training pair of dataset ``d``."""
        model = self.pairs.model
        known = np.zeros(self.pairs.n_models, dtype=bool)
        known[model[self.measured[d]]] = True
        return ~known[model[v]] | ~known[model[a]]


def evidence_columns(values: np.ndarray, have: np.ndarray, pattern: tuple[int, ...]) -> np.ndarray:
    """The design's evidence columns for the keys of ``pattern``: [available, available·value] per key."""
    if not pattern:
        return np.zeros((len(values), 0))
    keys = list(pattern)
    return np.hstack([have[:, keys].astype(float), np.where(have[:, keys], values[:, keys], 0.0)])


def prior_factor(key: int) -> float:
    """The transfer factor an evidence key is shrunk toward: 1 for the same models at another batch (until the
    data says otherwise, the same networks interfere alike), 0 for another dataset (a time-sliced ratio says
    nothing of MPS until the pairs measured under both show it does)."""
    return 1.0 if key == 0 else 0.0


class Predictor:
    """The model of one dataset, fitted on the training observations of :class:`Evidence`, once per pattern of
    available evidence among the cells it is asked about (fits are kept: ask for many cells at once)."""

    def __init__(self, evidence: Evidence, d: int, mask: np.ndarray, config: PredictorConfig,
                 warm: dict[tuple[int, ...], np.ndarray] | None = None, *, solo_mixture: bool = True) -> None:
        pairs = evidence.pairs
        self.evidence, self.d, self.config, self.mask = evidence, d, config, mask
        self.solo_mixture = solo_mixture and config.use_solo_mixture
        self.choice: new_model.Choice | None = None
        rows = mask & (pairs.dataset == d)
        self.v, self.a, self.y = pairs.victim[rows], pairs.aggressor[rows], pairs.y[rows]
        self.local = pairs.local[d]
        # a type never in a training pair of d is predicted at its features clipped to the range of those that
        # were: a new job type's solo features must not carry the fitted squares and products beyond the data
        features = pairs.features[d]
        seen = np.zeros(features.shape[0], dtype=bool)
        seen[self.local[self.v]] = True
        seen[self.local[self.a]] = True
        if features.shape[1] and seen.any():
            features = np.clip(features, features[seen].min(axis=0), features[seen].max(axis=0))
        self.features = features
        self.row_values, self.row_have = evidence.values(d, self.v, self.a)
        self.fits: dict[tuple[tuple[int, ...], bool], Fitted] = {}
        self.warm = warm if warm is not None else {}

    def _groups(self, by_type: bool) -> list[np.ndarray]:
        """Rows held out together when a small dataset chooses its terms: each job type's (when the question is
        about a type never measured in a pair) or each pair's."""
        if len(self.y) > SELECT_MAX_ROWS:
            return []
        if by_type:
            return [np.nonzero((self.v == t) | (self.a == t))[0] for t in np.unique(self.v)]
        key = np.minimum(self.v, self.a) * len(self.local) + np.maximum(self.v, self.a)
        return [np.nonzero(key == k)[0] for k in np.unique(key)]

    def _fit(self, pattern: tuple[int, ...], new_types: bool = False) -> Fitted:
        new_types = new_types and len(self.y) <= SELECT_MAX_ROWS  # above it no terms are chosen: one fit serves both
        hit = self.fits.get((pattern, new_types))
        if hit is None:
            columns = evidence_columns(self.row_values, self.row_have, pattern)
            prior = np.array([prior_factor(k) for k in pattern]) if pattern else None
            hit = fit_arrays(self.local[self.v], self.local[self.a], self.y, self.features,
                             self.config, evidence=columns, warm_start=self.warm.get(pattern), evidence_prior=prior,
                             groups=self._groups(new_types))
            if hit.completion is not None:
                self.warm[pattern] = hit.completion
            self.fits[(pattern, new_types)] = hit
        return hit

    def predict(self, v: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ratios, evidence levels) of directed cells (global type indices, all members of the dataset)."""
        values, have = self.evidence.values(self.d, v, a)
        if not self.config.use_evidence:
            have = np.zeros_like(have)
        out = np.zeros(len(v))
        known = self.evidence.measured[self.d, v] & self.evidence.measured[self.d, a]
        patterns = [tuple(int(k) for k in np.nonzero(row)[0]) for row in have]
        for pattern in dict.fromkeys(patterns):
            cells = np.array([p == pattern for p in patterns])
            new_types = not bool(known[cells].all())
            fitted = self._fit(pattern, new_types)
            columns = evidence_columns(values[cells], have[cells], pattern)
            out[cells] = fitted.ratios(self.local[v[cells]], self.local[a[cells]], columns if pattern else None)
        new = self.evidence.new_model(self.d, v, a) & ~have.any(axis=1)  # no pair measured elsewhere either
        if self.solo_mixture and new.any():
            out[new] = self._solo_mixture(v[new], a[new])
        return out, self.evidence.levels(self.d, v, a, have)

    def _global_features(self) -> np.ndarray:
        """The dataset's standardized solo features (not clipped) indexed by global type."""
        pairs = self.evidence.pairs
        raw = pairs.features[self.d]
        out = np.zeros((len(pairs.types), raw.shape[1]))
        members = np.nonzero(self.local >= 0)[0]
        out[members] = raw[self.local[members]]
        return out

    def _matrix(self, seen: np.ndarray) -> np.ndarray:
        """Log ratios between the measured types ``seen``, as this model predicts them from their pairs."""
        fitted = self._fit(())
        rows, cols = np.repeat(seen, len(seen)), np.tile(seen, len(seen))
        return np.log(fitted.ratios(self.local[rows], self.local[cols])).reshape(len(seen), len(seen))

    def _refit(self, inner: np.ndarray, v: np.ndarray, a: np.ndarray, seen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # the outer fit's completion as the start: a convex problem, so only the iterations it takes change
        # looser convergence than the answer's: these fits only rank the candidates
        config = replace(self.config, completion_tol=max(self.config.completion_tol, INNER_TOL))
        model = Predictor(Evidence(self.evidence.pairs, inner), self.d, inner, config, self.warm, solo_mixture=False)
        return np.log(model.predict(v, a)[0]), model._matrix(seen)

    def _solo_mixture(self, v: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Ratios of cells with a model never paired here (:mod:`scheduler.learning.predictor.new_model`); the
        candidate is chosen once per fitted model by its nested leave-one-model-out error."""
        pairs, features = self.evidence.pairs, self._global_features()
        if self.choice is None:
            self.choice = new_model.choose(pairs.model, pairs.victim, pairs.aggressor, pairs.dataset, pairs.y,
                                           self.mask, self.d, features, self._refit)
        fitted = self._fit((), True)
        candidate = self.choice.candidate
        if isinstance(candidate, str):  # the ridge's own prediction
            return fitted.ratios(self.local[v], self.local[a])
        seen = np.nonzero(self.evidence.measured[self.d])[0]
        space, bandwidth = candidate
        logs = new_model.mixture(self._matrix(seen), seen, features, v, a, bandwidth, space)
        return np.clip(np.exp(logs), MIN_RATIO, fitted.max_ratio)


__all__ = ["LEVELS", "UNKNOWN", "Dataset", "Evidence", "PairSet", "Predictor", "evidence_columns", "model_of"]
