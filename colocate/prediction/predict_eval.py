"""Leave-one-pair-out evaluation of the δ predictor against honest baselines.

Each measured (feasible) pair is held out in turn; every method is fitted on the remaining pairs and predicts
the held-out pair's two ratios r = t/t′; δ always follows from the predicted ratios and the measured solo
times, δ = (t_a + t_b) / max(t_a/r_a, t_b/r_b) — no method predicts a constant δ. Methods:

* ``predictor`` — :mod:`colocate.prediction.predict` (ridge on solo features + per-job effects + matrix completion);
* ``mean`` — the training mean ratio, for both jobs;
* ``job-type-mean`` — r(a|b) = mean of a's ratios over its other measured pairs (the training mean if none):
  what an operator who measured each job type against a few partners would guess;
* ``same-models-mean`` — mean of the ratios measured between the same two *models* at other batch sizes,
  else the job-type mean;
* ``solo-utilization`` — linear regression of log ratio on the two jobs' solo utilization features (all solo
  features where the data has none).

Metrics: MAE of δ and of the ratios; the decision δ > 1 ("pack this pair") as accuracy, balanced accuracy
(mean of the recalls of both classes: the honest figure when most pairs are on one side), precision and
recall. :meth:`EvaluationResult.shortfalls` lists every baseline metric the predictor does not beat, with the
paired standard error of the difference, so the report says where and by how much.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from colocate.analysis.results import split_job_type
from colocate.prediction.predict import PairDataset, _baseline_features, feature_matrix
from common.errors import InputError
from scheduler.formats.colocation_table import MAX_RATIO
from scheduler.learning.prior import MIN_RATIO, SOLO_BASELINE, PredictorConfig, _design, _fit_arrays, _observations

DEFAULT_CONFIG = PredictorConfig()  # the defaults, chosen once on Gavel's V100 data
METHODS = ("predictor", "mean", "job-type-mean", "same-models-mean", "solo-utilization")
BASELINES = METHODS[1:]
MAE_METRICS = ("mae_delta", "mae_ratio")
DECISION_METRIC = "balanced_accuracy"


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

    def _shortfall(self, baseline: str, metric: str, ours: float, theirs: float) -> dict[str, Any]:
        se = _paired_se(self.predictions, baseline, metric)
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


def _paired_se(predictions: pd.DataFrame, baseline: str, metric: str) -> float:
    """Standard error of the per-pair difference of errors (predictor − baseline), pairs in the same order."""
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


class _GroupMeans:
    """Mean ratio per key over all directed observations, with the held-out pair's rows subtracted per fold."""

    def __init__(self, keys: np.ndarray, ratios: np.ndarray) -> None:
        self.keys = keys
        self.sums: dict[Any, float] = {}
        self.counts: dict[Any, int] = {}
        for key, r in zip(keys.tolist(), ratios.tolist()):
            self.sums[key] = self.sums.get(key, 0.0) + r
            self.counts[key] = self.counts.get(key, 0) + 1
        self.ratios = ratios

    def without(self, key: Any, out: Sequence[int]) -> float | None:
        total, count = self.sums.get(key, 0.0), self.counts.get(key, 0)
        for k in out:
            if self.keys[k] == key:
                total, count = total - self.ratios[k], count - 1
        return total / count if count > 0 else None


def _fold_baselines(held: int, out: list[int], victims: np.ndarray, aggressors: np.ndarray, by_type: _GroupMeans,
                    by_models: _GroupMeans, models: list[str], global_mean: float) -> dict[str, np.ndarray]:
    """Ratios (held-out job a, job b) predicted by the three mean baselines for one fold."""
    pairs = ((victims[held], aggressors[held]), (aggressors[held], victims[held]))
    type_mean = [by_type.without(v, out) for v, _ in pairs]
    type_mean = [global_mean if m is None else m for m in type_mean]
    model_mean = [by_models.without(f"{models[v]}|{models[a]}", out) for v, a in pairs]
    model_mean = [type_mean[k] if m is None else m for k, m in enumerate(model_mean)]
    return {"mean": np.array([global_mean, global_mean]), "job-type-mean": np.array(type_mean),
            "same-models-mean": np.array(model_mean)}


def leave_one_pair_out(
    dataset: PairDataset, config: PredictorConfig = DEFAULT_CONFIG, *,
    progress: Callable[[int, int], None] | None = None,
) -> EvaluationResult:
    """Hold out each measured pair in turn; fit every method on the others; predict the held-out pair.

    Runs with one BLAS thread: the matrices are small (job types × job types), and on a busy machine
    OpenBLAS's thread hand-offs made each 55 × 55 SVD 18× slower than one thread.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _leave_one_pair_out(dataset, config, progress)


def _leave_one_pair_out(dataset: PairDataset, config: PredictorConfig,
                        progress: Callable[[int, int], None] | None) -> EvaluationResult:
    if len(dataset.pairs) < 3:
        raise InputError(f"{dataset.name}: {len(dataset.pairs)} measured pairs; leave-one-out needs at least 3",
                         source=dataset.source, field="pairs", valid="a campaign with at least 3 measured pairs")
    started = time.perf_counter()
    features, used = feature_matrix(dataset.solo)
    baseline_columns = _baseline_features(features)
    index = {t: i for i, t in enumerate(features.index)}
    models = [split_job_type(t)[0] for t in features.index]
    pairs, n_pairs, n = dataset.pairs, len(dataset.pairs), len(index)
    victims, aggressors, target = _observations(pairs, index)  # rows k and k + n_pairs: jobs a and b of pair k
    matrix = features.to_numpy(dtype=float) if len(used) else np.zeros((n, 0))
    baseline_matrix = features[baseline_columns].to_numpy(dtype=float) if baseline_columns else np.zeros((n, 0))
    design = _design(victims, aggressors, matrix, n, interactions=config.use_interactions,
                     job_effects=config.use_job_effects)
    baseline_design = _design(victims, aggressors, baseline_matrix, n, interactions=False, job_effects=False)
    solo_times = dataset.solo["solo_iter_time_s"].reindex(features.index).to_numpy(dtype=float)
    ratios = np.concatenate([pairs["ratio_a"].to_numpy(dtype=float), pairs["ratio_b"].to_numpy(dtype=float)])
    by_type = _GroupMeans(victims, ratios)
    by_models = _GroupMeans(np.array([f"{models[v]}|{models[a]}" for v, a in zip(victims, aggressors)]), ratios)
    total_ratio = ratios.sum()
    types_a, types_b = pairs["type_a"].tolist(), pairs["type_b"].tolist()
    deltas = pairs["delta"].to_numpy(dtype=float)
    # Gram matrices of all observations; each fold subtracts its two held-out rows (a rank-2 downdate). The
    # completion of the full data warm-starts every fold's (convex) completion: same optimum, fewer iterations.
    gram = (design.T @ design, design.T @ target)
    baseline_gram = (baseline_design.T @ baseline_design, baseline_design.T @ target)
    warm = _fit_arrays(victims, aggressors, target, matrix, config, design, gram).completion
    rows = []
    for held in range(n_pairs):
        out = [held, held + n_pairs]
        keep = np.ones(2 * n_pairs, dtype=bool)
        keep[out] = False
        fold = (gram[0] - design[out].T @ design[out], gram[1] - design[out].T @ target[out])
        fold_baseline = (baseline_gram[0] - baseline_design[out].T @ baseline_design[out],
                         baseline_gram[1] - baseline_design[out].T @ target[out])
        i, j = victims[held], aggressors[held]
        both_ways = (np.array([i, j]), np.array([j, i]))
        fitted = {
            "predictor": _fit_arrays(victims[keep], aggressors[keep], target[keep], matrix, config, design[keep],
                                     fold, warm_start=warm),
            "solo-utilization": _fit_arrays(victims[keep], aggressors[keep], target[keep], baseline_matrix,
                                            SOLO_BASELINE, baseline_design[keep], fold_baseline),
        }
        predicted = {m: np.clip(np.exp(f.predict_log(*both_ways)), MIN_RATIO, f.max_ratio) for m, f in fitted.items()}
        global_mean = (total_ratio - ratios[out].sum()) / (2 * n_pairs - 2)
        for method, values in _fold_baselines(held, out, victims, aggressors, by_type, by_models, models,
                                              global_mean).items():
            predicted[method] = np.clip(values, MIN_RATIO, MAX_RATIO)
        for method in METHODS:
            ra, rb = predicted[method]
            rows.append({"method": method, "type_a": types_a[held], "type_b": types_b[held],
                         "ratio_a": ratios[held], "ratio_b": ratios[held + n_pairs], "delta": deltas[held],
                         "pred_ratio_a": float(ra), "pred_ratio_b": float(rb),
                         "pred_delta": float((solo_times[i] + solo_times[j]) / max(solo_times[i] / ra,
                                                                                   solo_times[j] / rb))})
        if progress is not None:
            progress(held + 1, n_pairs)
    predictions = pd.DataFrame(rows)
    return EvaluationResult(
        dataset=dataset.name, gpu_type=dataset.gpu_type, sharing=dataset.sharing, pairs=n_pairs, job_types=n,
        features=tuple(used), baseline_features=tuple(baseline_columns), summary=_summary(predictions),
        predictions=predictions, seconds=time.perf_counter() - started, config=asdict(config),
    )


def _summary(predictions: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for method in METHODS:
        part = predictions[predictions["method"] == method]
        err_a = (part["pred_ratio_a"] - part["ratio_a"]).abs()
        err_b = (part["pred_ratio_b"] - part["ratio_b"]).abs()
        rows.append({"method": method, "mae_delta": float((part["pred_delta"] - part["delta"]).abs().mean()),
                     "mae_ratio_a": float(err_a.mean()), "mae_ratio_b": float(err_b.mean()),
                     "mae_ratio": float(pd.concat([err_a, err_b]).mean()),
                     **decision_metrics(part["pred_delta"].to_numpy(), part["delta"].to_numpy())})
    return pd.DataFrame(rows)


def _fmt(value: float, digits: int = 3) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def ties(result: EvaluationResult) -> list[str]:
    """Baselines whose δ > 1 balanced accuracy equals the predictor's (not beaten, not worse)."""
    table = result.summary.set_index("method")[DECISION_METRIC]
    return [b for b in BASELINES if math.isclose(table[b], table["predictor"], abs_tol=1e-12)]


def _verdict_lines(result: EvaluationResult) -> list[str]:
    falls = result.shortfalls()
    tied = ties(result)
    tie_note = (f" It ties {', '.join(tied)} on the δ > 1 balanced accuracy ({result.pairs} pairs: one pair moves "
                f"it by about {1 / max(result.pairs, 1):.2f})." if tied else "")
    if not falls:
        return [f"- {result.dataset}: the predictor beats every baseline on MAE δ and MAE ratio, and is at least as "
                f"good on the δ > 1 decision (balanced accuracy).{tie_note}"]
    lines = [f"- {result.dataset}: the predictor does **not** beat every baseline:"]
    for f in falls:
        why = ("the difference is within two paired standard errors (noise at this many pairs)" if f["within_noise"]
               else "the baseline is better by more than two paired standard errors")
        lines.append(f"  - {f['metric']} vs {f['baseline']}: {f['predictor']:.4f} vs {f['baseline_value']:.4f} "
                     f"(paired SE {_fmt(f['paired_se'], 4)}): {why}.")
    return lines + ([f"  - {tie_note.strip()}"] if tied else [])


def evaluation_report(results: Sequence[EvaluationResult], *, title: str = "δ predictor: leave-one-pair-out evaluation",
                      provenance: Sequence[str] = ()) -> str:
    """A Markdown report: one table per dataset, then a verdict naming every baseline metric not beaten."""
    lines = [f"# {title}", "", *provenance, *([""] if provenance else [])]
    lines += [part.strip() + "\n" for part in (__doc__ or "").split("\n\n")[1:4]]
    lines += ["Ratio a/b follow the canonical job-type order of the pair; infeasible (OOM) pairs are not regression "
              "targets and are excluded.", ""]
    if results:
        config = ", ".join(f"{k}={v}" for k, v in results[0].config.items())
        lines += [f"Predictor settings: {config}.", ""]
    verdicts: list[str] = []
    for result in results:
        lines += [f"## {result.dataset}", "",
                  f"{result.pairs} measured pairs over {result.job_types} job types; predictor features: "
                  f"{', '.join(result.features) or 'none'}; solo-utilization features: "
                  f"{', '.join(result.baseline_features) or 'none'}; {result.seconds:.1f} s.", "",
                  "| method | MAE δ | MAE ratio a | MAE ratio b | MAE ratio | accuracy δ>1 | balanced acc. | "
                  "precision | recall |", "|---|---|---|---|---|---|---|---|---|"]
        for row in result.summary.itertuples(index=False):
            lines.append(f"| {row.method} | {row.mae_delta:.4f} | {row.mae_ratio_a:.4f} | {row.mae_ratio_b:.4f} | "
                         f"{row.mae_ratio:.4f} | {_fmt(row.accuracy_delta_gt_1)} | {_fmt(row.balanced_accuracy)} | "
                         f"{_fmt(row.precision)} | {_fmt(row.recall)} |")
        lines.append("")
        verdicts += _verdict_lines(result)
    return "\n".join([*lines, "## Verdict", "", *verdicts, ""])


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
