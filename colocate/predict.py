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

Evaluation (:func:`evaluate`): leave one measured pair out, fit on the rest, predict it; MAE of δ and of
each ratio, and accuracy of the decision δ > 1, side by side with two baselines: the training mean, and a
linear regression on the two jobs' solo features only (utilization where measured).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from colocate.colocation_table import MAX_RATIO  # predictions stay within the table's bound
from colocate.errors import InputError
from colocate.results import (
    UTILIZATION_COLUMNS,
    ResultsSet,
    group_table,
    solo_table,
    sort_job_types,
)
from profiler.schema import STATUS_INFEASIBLE, STATUS_OK

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
) -> np.ndarray:
    """Nuclear-norm-regularised completion of an n×n matrix from entries (rows, cols) = values.

    Repeated entries are averaged. Iterates Z ← S_λ(P_Ω(M) + P_Ω⊥(Z)) with S_λ soft-thresholding the
    singular values (Mazumder, Hastie & Tibshirani 2010); convex, so the start (zeros) does not matter.
    """
    total = np.zeros((n, n))
    count = np.zeros((n, n))
    np.add.at(total, (rows, cols), values)
    np.add.at(count, (rows, cols), 1.0)
    observed = count > 0
    target = np.divide(total, count, out=np.zeros_like(total), where=observed)
    estimate = np.zeros((n, n))
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


def _constant_log(value: float, vv: np.ndarray, aa: np.ndarray) -> np.ndarray:
    """The mean baseline's prediction: the same log-ratio for every pair."""
    return np.full(len(vv), value)


@dataclass
class _Fitted:
    predict_log: Callable[[np.ndarray, np.ndarray], np.ndarray]
    max_ratio: float
    mean_delta: float | None = None  # the mean baseline predicts δ directly


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
                                 iters=config.completion_iters, tol=config.completion_tol)

    def predict_log(v: np.ndarray, a: np.ndarray) -> np.ndarray:
        return _design(v, a, matrix, n, **options) @ weights + completion[v, a]

    max_ratio = float(np.clip(np.exp(target.max()) if len(target) else 1.0, 1.0, MAX_RATIO))
    return _Fitted(predict_log, max_ratio)


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
    if fitted.mean_delta is not None:
        delta = np.full(len(a), fitted.mean_delta)
    else:
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


# --------------------------------------------------------------------------------------------------------
# Evaluation


METHODS = ("predictor", "mean", "solo-utilization")


@dataclass(frozen=True)
class EvaluationResult:
    """Leave-one-pair-out results of one dataset: per-pair predictions and a summary per method."""

    dataset: str
    gpu_type: str
    sharing: str
    pairs: int
    job_types: int
    features: tuple[str, ...]
    baseline_features: tuple[str, ...]
    summary: pd.DataFrame  # one row per method
    predictions: pd.DataFrame  # one row per held-out pair and method
    seconds: float
    config: dict[str, Any] = field(default_factory=dict)

    def beats_baselines(self) -> bool:
        """True when the predictor is better than both baselines on every metric (lower MAE, higher accuracy)."""
        table = self.summary.set_index("method")
        ours = table.loc["predictor"]
        for baseline in ("mean", "solo-utilization"):
            other = table.loc[baseline]
            for metric in ("mae_delta", "mae_ratio_a", "mae_ratio_b"):
                if not ours[metric] < other[metric]:
                    return False
            if not ours["accuracy_delta_gt_1"] >= other["accuracy_delta_gt_1"]:
                return False
        return True


def leave_one_pair_out(
    dataset: PairDataset, config: PredictorConfig = PredictorConfig(), *, progress: Callable[[int, int], None] | None = None,
) -> EvaluationResult:
    """Hold out each measured pair in turn; fit all three methods on the others; predict the held-out pair."""
    if len(dataset.pairs) < 3:
        raise InputError(f"{dataset.name}: {len(dataset.pairs)} measured pairs; leave-one-out needs at least 3",
                         source=dataset.source, field="pairs", valid="a campaign with at least 3 measured pairs")
    started = time.perf_counter()
    features, used = feature_matrix(dataset.solo)
    baseline_columns = _baseline_features(features)
    index = {t: i for i, t in enumerate(features.index)}
    pairs = dataset.pairs
    n_pairs = len(pairs)
    # Directed observations once: rows k (job a of pair k) and k + n_pairs (job b of pair k).
    victims, aggressors, target = _observations(pairs, index)
    matrix = features.to_numpy(dtype=float) if len(used) else np.zeros((len(index), 0))
    baseline_matrix = features[baseline_columns].to_numpy(dtype=float) if baseline_columns else np.zeros((len(index), 0))
    n = len(index)
    design = _design(victims, aggressors, matrix, n, interactions=config.use_interactions,
                     job_effects=config.use_job_effects)
    baseline_design = _design(victims, aggressors, baseline_matrix, n, interactions=False, job_effects=False)
    solo_times = dataset.solo["solo_iter_time_s"].reindex(features.index).to_numpy(dtype=float)
    deltas = pairs["delta"].to_numpy(dtype=float)
    ratio_values = np.concatenate([pairs["ratio_a"].to_numpy(dtype=float), pairs["ratio_b"].to_numpy(dtype=float)])
    types_a, types_b = list(pairs["type_a"]), list(pairs["type_b"])
    # Gram matrices of all observations; each fold subtracts its two held-out rows (a rank-2 downdate).
    gram = (design.T @ design, design.T @ target)
    baseline_gram = (baseline_design.T @ baseline_design, baseline_design.T @ target)
    rows = []
    for held in range(n_pairs):
        keep = np.ones(2 * n_pairs, dtype=bool)
        out = [held, held + n_pairs]
        keep[out] = False
        v, a, y = victims[keep], aggressors[keep], target[keep]
        fold_gram = (gram[0] - design[out].T @ design[out], gram[1] - design[out].T @ target[out])
        fold_baseline = (baseline_gram[0] - baseline_design[out].T @ baseline_design[out],
                         baseline_gram[1] - baseline_design[out].T @ target[out])
        mean_log = float(np.log(ratio_values[keep].mean()))
        fitted = {
            "predictor": _fit_arrays(v, a, y, matrix, config, design[keep], fold_gram),
            "mean": _Fitted(partial(_constant_log, mean_log), MAX_RATIO,
                            float(np.delete(deltas, held).mean())),
            "solo-utilization": _fit_arrays(v, a, y, baseline_matrix, SOLO_BASELINE, baseline_design[keep], fold_baseline),
        }
        i, j = victims[held], aggressors[held]
        for method, model in fitted.items():
            log_ratio = model.predict_log(np.array([i, j]), np.array([j, i]))
            ratio_a, ratio_b = np.clip(np.exp(log_ratio), MIN_RATIO, model.max_ratio)
            if model.mean_delta is not None:
                delta = model.mean_delta
            else:
                delta = (solo_times[i] + solo_times[j]) / max(solo_times[i] / ratio_a, solo_times[j] / ratio_b)
            rows.append({"method": method, "type_a": types_a[held], "type_b": types_b[held],
                         "ratio_a": ratio_values[held], "ratio_b": ratio_values[held + n_pairs],
                         "delta": deltas[held], "pred_ratio_a": float(ratio_a), "pred_ratio_b": float(ratio_b),
                         "pred_delta": float(delta)})
        if progress is not None:
            progress(held + 1, n_pairs)
    predictions = pd.DataFrame(rows)
    summary_rows = []
    for method in METHODS:
        part = predictions[predictions["method"] == method]
        summary_rows.append({
            "method": method,
            "mae_delta": float((part["pred_delta"] - part["delta"]).abs().mean()),
            "mae_ratio_a": float((part["pred_ratio_a"] - part["ratio_a"]).abs().mean()),
            "mae_ratio_b": float((part["pred_ratio_b"] - part["ratio_b"]).abs().mean()),
            "mae_ratio": float(pd.concat([(part["pred_ratio_a"] - part["ratio_a"]).abs(),
                                          (part["pred_ratio_b"] - part["ratio_b"]).abs()]).mean()),
            "accuracy_delta_gt_1": float(((part["pred_delta"] > 1.0) == (part["delta"] > 1.0)).mean()),
        })
    return EvaluationResult(
        dataset=dataset.name, gpu_type=dataset.gpu_type, sharing=dataset.sharing, pairs=len(pairs),
        job_types=len(index), features=tuple(used), baseline_features=tuple(baseline_columns),
        summary=pd.DataFrame(summary_rows), predictions=predictions, seconds=time.perf_counter() - started,
        config=asdict(config),
    )


def evaluation_report(results: Sequence[EvaluationResult], *, title: str = "δ predictor: leave-one-pair-out evaluation",
                      provenance: Sequence[str] = ()) -> str:
    """A Markdown report: one table per dataset plus a verdict line (predictor vs both baselines)."""
    lines = [f"# {title}", ""]
    lines += list(provenance)
    if provenance:
        lines.append("")
    lines += [
        "Each measured (feasible) pair is held out in turn; every method is fitted on the remaining pairs and",
        "predicts the held-out pair's two ratios t/t′ and δ (from the ratios and the measured solo times).",
        "Methods: **predictor** = ridge on solo features + per-job sensitivity/pressure + soft-impute matrix",
        "completion of the residuals; **mean** = training mean ratio and mean δ; **solo-utilization** = linear",
        "regression of log ratio on the two jobs' solo utilization features (all solo features when the data has",
        "no utilization, e.g. Gavel's file: solo throughput and batch size only).",
        "Ratio a/b follow the canonical job-type order of the pair. Infeasible (OOM) pairs are not regression",
        "targets and are excluded. δ > 1 accuracy: share of held-out pairs whose predicted δ is on the same side",
        "of 1 as the measured δ.",
        "",
    ]
    if results:
        config = ", ".join(f"{k}={v}" for k, v in results[0].config.items())
        lines += [f"Predictor settings: {config} (defaults; chosen once on Gavel's V100 data and used unchanged for",
                  "every other dataset).", ""]
    verdicts = []
    for result in results:
        lines.append(f"## {result.dataset}")
        lines.append("")
        lines.append(f"{result.pairs} measured pairs over {result.job_types} job types; predictor features: "
                     f"{', '.join(result.features) or 'none'}; baseline features: "
                     f"{', '.join(result.baseline_features) or 'none'}; {result.seconds:.1f} s.")
        lines.append("")
        lines.append("| method | MAE δ | MAE ratio a | MAE ratio b | MAE ratio (both) | accuracy δ>1 |")
        lines.append("|---|---|---|---|---|---|")
        for row in result.summary.itertuples(index=False):
            lines.append(f"| {row.method} | {row.mae_delta:.4f} | {row.mae_ratio_a:.4f} | {row.mae_ratio_b:.4f} | "
                         f"{row.mae_ratio:.4f} | {row.accuracy_delta_gt_1:.3f} |")
        lines.append("")
        verdict = "beats both baselines on every metric" if result.beats_baselines() else \
            "does NOT beat both baselines on every metric"
        verdicts.append(f"- {result.dataset}: predictor {verdict}")
    lines += ["## Verdict", "", *verdicts, ""]
    return "\n".join(lines)
