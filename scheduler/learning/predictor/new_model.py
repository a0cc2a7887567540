"""A model nobody has paired: its pairs predicted from its solo run, by the measured types whose solo runs look alike.

When no type of a job's *model* was ever measured in a pair of a dataset (a network that just arrived), the
job effects and the completion have nothing to say about it, and the solo-feature terms of the ridge were
fitted beside job effects that absorbed most of what the features could explain. Here such a job is read as
a weighted mixture of the types that *were* measured: with w_j ∝ exp(−‖f(new) − f(j)‖² / 2h²) over the
standardized solo features f (log solo time, log batch size, log peak memory, utilization, GPM occupancy and
bandwidth, kernel occupancy and DRAM throughput — whichever the data has),

    log r(new | b) = Σ_j w_j L(j, b),    log r(b | new) = Σ_j w_j L(b, j),

L the fitted model's log ratios between measured types. A large bandwidth h weighs every measured type alike
(the partner's own sensitivity or pressure: what a job-type mean knows); a small one copies the nearest type.

The mixture averages ratios (``ratio``: the scale δ is linear in) or log ratios (``log``).

**Chosen by a nested split.** Which of the candidates — each (space, bandwidth) of :data:`CANDIDATES`, or the
ridge's own prediction (``ridge``) — answers is chosen per fitted model, on its training data only: each model
measured in the dataset is held out in turn (every pair with any of its types, in every dataset) and predicted
by a model fitted without it; the candidate with the lowest mean absolute error of the ratios wins. The evaluation's
held-out model is not in the training data, so it never takes part in the choice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

BANDWIDTHS = (0.5, 1.0, 2.0, np.inf)  # in standard deviations of the solo features; inf: every type alike
SPACES = ("ratio", "log")  # the mixture averages ratios (the scale δ is linear in) or log ratios
CANDIDATES: tuple[tuple[str, float], ...] = tuple((s, h) for s in SPACES for h in BANDWIDTHS)
RIDGE = "ridge"
MIN_MODELS = 2  # training models needed to hold one out and still learn from another

# (mask, victims, aggressors) → log ratios of the cells predicted by the ordinary model fitted on ``mask``, and
# that model's log-ratio matrix over the given types
Refit = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def weights(features: np.ndarray, target: np.ndarray, seen: np.ndarray, bandwidth: float) -> np.ndarray:
    """Rows: one per target type, over the ``seen`` types, summing to 1 (``features`` indexed like the types)."""
    if not np.isfinite(bandwidth) or features.shape[1] == 0:
        return np.full((len(target), len(seen)), 1.0 / len(seen))
    distance = ((features[target][:, None, :] - features[seen][None, :, :]) ** 2).sum(axis=2)
    logits = -distance / (2 * bandwidth**2)
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def mixture(matrix: np.ndarray, seen: np.ndarray, features: np.ndarray, v: np.ndarray, a: np.ndarray,
            bandwidth: float, space: str = "ratio") -> np.ndarray:
    """Log ratios of cells (v, a) over ``seen`` types' log-ratio ``matrix``: a seen member is itself, an
    unseen one the weighted mixture of the seen types, averaged as ratios (``ratio``) or as log ratios (``log``)."""
    types = np.unique(np.concatenate([v, a]))
    rows = np.zeros((len(types), len(seen)))  # per type asked about: its weights over the seen types
    position = {int(t): i for i, t in enumerate(seen)}
    known = np.array([int(t) in position for t in types], dtype=bool)
    rows[np.nonzero(known)[0], [position[int(t)] for t in types[known]]] = 1.0
    if (~known).any():
        rows[~known] = weights(features, types[~known], seen, bandwidth)
    at = {int(t): i for i, t in enumerate(types)}
    wv, wa = rows[[at[int(t)] for t in v]], rows[[at[int(t)] for t in a]]
    values = np.exp(matrix) if space == "ratio" else matrix
    out = np.einsum("ij,jk,ik->i", wv, values, wa)
    return np.log(out) if space == "ratio" else out


@dataclass(frozen=True)
class Choice:
    """The candidate chosen (a (space, bandwidth) of :data:`CANDIDATES`, or :data:`RIDGE`) and every candidate's
    nested held-out error (mean absolute error of the ratios)."""

    candidate: tuple[str, float] | str
    errors: dict[tuple[str, float] | str, float]


def describe(choice: Choice | None) -> str:
    """The choice in words for a report: ``ratio mixture, h = 1`` or ``ridge``; empty when none was needed."""
    if choice is None:
        return ""
    if isinstance(choice.candidate, str):
        return choice.candidate
    space, bandwidth = choice.candidate
    return f"{space} mixture, h = {'∞' if not np.isfinite(bandwidth) else f'{bandwidth:g}'}"


def choose(model_of_type: np.ndarray, obs_victim: np.ndarray, obs_aggressor: np.ndarray, obs_dataset: np.ndarray,
           y: np.ndarray, mask: np.ndarray, d: int, features: np.ndarray, refit: Refit) -> Choice:
    """The candidate with the lowest mean absolute log-ratio error when each training model of dataset ``d`` is
    held out (from ``mask``, in every dataset) and predicted by a model refitted without it."""
    here = mask & (obs_dataset == d)
    models = np.unique(np.concatenate([model_of_type[obs_victim[here]], model_of_type[obs_aggressor[here]]]))
    if len(models) < MIN_MODELS + 1:  # one held out must leave at least two to learn the mixture from
        return Choice(RIDGE, {})
    # without solo features every bandwidth weighs the measured types alike: one candidate per space
    candidates = CANDIDATES if features.shape[1] else tuple((s, np.inf) for s in SPACES)
    errors: dict[tuple[str, float] | str, list[np.ndarray]] = {RIDGE: []}
    errors.update({c: [] for c in candidates})
    for m in models:
        touches = (model_of_type[obs_victim] == m) | (model_of_type[obs_aggressor] == m)
        inner = mask & ~touches
        cells = here & touches
        v, a = obs_victim[cells], obs_aggressor[cells]
        trained = inner & (obs_dataset == d)
        seen = np.unique(np.concatenate([obs_victim[trained], obs_aggressor[trained]]))
        ridge, matrix = refit(inner, v, a, seen)
        truth = np.exp(y[cells])
        errors[RIDGE].append(np.abs(truth - np.exp(ridge)))
        for space, h in candidates:
            errors[(space, h)].append(np.abs(truth - np.exp(mixture(matrix, seen, features, v, a, h, space))))
    scores = {c: float(np.concatenate(e).mean()) for c, e in errors.items()}
    best = min(scores, key=lambda c: scores[c])
    return Choice(best, scores)


__all__ = ["BANDWIDTHS", "CANDIDATES", "RIDGE", "SPACES", "Choice", "choose", "describe", "mixture", "weights"]
