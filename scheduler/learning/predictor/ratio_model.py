"""The δ predictor's regression: log pair ratios on solo features, job effects, evidence, and a completion.

For a job a sharing a GPU with job b (a the "victim", b the "aggressor"), the log of a's ratio
r(a|b) = t_a / t′_a is

    log r(a|b) = w·[1, f(a), f(b), f(a)⊙f(b), f(a)², f(b)²] + s_a + p_b + c·[a = b]
                 + Σ_k [k available]·(α_k + β_k·e_k(a|b)) + Z[a, b]

* f(j): standardized features of job j measured **alone** — log solo iteration time, log batch size, log
  peak memory, NVML/GPM utilization and occupancy, the kernel profile's duration-weighted occupancy and DRAM
  throughput, whichever the data has (Gavel's file has only the first two; a bare colocation table none);
* s_a, p_b: per-job-type sensitivity and pressure (one-hot columns), c: same-type pairs;
* e_k: closer evidence about this very pair (:mod:`scheduler.learning.predictor.evidence`: the same two models at
  another batch size or precision, the same pair on another GPU type or sharing mode), each with its learned
  transfer factor β_k and offset α_k;
* all of the above fitted by ridge regression (``ridge_lambda``; the few evidence terms ``evidence_lambda``);
* Z: matrix completion of the remaining residuals over the job-type × job-type matrix (soft-impute,
  i.e. nuclear-norm-regularised least squares, ``nuclear_lambda``), in the spirit of Quasar / Gavel's
  collaborative filtering: jobs that interfere alike with the partners we measured interfere alike with
  the ones we did not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from scheduler.formats.colocation_table import MAX_RATIO
from scheduler.learning.predictor.config import PredictorConfig

MIN_RATIO = 0.01
LOG_FEATURES = ("solo_iter_time_s", "batch_size", "peak_memory_mib")  # sizes and times enter as logs


SOLO_BASELINE = PredictorConfig(use_job_effects=False, use_interactions=False, use_completion=False,
                                use_evidence=False)


# --------------------------------------------------------------------------------------------------------
# Features


def feature_matrix(solo: pd.DataFrame, columns: Sequence[str]) -> tuple[pd.DataFrame, list[str]]:
    """Standardized solo features per job type (rows = ``solo.index``); returns the frame and the names used.

    Sizes and times enter as logs. Columns with fewer than two distinct known values are dropped; missing
    values get the column mean (0 after standardizing).
    """
    data: dict[str, np.ndarray] = {}
    for column in columns:
        if column not in solo.columns:
            continue
        values = pd.to_numeric(solo[column], errors="coerce").to_numpy(dtype=float)
        if column in LOG_FEATURES:
            values = np.where(values > 0, np.log(np.where(values > 0, values, 1.0)), np.nan)
        known = values[np.isfinite(values)]
        if len(np.unique(known)) < 2:
            continue
        mean, std = known.mean(), known.std()
        data[column] = np.where(np.isfinite(values), (values - mean) / (std if std > 0 else 1.0), 0.0)
    frame = pd.DataFrame(data, index=solo.index)
    return frame, list(frame.columns)


def design(
    victims: np.ndarray, aggressors: np.ndarray, features: np.ndarray, n_types: int, *,
    interactions: bool, job_effects: bool, evidence: np.ndarray | None = None,
) -> np.ndarray:
    """Rows of the ridge design for directed observations (victim index, aggressor index); ``evidence``: the
    columns of :func:`scheduler.learning.predictor.evidence.evidence_columns`, appended last."""
    fv, fa = features[victims], features[aggressors]
    parts = [np.ones((len(victims), 1)), fv, fa]
    if interactions and features.shape[1]:
        parts += [fv * fa, fv**2, fa**2]
    if job_effects:
        eye = np.eye(n_types)
        parts += [eye[victims], eye[aggressors], (victims == aggressors)[:, None].astype(float)]
    if evidence is not None and evidence.shape[1]:
        parts.append(evidence)
    return np.hstack(parts)


def ridge(matrix: np.ndarray, target: np.ndarray, penalties: np.ndarray, center: np.ndarray | None = None) -> np.ndarray:
    """Ridge weights with one penalty per column (0 for the intercept: never shrunk), each weight shrunk toward
    ``center`` (default 0)."""
    rhs = matrix.T @ target + (penalties * center if center is not None else 0.0)
    return np.linalg.solve(matrix.T @ matrix + np.diag(penalties), rhs)


def soft_impute(
    rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n: int, lam: float, *, iters: int = 300, tol: float = 1e-6,
    init: np.ndarray | None = None,
) -> np.ndarray:
    """Nuclear-norm-regularised completion of an n×n matrix from entries (rows, cols) = values.

    Repeated entries are averaged. Iterates Z ← S_λ(P_Ω(M) + P_Ω⊥(Z)) with S_λ soft-thresholding the
    singular values (Mazumder, Hastie & Tibshirani 2010); convex, so the start (zeros, or ``init``: a nearby
    solution such as the previous fold's in leave-one-out) changes only how many iterations it takes.
    """
    total = np.zeros((n, n))
    count = np.zeros((n, n))
    np.add.at(total, (rows, cols), values)
    np.add.at(count, (rows, cols), 1.0)
    observed = count > 0
    target = np.divide(total, count, out=np.zeros_like(total), where=observed)
    estimate = np.zeros((n, n)) if init is None or init.shape != (n, n) else init.copy()
    for _ in range(iters):
        u, singular, vt = np.linalg.svd(np.where(observed, target, estimate))
        updated = (u * np.maximum(singular - lam, 0.0)) @ vt
        change = np.abs(updated - estimate).max()
        estimate = updated
        if change < tol:
            break
    return estimate


@dataclass
class Fitted:
    """A fitted model: ``predict_log(victims, aggressors, evidence)`` → log ratios (evidence columns as fitted)."""

    predict_log: Callable[..., np.ndarray]
    max_ratio: float
    completion: np.ndarray | None = None  # the residual completion Z (None when off)

    def ratios(self, victims: np.ndarray, aggressors: np.ndarray, evidence: np.ndarray | None = None) -> np.ndarray:
        return np.clip(np.exp(self.predict_log(victims, aggressors, evidence)), MIN_RATIO, self.max_ratio)


def _weights(matrix: np.ndarray, target: np.ndarray, config: PredictorConfig, n_evidence: int,
             evidence_prior: np.ndarray | None, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(penalties, centers, weights) of the ridge stage: feature and job terms shrunk toward 0 by
    ``scale × ridge_lambda``, each evidence term's transfer factor toward its prior (1: the same pair measured
    elsewhere is, until the data says otherwise, this pair) by ``evidence_lambda``."""
    penalties = np.full(matrix.shape[1], scale * float(config.ridge_lambda))
    penalties[0] = 0.0
    center = np.zeros(matrix.shape[1])
    if n_evidence:
        penalties[-n_evidence:] = float(config.evidence_lambda)
        if evidence_prior is not None:
            center[matrix.shape[1] - n_evidence // 2:] = evidence_prior
    return penalties, center, ridge(matrix, target, penalties, center)


def grouped_loo_error(matrix: np.ndarray, target: np.ndarray, penalties: np.ndarray, weights: np.ndarray,
                      groups: list[np.ndarray]) -> float:
    """Mean squared error of the ridge fit with each group of rows held out in turn, in closed form: the
    held-out residuals are (I − H_gg)⁻¹ (y_g − X_g w), H the ridge's hat matrix (any prior center cancels)."""
    inverse = np.linalg.inv(matrix.T @ matrix + np.diag(penalties))
    residual = target - matrix @ weights
    errors = []
    for rows in groups:
        x = matrix[rows]
        hat = x @ inverse @ x.T
        # lstsq: a group whose rows alone carry a term (a job type in one pair) leaves I − H_gg near-singular
        errors.append(np.linalg.lstsq(np.eye(len(rows)) - hat, residual[rows], rcond=None)[0])
    return float(np.mean(np.concatenate(errors) ** 2)) if errors else 0.0


SELECT_MAX_ROWS = 240  # datasets this small choose the model's terms by cross-validation (cheap at this size)
CANDIDATES = ((True, True, 1.0), (False, True, 1.0), (True, True, 10.0), (False, True, 10.0), (False, False, 1.0))


def fit_arrays(
    victims: np.ndarray, aggressors: np.ndarray, target: np.ndarray, features: np.ndarray, config: PredictorConfig,
    evidence: np.ndarray | None = None, warm_start: np.ndarray | None = None,
    evidence_prior: np.ndarray | None = None, groups: list[np.ndarray] | None = None,
) -> Fitted:
    """Fit on directed observations (indices into ``features``' rows); ``evidence``: one row per observation.

    ``groups`` (rows held out together: a pair's two, or a job type's): on a small dataset (≤
    :data:`SELECT_MAX_ROWS` rows) the terms — products and squares of features, job effects — and the ridge
    penalty are chosen among :data:`CANDIDATES` by the closed-form held-out error of the ridge stage: six job
    types cannot support the products of three features that 26 can.
    """
    n = features.shape[0]
    n_evidence = 0 if evidence is None else evidence.shape[1]
    choices = [(config.use_interactions, config.use_job_effects, 1.0)]
    if groups and len(target) <= SELECT_MAX_ROWS and config.use_job_effects:
        choices = [c for c in CANDIDATES if config.use_interactions or not c[0]]
    best: tuple[float, Any] | None = None
    for interactions, job_effects, scale in choices:
        options = {"interactions": interactions, "job_effects": job_effects}
        matrix = design(victims, aggressors, features, n, evidence=evidence, **options)
        penalties, _, weights = _weights(matrix, target, config, n_evidence, evidence_prior, scale)
        score = grouped_loo_error(matrix, target, penalties, weights, groups or []) if len(choices) > 1 else 0.0
        if best is None or score < best[0] - 1e-12:
            best = (score, (options, matrix, weights))
    assert best is not None
    options, matrix, weights = best[1]
    completion = np.zeros((n, n))
    if config.use_completion and len(target):
        residual = target - matrix @ weights
        completion = soft_impute(victims, aggressors, residual, n, config.nuclear_lambda,
                                 iters=config.completion_iters, tol=config.completion_tol, init=warm_start)

    def predict_log(v: np.ndarray, a: np.ndarray, e: np.ndarray | None = None) -> np.ndarray:
        if n_evidence and e is None:
            raise ValueError("this fit weighs evidence: pass its columns")
        return design(v, a, features, n, evidence=e if n_evidence else None, **options) @ weights + completion[v, a]

    max_ratio = float(np.clip(np.exp(target.max()) if len(target) else 1.0, 1.0, MAX_RATIO))
    return Fitted(predict_log, max_ratio, completion if config.use_completion else None)


__all__ = ["MIN_RATIO", "SOLO_BASELINE", "Fitted", "design", "feature_matrix", "fit_arrays",
           "ridge", "soft_impute"]
