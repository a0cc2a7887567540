"""Predict co-location ratios (and so δ) for pairs nobody measured.

Model — for a job a sharing a GPU with job b (a is the "victim", b the "aggressor"), the log of a's ratio
r(a|b) = t_a / t′_a is

    log r(a|b) = w·[1, f(a), f(b), f(a)⊙f(b), f(a)², f(b)²] + s_a + p_b + c·[a = b] + Z[a, b]

* f(j): standardized features of job j measured **alone** — log solo iteration time, log batch size, log
  peak memory, NVML/GPM utilization and the kernel profile's duration-weighted occupancy / DRAM throughput,
  whichever the data has (Gavel's file has only the first two);
* s_a, p_b: per-job-type sensitivity and pressure (one-hot columns), c: same-type pairs;
  all of the above fitted by ridge regression (``ridge_lambda``);
* Z: matrix completion of the remaining residuals over the job-type × job-type matrix (soft-impute,
  i.e. nuclear-norm-regularised least squares, ``nuclear_lambda``), in the spirit of Quasar / Gavel's
  collaborative filtering: jobs that interfere alike with the partners we measured interfere alike with
  the ones we did not.

The co-located iteration times follow as t′ = t / r, and δ = (t_a + t_b) / max(t′_a, t′_b) with the solo
t measured. Predictions are clipped to [0.01, max ratio seen in training].

Evaluation (:mod:`colocate.predict_eval`): leave one measured pair out, fit on the rest, predict it; MAE of
δ and of each ratio and the decision δ > 1 (balanced accuracy, precision, recall), side by side with the
mean, per-job-type mean, same-models mean and solo-utilization baselines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from colocate.results import (
    UTILIZATION_COLUMNS,
    ResultsSet,
    group_table,
    solo_table,
    sort_job_types,
)
from common.errors import InputError
from profiler.results.schema import STATUS_INFEASIBLE, STATUS_OK
from scheduler.formats.colocation_table import MAX_RATIO  # predictions stay within the table's bound

MIN_RATIO = 0.01
SOLO_FEATURES = ("solo_iter_time_s", "batch_size", "peak_memory_mib", *UTILIZATION_COLUMNS,
                 "kernel_occupancy_pct", "kernel_dram_throughput_pct", "kernel_sm_throughput_pct")
_LOG_FEATURES = ("solo_iter_time_s", "batch_size", "peak_memory_mib")
# Features the "solo utilization" baseline prefers; when a dataset has none it falls back to all solo features.
UTILIZATION_FEATURES = (*UTILIZATION_COLUMNS, "kernel_occupancy_pct", "kernel_dram_throughput_pct",
                        "kernel_sm_throughput_pct")


@dataclass(frozen=True)
class PredictorConfig:
    """Knobs of the predictor; the defaults were chosen on Gavel's V100 data (see the evaluation report)."""

    ridge_lambda: float = 1.0
    nuclear_lambda: float = 0.3  # soft-impute shrinkage, in log-ratio units
    use_job_effects: bool = True
    use_interactions: bool = True
    use_completion: bool = True
    completion_iters: int = 300
    completion_tol: float = 1e-5


@dataclass(frozen=True)
class PairDataset:
    """Everything measured for one GPU type and sharing mode."""

    gpu_type: str
    sharing: str
    solo: pd.DataFrame  # indexed by job type: solo features, solo_iter_time_s
    pairs: pd.DataFrame  # ok pairs: type_a, type_b, ratio_a, ratio_b, delta
    infeasible: pd.DataFrame  # measured infeasible pairs
    source: str

    @property
    def name(self) -> str:
        sources = ", ".join(Path(part).name for part in self.source.split(";"))
        return f"{self.gpu_type}/{self.sharing} ({sources})"

    @property
    def job_types(self) -> list[str]:
        return list(self.solo.index)


def make_datasets(results: ResultsSet, *, sharing: str | None = None, source: str = "") -> list[PairDataset]:
    """Split results into one dataset per (GPU type, sharing mode) with solo baselines for every member."""
    solo = solo_table(results)
    pairs = group_table(results, 2)
    datasets: list[PairDataset] = []
    if pairs.empty:
        return datasets
    for (gpu_type, mode), group in pairs.groupby(["gpu_type", "sharing"], sort=True):
        if sharing is not None and mode != sharing:
            continue
        gpu_solo = solo[solo["gpu_type"] == gpu_type].drop_duplicates("job_type").set_index("job_type")
        ok = group[group["status"] == STATUS_OK].reset_index(drop=True)
        infeasible = group[group["status"] == STATUS_INFEASIBLE].reset_index(drop=True)
        origin = source or ";".join(sorted({part for dirs in group["results_dir"] for part in str(dirs).split(";")}))
        datasets.append(PairDataset(str(gpu_type), str(mode), gpu_solo, ok, infeasible, origin))
    return datasets


# --------------------------------------------------------------------------------------------------------
# Features


def feature_matrix(solo: pd.DataFrame, columns: Sequence[str] = SOLO_FEATURES) -> tuple[pd.DataFrame, list[str]]:
    """Standardized solo features per job type (rows = ``solo.index``); returns the frame and the names used.

    Sizes and times enter as logs. Columns with fewer than two distinct known values are dropped; missing
    values get the column mean (0 after standardizing).
    """
    data: dict[str, np.ndarray] = {}
    for column in columns:
        if column not in solo.columns:
            continue
        values = pd.to_numeric(solo[column], errors="coerce").to_numpy(dtype=float)
        if column in _LOG_FEATURES:
            values = np.where(values > 0, np.log(np.where(values > 0, values, 1.0)), np.nan)
        known = values[np.isfinite(values)]
        if len(np.unique(known)) < 2:
            continue
        mean, std = known.mean(), known.std()
        data[column] = np.where(np.isfinite(values), (values - mean) / (std if std > 0 else 1.0), 0.0)
    frame = pd.DataFrame(data, index=solo.index)
    return frame, list(frame.columns)


def _design(
    victims: np.ndarray, aggressors: np.ndarray, features: np.ndarray, n_types: int, *,
    interactions: bool, job_effects: bool,
) -> np.ndarray:
    """Rows of the ridge design for directed observations (victim index, aggressor index)."""
    fv, fa = features[victims], features[aggressors]
    parts = [np.ones((len(victims), 1)), fv, fa]
    if interactions and features.shape[1]:
        parts += [fv * fa, fv**2, fa**2]
    if job_effects:
        parts += [np.eye(n_types)[victims], np.eye(n_types)[aggressors], (victims == aggressors)[:, None].astype(float)]
    return np.hstack(parts)


def _ridge(design: np.ndarray, target: np.ndarray, lam: float, gram: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Ridge weights; ``gram`` = precomputed (XᵀX, Xᵀy) for these rows (leave-one-out downdates it)."""
    xtx, xty = gram if gram is not None else (design.T @ design, design.T @ target)
    penalty = lam * np.eye(design.shape[1])
    penalty[0, 0] = 0.0  # never shrink the intercept
    return np.linalg.solve(xtx + penalty, xty)


def soft_impute(
    rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n: int, lam: float, *, iters: int = 300, tol: float = 1e-6,
    init: np.ndarray | None = None,
) -> np.ndarray:
    """Nuclear-norm-regularised completion of an n×n matrix from entries (rows, cols) = values.

    Repeated entries are averaged. Iterates Z ← S_λ(P_Ω(M) + P_Ω⊥(Z)) with S_λ soft-thresholding the
    singular values (Mazumder, Hastie & Tibshirani 2010); convex, so the start (zeros, or ``init``: a nearby
    solution such as the full-data one in leave-one-out) changes only how many iterations it takes.
    """
    total = np.zeros((n, n))
    count = np.zeros((n, n))
    np.add.at(total, (rows, cols), values)
    np.add.at(count, (rows, cols), 1.0)
    observed = count > 0
    target = np.divide(total, count, out=np.zeros_like(total), where=observed)
    estimate = np.zeros((n, n)) if init is None else init.copy()
    for _ in range(iters):
        u, singular, vt = np.linalg.svd(np.where(observed, target, estimate))
        updated = (u * np.maximum(singular - lam, 0.0)) @ vt
        change = np.abs(updated - estimate).max()
        estimate = updated
        if change < tol:
            break
    return estimate


# --------------------------------------------------------------------------------------------------------
# Models: each fits on training pairs and predicts directed ratios for (victim, aggressor) index arrays.


@dataclass
class _Fitted:
    predict_log: Callable[[np.ndarray, np.ndarray], np.ndarray]
    max_ratio: float
    completion: np.ndarray | None = None  # the residual completion Z (None when off)


def _observations(pairs: pd.DataFrame, index: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = pairs["type_a"].map(index).to_numpy(dtype=int)
    b = pairs["type_b"].map(index).to_numpy(dtype=int)
    victims = np.concatenate([a, b])
    aggressors = np.concatenate([b, a])
    ratios = np.concatenate([pairs["ratio_a"].to_numpy(dtype=float), pairs["ratio_b"].to_numpy(dtype=float)])
    return victims, aggressors, np.log(np.clip(ratios, MIN_RATIO, MAX_RATIO))


def fit_ratio_model(
    pairs: pd.DataFrame, features: pd.DataFrame, config: PredictorConfig = PredictorConfig(), *,
    feature_columns: Sequence[str] | None = None,
) -> _Fitted:
    """Fit the predictor (or, with job effects/interactions/completion off, the solo-feature baseline)."""
    index = {job_type: i for i, job_type in enumerate(features.index)}
    columns = list(feature_columns) if feature_columns is not None else list(features.columns)
    matrix = features[columns].to_numpy(dtype=float) if columns else np.zeros((len(index), 0))
    victims, aggressors, target = _observations(pairs, index)
    return _fit_arrays(victims, aggressors, target, matrix, config)


def _fit_arrays(
    victims: np.ndarray, aggressors: np.ndarray, target: np.ndarray, matrix: np.ndarray, config: PredictorConfig,
    design: np.ndarray | None = None, gram: tuple[np.ndarray, np.ndarray] | None = None,
    warm_start: np.ndarray | None = None,
) -> _Fitted:
    """The fit on plain arrays (``design``/``gram`` = precomputed rows and XᵀX, Xᵀy, to save recomputing)."""
    n = matrix.shape[0]
    options = {"interactions": config.use_interactions, "job_effects": config.use_job_effects}
    if design is None:
        design = _design(victims, aggressors, matrix, n, **options)
    weights = _ridge(design, target, config.ridge_lambda, gram)
    completion = np.zeros((n, n))
    if config.use_completion and len(target):
        residual = target - design @ weights
        completion = soft_impute(victims, aggressors, residual, n, config.nuclear_lambda,
                                 iters=config.completion_iters, tol=config.completion_tol, init=warm_start)

    def predict_log(v: np.ndarray, a: np.ndarray) -> np.ndarray:
        return _design(v, a, matrix, n, **options) @ weights + completion[v, a]

    max_ratio = float(np.clip(np.exp(target.max()) if len(target) else 1.0, 1.0, MAX_RATIO))
    return _Fitted(predict_log, max_ratio, completion if config.use_completion else None)


def _baseline_features(features: pd.DataFrame) -> list[str]:
    preferred = [c for c in features.columns if c in UTILIZATION_FEATURES]
    return preferred or list(features.columns)


SOLO_BASELINE = PredictorConfig(use_job_effects=False, use_interactions=False, use_completion=False)


def _predict_pairs(fitted: _Fitted, types_a: Sequence[str], types_b: Sequence[str], solo: pd.DataFrame,
                   index: dict[str, int]) -> pd.DataFrame:
    a = np.array([index[t] for t in types_a], dtype=int)
    b = np.array([index[t] for t in types_b], dtype=int)
    ratio_a = np.clip(np.exp(fitted.predict_log(a, b)), MIN_RATIO, fitted.max_ratio)
    ratio_b = np.clip(np.exp(fitted.predict_log(b, a)), MIN_RATIO, fitted.max_ratio)
    t_a = solo.loc[list(types_a), "solo_iter_time_s"].to_numpy(dtype=float)
    t_b = solo.loc[list(types_b), "solo_iter_time_s"].to_numpy(dtype=float)
    delta = (t_a + t_b) / np.maximum(t_a / ratio_a, t_b / ratio_b)
    return pd.DataFrame({"type_a": list(types_a), "type_b": list(types_b), "ratio_a": ratio_a, "ratio_b": ratio_b,
                         "delta": delta})


# --------------------------------------------------------------------------------------------------------
# Filling a table


def predict_dataset(dataset: PairDataset, config: PredictorConfig = PredictorConfig()) -> pd.DataFrame:
    """Every unordered pair of the dataset's job types: measured values where measured, predictions elsewhere.

    ``source`` is ``measured`` (ok), ``measured-infeasible`` (ratios 0) or ``predicted``; failed/skipped
    pairs are predicted. Needs at least two measured pairs to learn from.
    """
    if len(dataset.pairs) < 2:
        raise InputError(f"{dataset.name}: {len(dataset.pairs)} measured pair(s); the predictor needs at least 2",
                         source=dataset.source, field="pairs", valid="a campaign with group_sizes including 2")
    features, _ = feature_matrix(dataset.solo)
    fitted = fit_ratio_model(dataset.pairs, features, config)
    index = {t: i for i, t in enumerate(features.index)}
    types = sort_job_types(dataset.job_types)
    measured = {(r.type_a, r.type_b): r for r in dataset.pairs.itertuples(index=False)}
    infeasible = {(r.type_a, r.type_b) for r in dataset.infeasible.itertuples(index=False)}
    todo = [(a, b) for i, a in enumerate(types) for b in types[i:] if (a, b) not in measured and (a, b) not in infeasible]
    predicted = _predict_pairs(fitted, [a for a, _ in todo], [b for _, b in todo], dataset.solo, index) if todo else None
    rows = []
    for (a, b), row in measured.items():
        # A measured ratio above the table's bound is noise (a slow solo baseline); cap it like colocation-table.
        rows.append({"type_a": a, "type_b": b, "ratio_a": min(row.ratio_a, MAX_RATIO),
                     "ratio_b": min(row.ratio_b, MAX_RATIO), "delta": row.delta, "source": "measured",
                     "repeats": row.repeats})
    for a, b in infeasible:
        rows.append({"type_a": a, "type_b": b, "ratio_a": 0.0, "ratio_b": 0.0, "delta": 0.0,
                     "source": "measured-infeasible", "repeats": 0})
    if predicted is not None:
        for row in predicted.itertuples(index=False):
            rows.append({"type_a": row.type_a, "type_b": row.type_b, "ratio_a": row.ratio_a, "ratio_b": row.ratio_b,
                         "delta": row.delta, "source": "predicted", "repeats": 0})
    table = pd.DataFrame(rows)
    table.insert(0, "gpu_type", dataset.gpu_type)
    table.insert(1, "sharing", dataset.sharing)
    order = {t: i for i, t in enumerate(types)}
    table = table.sort_values(["type_a", "type_b"], key=lambda s: s.map(order)).reset_index(drop=True)
    return table


# The leave-one-pair-out evaluation (it imports the fitting code above) lives in colocate.predict_eval.

__all__ = ["PairDataset", "PredictorConfig", "feature_matrix", "fit_ratio_model", "make_datasets",
           "predict_dataset", "soft_impute"]
