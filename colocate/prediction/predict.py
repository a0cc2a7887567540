"""Predict co-location ratios (and so δ) for pairs nobody measured.

The model itself (:mod:`scheduler.learning.prior`, where the scheduler uses it as the prior of its pair
belief) — for a job a sharing a GPU with job b (a is the "victim", b the "aggressor"), the log of a's ratio
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

Evaluation (:mod:`colocate.prediction.predict_eval`): leave one measured pair out, fit on the rest, predict it; MAE of
δ and of each ratio and the decision δ > 1 (balanced accuracy, precision, recall), side by side with the
mean, per-job-type mean, same-models mean and solo-utilization baselines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from colocate.analysis.results import (
    UTILIZATION_COLUMNS,
    ResultsSet,
    group_table,
    solo_table,
    sort_job_types,
)
from common.errors import InputError
from profiler.results.schema import STATUS_INFEASIBLE, STATUS_OK
from scheduler.formats.colocation_table import MAX_RATIO  # predictions stay within the table's bound
from scheduler.learning.prior import (
    PredictorConfig,
    _predict_pairs,
    fit_ratio_model,
)
from scheduler.learning.prior import feature_matrix as _feature_matrix

SOLO_FEATURES = ("solo_iter_time_s", "batch_size", "peak_memory_mib", *UTILIZATION_COLUMNS,
                 "kernel_occupancy_pct", "kernel_dram_throughput_pct", "kernel_sm_throughput_pct")
# Features the "solo utilization" baseline prefers; when a dataset has none it falls back to all solo features.
UTILIZATION_FEATURES = (*UTILIZATION_COLUMNS, "kernel_occupancy_pct", "kernel_dram_throughput_pct",
                        "kernel_sm_throughput_pct")



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


DEFAULT_PREDICTOR = PredictorConfig()


def feature_matrix(solo: pd.DataFrame, columns: Sequence[str] = SOLO_FEATURES) -> tuple[pd.DataFrame, list[str]]:
    """Standardized solo features per job type (:func:`scheduler.learning.prior.feature_matrix`) over every
    solo feature a campaign can measure."""
    return _feature_matrix(solo, columns)


def _baseline_features(features: pd.DataFrame) -> list[str]:
    preferred = [c for c in features.columns if c in UTILIZATION_FEATURES]
    return preferred or list(features.columns)


# --------------------------------------------------------------------------------------------------------
# Filling a table


def predict_dataset(dataset: PairDataset, config: PredictorConfig = DEFAULT_PREDICTOR) -> pd.DataFrame:
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


# The leave-one-pair-out evaluation (it imports the fitting code above) lives in colocate.prediction.predict_eval.

__all__ = ["PairDataset", "feature_matrix", "make_datasets", "predict_dataset"]
