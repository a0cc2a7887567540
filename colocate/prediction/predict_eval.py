"""The δ predictor against honest baselines, under three protocols, with its intervals' coverage.

Protocols (:mod:`scheduler.learning.predictor.folds`), on every dataset given (one per GPU type and sharing mode, all
read together so each is evidence for the others):

* **leave one pair out** — each measured (feasible) pair is held out of its dataset in turn; its
  measurements on other GPU types and sharing modes stay (the closest evidence there is);
* **leave one job type (model@batch) out** — every pair of the held-out type, in every dataset, is removed;
  its solo measurements and its model's pairs at other batch sizes stay. A pair is predicted once per member
  held out;
* **leave one model out (all its batches)** — every pair with any type of the held-out model, in every
  dataset, is removed; only the model's solo measurements stay: a network nobody has paired. A pair is
  predicted once per model held out (:mod:`scheduler.learning.predictor.new_model`).

Every method predicts the held-out pair's two ratios r = t/t′; δ always follows from them and the measured
solo times, δ = (t_a + t_b) / max(t_a/r_a, t_b/r_b) — no method predicts a constant δ. Methods:

* ``predictor`` — :mod:`colocate.prediction.predict` (every level of evidence, closest first);
* ``mean`` — the training mean ratio, for both jobs;
* ``job-type-mean`` — r(a|b) = mean of a's ratios over its measured pairs (the training mean if none):
  what an operator who measured each job type against a few partners would guess;
* ``same-models-mean`` — mean of the ratios measured between the same two *models* at other batch sizes or
  precisions, else the job-type mean;
* ``same-pair-elsewhere`` — the same pair's ratios measured on the other GPU types or sharing modes given,
  averaged, else the same-models mean: what copying a table from another GPU gives;
* ``solo-utilization`` — linear regression of log ratio on the two jobs' solo utilization features (all solo
  features where the data has none).

Metrics: MAE of δ and of the ratios; the decision δ > 1 ("pack this pair") as accuracy, balanced accuracy
(mean of the recalls of both classes: the honest figure when most pairs are on one side), precision and
recall; the coverage of the predictor's intervals (:mod:`scheduler.learning.predictor.conformal`, each held-out
prediction's interval from the residuals of the evaluation's *other* folds, per evidence level) on the ratios
and on δ. :meth:`EvaluationResult.shortfalls` lists every baseline metric the predictor does not beat, with
the paired standard error of the difference, so the report says where and by how much.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from colocate.prediction.predict import PairDataset, baseline_features, delta_of, feature_matrix, pair_set
from common.errors import InputError
from scheduler.formats.colocation_table import MAX_RATIO
from scheduler.learning.predictor.config import PredictorConfig
from scheduler.learning.predictor.conformal import cross_conformal
from scheduler.learning.predictor.evidence import LEVELS, PairSet
from scheduler.learning.predictor.folds import PROTOCOL_TITLES, PROTOCOLS, FoldFit, fold_fits, folds
from scheduler.learning.predictor.ratio_model import MIN_RATIO, SOLO_BASELINE, fit_arrays

DEFAULT_CONFIG = PredictorConfig()  # the defaults, chosen once on Gavel's V100 data
METHODS = ("predictor", "mean", "job-type-mean", "same-models-mean", "same-pair-elsewhere", "solo-utilization")
BASELINES = METHODS[1:]
MAE_METRICS = ("mae_delta", "mae_ratio")
DECISION_METRIC = "balanced_accuracy"
COVERAGE_TOLERANCE = 0.05  # the band: the 80 % interval covers 75-85 % of held-out pairs
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class EvaluationResult:
    """One dataset under one protocol: per-prediction rows and a summary per method."""

    dataset: str
    gpu_type: str
    sharing: str
    protocol: str
    pairs: int  # held-out predictions (a pair once per fold it is predicted in)
    measured_pairs: int
    job_types: int
    features: tuple[str, ...]
    baseline_features: tuple[str, ...]
    summary: pd.DataFrame  # one row per method
    predictions: pd.DataFrame  # one row per held-out prediction and method
    seconds: float
    config: dict[str, Any] = field(default_factory=dict)
    choices: tuple[str, ...] = ()  # per fold meeting a new model: "<fold>: <nested choice>"

    @property
    def title(self) -> str:
        return f"{self.dataset}, {PROTOCOL_TITLES[self.protocol]}"

    def shortfalls(self) -> list[dict[str, Any]]:
        """Every (baseline, metric) the predictor does not beat: lower MAE, balanced accuracy at least as high."""
        table = self.summary.set_index("method")
        ours = table.loc["predictor"]
        out = []
        for baseline in BASELINES:
            other = table.loc[baseline]
            for metric in MAE_METRICS:
                if not ours[metric] < other[metric]:
                    out.append(self._shortfall(baseline, metric, ours[metric], other[metric]))
            if not ours[DECISION_METRIC] >= other[DECISION_METRIC]:
                out.append(self._shortfall(baseline, DECISION_METRIC, ours[DECISION_METRIC], other[DECISION_METRIC]))
        return out

    def beats_baselines(self) -> bool:
        """True when the predictor beats every baseline on MAE (δ, ratios) and on the δ > 1 decision."""
        return not self.shortfalls()

    def coverage(self) -> tuple[float, float]:
        """(ratios, δ): the share of held-out values inside the predictor's intervals."""
        row = self.summary.set_index("method").loc["predictor"]
        return float(row["coverage_ratio"]), float(row["coverage_delta"])

    def calibrated(self) -> bool:
        """Whether the ratio intervals cover within ``COVERAGE_TOLERANCE`` of their level."""
        level = float(self.config.get("level", DEFAULT_CONFIG.level))
        return abs(self.coverage()[0] - level) <= COVERAGE_TOLERANCE + 1e-12

    def _shortfall(self, baseline: str, metric: str, ours: float, theirs: float) -> dict[str, Any]:
        se = paired_se(self.predictions, baseline, metric)
        noise = math.isfinite(se) and abs(ours - theirs) <= 2 * se
        return {"baseline": baseline, "metric": metric, "predictor": float(ours), "baseline_value": float(theirs),
                "paired_se": se, "within_noise": bool(noise)}


def _errors(part: pd.DataFrame, metric: str) -> np.ndarray:
    if metric == "mae_delta":
        return (part["pred_delta"] - part["delta"]).abs().to_numpy()
    if metric == "mae_ratio":
        return ((part["pred_ratio_a"] - part["ratio_a"]).abs() + (part["pred_ratio_b"] - part["ratio_b"]).abs()
                ).to_numpy() / 2
    return ((part["pred_delta"] > 1) != (part["delta"] > 1)).to_numpy(dtype=float)


def paired_se(predictions: pd.DataFrame, baseline: str, metric: str) -> float:
    """Standard error of the per-prediction difference of errors (predictor − baseline), in the same order."""
    ours = _errors(predictions[predictions["method"] == "predictor"], metric)
    theirs = _errors(predictions[predictions["method"] == baseline], metric)
    diff = ours - theirs
    return float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else math.nan


def decision_metrics(predicted_delta: np.ndarray, delta: np.ndarray) -> dict[str, float]:
    """The decision δ > 1 scored against the measured δ: accuracy, balanced accuracy, precision, recall."""
    guess, truth = np.asarray(predicted_delta) > 1.0, np.asarray(delta) > 1.0
    tp, fp = int((guess & truth).sum()), int((guess & ~truth).sum())
    fn, tn = int((~guess & truth).sum()), int((~guess & ~truth).sum())
    recall = tp / (tp + fn) if tp + fn else math.nan
    specificity = tn / (tn + fp) if tn + fp else math.nan
    known = [x for x in (recall, specificity) if not math.isnan(x)]
    return {"accuracy_delta_gt_1": (tp + tn) / max(len(truth), 1),
            "balanced_accuracy": float(np.mean(known)) if known else math.nan,
            "precision": tp / (tp + fp) if tp + fp else math.nan, "recall": recall}


class _Means:
    """Ratio sums of the training observations (a fold's mask) that the mean baselines read."""

    def __init__(self, pairs: PairSet, mask: np.ndarray, d: int) -> None:
        n, m = len(pairs.types), pairs.n_models
        ratio = np.exp(pairs.y)
        here, there = mask & (pairs.dataset == d), mask & (pairs.dataset != d)
        v, a = pairs.victim[here], pairs.aggressor[here]
        self.model = pairs.model
        self.mean = float(ratio[here].mean()) if here.any() else 0.5
        self.victim = np.zeros((2, n))
        np.add.at(self.victim, (0, v), ratio[here])
        np.add.at(self.victim, (1, v), 1.0)
        self.models = np.zeros((2, m, m))
        np.add.at(self.models, (0, pairs.model[v], pairs.model[a]), ratio[here])
        np.add.at(self.models, (1, pairs.model[v], pairs.model[a]), 1.0)
        self.elsewhere = np.zeros((2, n, n))
        np.add.at(self.elsewhere, (0, pairs.victim[there], pairs.aggressor[there]), ratio[there])
        np.add.at(self.elsewhere, (1, pairs.victim[there], pairs.aggressor[there]), 1.0)

    @staticmethod
    def _mean(sums: np.ndarray, counts: np.ndarray, fallback: np.ndarray) -> np.ndarray:
        return np.where(counts > 0, sums / np.maximum(counts, 1.0), fallback)

    def predict(self, v: np.ndarray, a: np.ndarray) -> dict[str, np.ndarray]:
        mean = np.full(len(v), self.mean)
        job = self._mean(self.victim[0, v], self.victim[1, v], mean)
        mv, ma = self.model[v], self.model[a]
        models = self._mean(self.models[0, mv, ma], self.models[1, mv, ma], job)
        elsewhere = self._mean(self.elsewhere[0, v, a], self.elsewhere[1, v, a], models)
        return {"mean": mean, "job-type-mean": job, "same-models-mean": models, "same-pair-elsewhere": elsewhere}


def _solo_utilization(pairs: PairSet, fit: FoldFit, d: int, columns: list[int], v: np.ndarray,
                      a: np.ndarray) -> np.ndarray:
    rows = fit.mask & (pairs.dataset == d)
    local, features = pairs.local[d], pairs.features[d][:, columns]
    fitted = fit_arrays(local[pairs.victim[rows]], local[pairs.aggressor[rows]], pairs.y[rows], features, SOLO_BASELINE)
    return fitted.ratios(local[v], local[a])


def evaluate(datasets: Sequence[PairDataset], config: PredictorConfig = DEFAULT_CONFIG,
             protocols: Sequence[str] = PROTOCOLS, *, only: Sequence[str] | None = None,
             progress: Callable[[str, int, int], None] | None = None) -> list[EvaluationResult]:
    """Every dataset (keyed in ``only``, default all) under every protocol; all datasets are evidence. A protocol
    with no fold in a dataset (leave one model out where the dataset has one model) is left out."""
    from threadpoolctl import threadpool_limits

    pairs = pair_set(datasets)
    out = []
    with threadpool_limits(limits=1, user_api="blas"):
        for d, dataset in enumerate(datasets):
            if only is not None and dataset.key not in only:
                continue
            if len(dataset.pairs) < 3:
                raise InputError(f"{dataset.name}: {len(dataset.pairs)} measured pairs; leave-one-out needs at least 3",
                                 source=dataset.source, field="pairs", valid="a campaign with at least 3 measured pairs")
            for protocol in protocols:
                if not folds(pairs, d, protocol):  # one model only: nothing to learn a new one from
                    continue
                tick = None if progress is None else partial(progress, f"{PROTOCOL_TITLES[protocol]} {dataset.key}")
                out.append(_evaluate_one(pairs, d, dataset, protocol, config, tick))
    return out


def _evaluate_one(pairs: PairSet, d: int, dataset: PairDataset, protocol: str, config: PredictorConfig,
                  progress: Progress | None) -> EvaluationResult:
    started = time.perf_counter()
    features, used = feature_matrix(dataset.solo)
    util = baseline_features(features)
    util_columns = [used.index(c) for c in util]
    truth_a, truth_b = pairs.pair_ratios(d)
    measured = dataset.pairs.reset_index(drop=True)
    total = len(folds(pairs, d, protocol))
    parts, choices = [], []
    for fit in fold_fits(pairs, d, protocol, config):
        if fit.choice:
            choices.append(f"{fit.fold.name}: {fit.choice}")
        v, a = np.concatenate([fit.a, fit.b]), np.concatenate([fit.b, fit.a])
        predicted = {"predictor": np.concatenate([fit.ratio_a, fit.ratio_b]), **_Means(pairs, fit.mask, d).predict(v, a),
                     "solo-utilization": _solo_utilization(pairs, fit, d, util_columns, v, a)}
        n = len(fit.a)
        frame = pd.DataFrame({"fold": fit.number, "pair": fit.fold.pairs, "level": np.maximum(fit.level_a, fit.level_b),
                              "level_a": fit.level_a, "level_b": fit.level_b})
        for method in METHODS:
            values = np.clip(predicted[method], MIN_RATIO, MAX_RATIO)
            parts.append(frame.assign(method=method, pred_ratio_a=values[:n], pred_ratio_b=values[n:]))
        if progress is not None:
            progress(fit.number + 1, total)
    predictions = pd.concat(parts, ignore_index=True)
    rows = predictions["pair"].to_numpy()
    predictions.insert(0, "type_a", measured["type_a"].to_numpy()[rows])
    predictions.insert(1, "type_b", measured["type_b"].to_numpy()[rows])
    predictions["ratio_a"], predictions["ratio_b"] = truth_a[rows], truth_b[rows]
    predictions["delta"] = measured["delta"].to_numpy(dtype=float)[rows]
    t_a, t_b = dataset.solo_times(predictions["type_a"]), dataset.solo_times(predictions["type_b"])
    predictions["pred_delta"] = delta_of(t_a, t_b, predictions["pred_ratio_a"].to_numpy(),
                                         predictions["pred_ratio_b"].to_numpy())
    predictions = _with_intervals(predictions, config.level)
    return EvaluationResult(
        dataset=dataset.name, gpu_type=dataset.gpu_type, sharing=dataset.sharing, protocol=protocol,
        pairs=int((predictions["method"] == "predictor").sum()), measured_pairs=len(measured),
        job_types=len(dataset.job_types), features=tuple(used), baseline_features=tuple(util),
        summary=summarise(predictions), predictions=predictions, seconds=time.perf_counter() - started,
        config=asdict(config), choices=tuple(choices))


def _with_intervals(predictions: pd.DataFrame, level: float) -> pd.DataFrame:
    """The predictor's rows with their cross-conformal intervals (other folds' residuals, per evidence level)."""
    ours = predictions["method"] == "predictor"
    part = predictions[ours]
    n = len(part)
    predicted = np.concatenate([part["pred_ratio_a"], part["pred_ratio_b"]])
    truth = np.concatenate([part["ratio_a"], part["ratio_b"]])
    levels = np.concatenate([part["level_a"], part["level_b"]])
    fold_ids = np.concatenate([part["fold"], part["fold"]])
    low, high = cross_conformal(predicted, truth, levels, fold_ids, level, len(LEVELS))
    delta_low, delta_high = cross_conformal(part["pred_delta"].to_numpy(), part["delta"].to_numpy(),
                                            part["level"].to_numpy(), part["fold"].to_numpy(), level, len(LEVELS))
    out = predictions.copy()
    for column, values in (("low_a", low[:n]), ("high_a", high[:n]), ("low_b", low[n:]), ("high_b", high[n:]),
                           ("delta_low", delta_low), ("delta_high", delta_high)):
        out[column] = math.nan
        out.loc[ours, column] = values
    out["evidence"] = [LEVELS[k] for k in out["level"]]
    return out.drop(columns=["level", "level_a", "level_b"])


def summarise(predictions: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for method in METHODS:
        part = predictions[predictions["method"] == method]
        err_a = (part["pred_ratio_a"] - part["ratio_a"]).abs()
        err_b = (part["pred_ratio_b"] - part["ratio_b"]).abs()
        row = {"method": method, "mae_delta": float((part["pred_delta"] - part["delta"]).abs().mean()),
               "mae_ratio_a": float(err_a.mean()), "mae_ratio_b": float(err_b.mean()),
               "mae_ratio": float(pd.concat([err_a, err_b]).mean()),
               **decision_metrics(part["pred_delta"].to_numpy(), part["delta"].to_numpy()),
               "coverage_ratio": math.nan, "coverage_delta": math.nan, "interval_width": math.nan}
        if method == "predictor" and "low_a" in part:
            inside_a = (part["ratio_a"] >= part["low_a"]) & (part["ratio_a"] <= part["high_a"])
            inside_b = (part["ratio_b"] >= part["low_b"]) & (part["ratio_b"] <= part["high_b"])
            row["coverage_ratio"] = float(pd.concat([inside_a, inside_b]).mean())
            row["coverage_delta"] = float(((part["delta"] >= part["delta_low"])
                                           & (part["delta"] <= part["delta_high"])).mean())
            widths = np.concatenate([part["high_a"] / part["low_a"], part["high_b"] / part["low_b"]])
            row["interval_width"] = float(np.median(widths))
        rows.append(row)
    return pd.DataFrame(rows)


def ties(result: EvaluationResult) -> list[str]:
    """Baselines whose δ > 1 balanced accuracy equals the predictor's (not beaten, not worse)."""
    table = result.summary.set_index("method")[DECISION_METRIC]
    return [b for b in BASELINES if math.isclose(table[b], table["predictor"], abs_tol=1e-12)]


__all__ = ["BASELINES", "DEFAULT_CONFIG", "METHODS", "PROTOCOL_TITLES", "EvaluationResult", "decision_metrics",
           "evaluate", "paired_se", "summarise", "ties"]


def synthetic_dataset(job_types: int, seed: int = 0) -> PairDataset:
    """A benchmark dataset: every pair of ``job_types`` types, log ratios = solo-feature terms + a rank-2 matrix."""
    rng = np.random.default_rng(seed)
    names = [f"model{k // 4}@{2 ** (4 + k % 4)}" for k in range(job_types)]
    solo = pd.DataFrame({"solo_iter_time_s": rng.uniform(0.02, 0.5, job_types),
                         "batch_size": [int(n.split("@")[1]) for n in names],
                         "peak_memory_mib": rng.uniform(500, 8000, job_types)}, index=pd.Index(names, name="job_type"))
    low_rank = rng.normal(size=(job_types, 2)) @ rng.normal(size=(2, job_types)) * 0.2
    log_t = np.log(solo["solo_iter_time_s"].to_numpy())
    rows = []
    for i in range(job_types):
        for j in range(i, job_types):
            r_a = float(np.clip(np.exp(-0.6 + 0.2 * log_t[j] + low_rank[i, j]), 0.05, 1.0))
            r_b = float(np.clip(np.exp(-0.6 + 0.2 * log_t[i] + low_rank[j, i]), 0.05, 1.0))
            t_a, t_b = solo["solo_iter_time_s"].iat[i], solo["solo_iter_time_s"].iat[j]
            rows.append({"type_a": names[i], "type_b": names[j], "ratio_a": r_a, "ratio_b": r_b,
                         "delta": (t_a + t_b) / max(t_a / r_a, t_b / r_b)})
    return PairDataset("synthetic", "timeslice", solo, pd.DataFrame(rows), pd.DataFrame(columns=["type_a", "type_b"]),
                       "synthetic")
