"""Predict co-location ratios (and so δ), with calibrated intervals, for pairs nobody measured.

The model (:mod:`scheduler.learning.predictor.ratio_model`, :mod:`scheduler.learning.predictor.evidence`, where the scheduler uses
it as the prior of its pair belief) predicts each job's ratio r(a|b) = t_a / t′_a from every level of
evidence the inputs hold, closest first: the same pair measured on another GPU type or sharing mode, the
same two models at another batch size or precision (each with a learned transfer factor), the two job types
against other partners (job effects and a matrix completion), and the jobs' solo features (log solo time,
batch size, peak memory, NVML/GPM utilization and occupancy, DRAM bandwidth, kernel profiles — whichever the
data has). All datasets given are read together: an H100's time-sliced pairs are evidence for its MPS pairs,
Gavel's K80 pairs for its V100 pairs.

Each prediction carries an interval (:mod:`scheduler.learning.predictor.conformal`): split conformal on the residuals of
the dataset's own held-out predictions (:mod:`scheduler.learning.predictor.folds`: leave one pair out, one job type
out, one model out), per evidence level. The co-located iteration times follow as t′ = t / r, and
δ = (t_a + t_b) / max(t′_a, t′_b) with the solo t measured; δ's interval is calibrated the same way on δ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from colocate.analysis.results import UTILIZATION_COLUMNS, ResultsSet, group_table, solo_table, sort_job_types
from common.errors import InputError
from profiler.results.schema import STATUS_INFEASIBLE, STATUS_OK
from scheduler.formats.colocation_table import MAX_RATIO  # predictions stay within the table's bound
from scheduler.learning.predictor.config import PredictorConfig
from scheduler.learning.predictor.conformal import Calibration
from scheduler.learning.predictor.evidence import LEVELS, Dataset, Evidence, PairSet, Predictor
from scheduler.learning.predictor.folds import PROTOCOLS, held_out, ratio_calibration
from scheduler.learning.predictor.ratio_model import feature_matrix as _feature_matrix

SOLO_FEATURES = ("solo_iter_time_s", "batch_size", "peak_memory_mib", *UTILIZATION_COLUMNS,
                 "kernel_occupancy_pct", "kernel_dram_throughput_pct", "kernel_sm_throughput_pct")
# Features the "solo utilization" baseline prefers; when a dataset has none it falls back to all solo features.
UTILIZATION_FEATURES = (*UTILIZATION_COLUMNS, "kernel_occupancy_pct", "kernel_dram_throughput_pct",
                        "kernel_sm_throughput_pct")
INTERVAL_COLUMNS = ("low_a", "high_a", "low_b", "high_b", "delta_low", "delta_high")
DEFAULT_PREDICTOR = PredictorConfig()


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
    def key(self) -> str:
        return f"{self.gpu_type}/{self.sharing}"

    @property
    def job_types(self) -> list[str]:
        return list(self.solo.index)

    def solo_times(self, types: Sequence[str]) -> np.ndarray:
        return self.solo["solo_iter_time_s"].reindex(list(types)).to_numpy(dtype=float)


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


def feature_matrix(solo: pd.DataFrame, columns: Sequence[str] = SOLO_FEATURES) -> tuple[pd.DataFrame, list[str]]:
    """Standardized solo features per job type (:func:`scheduler.learning.predictor.ratio_model.feature_matrix`) over every
    solo feature a campaign can measure."""
    return _feature_matrix(solo, columns)


def baseline_features(features: pd.DataFrame) -> list[str]:
    """The solo-utilization baseline's features: the utilization ones where measured, else every solo feature."""
    preferred = [c for c in features.columns if c in UTILIZATION_FEATURES]
    return preferred or list(features.columns)


def pair_set(datasets: Sequence[PairDataset]) -> PairSet:
    """The datasets as one pair set: each one's pairs are evidence for the others' (same job-type names)."""
    return PairSet([Dataset(d.key, d.pairs[["type_a", "type_b", "ratio_a", "ratio_b"]], feature_matrix(d.solo)[0])
                    for d in datasets])


def delta_of(t_a: np.ndarray, t_b: np.ndarray, r_a: np.ndarray, r_b: np.ndarray) -> np.ndarray:
    """δ = (t_a + t_b) / max(t_a/r_a, t_b/r_b): increasing in both ratios."""
    return (t_a + t_b) / np.maximum(t_a / r_a, t_b / r_b)


@dataclass(frozen=True)
class Calibrations:
    """One dataset's interval calibration: residuals of held-out ratios and δs per evidence level."""

    ratios: Calibration
    delta: Calibration


def calibrate(pairs: PairSet, dataset: PairDataset, d: int, config: PredictorConfig) -> Calibrations:
    """Every protocol's held-out predictions of dataset ``d`` (:mod:`scheduler.learning.predictor.folds`): leave one
    pair out gives the residuals of the levels a measured type has, leave one job type out and leave one model out
    those of a new type (a new batch size of a known network, a network never paired)."""
    results = [held_out(pairs, d, protocol, config) for protocol in PROTOCOLS if len(dataset.pairs) >= 3]
    deltas, levels = [], []
    a_of, b_of = pairs.pair_types(d)
    for r in results:
        t_a, t_b = dataset.solo_times([pairs.types[i] for i in a_of[r.pair]]), dataset.solo_times(
            [pairs.types[i] for i in b_of[r.pair]])
        deltas.append(np.log(dataset.pairs["delta"].to_numpy(dtype=float)[r.pair])
                      - np.log(delta_of(t_a, t_b, r.ratio_a, r.ratio_b)))
        levels.append(np.maximum(r.level_a, r.level_b))  # a pair is as uncertain as its least-known member
    delta = Calibration.from_arrays(np.concatenate(deltas) if deltas else np.zeros(0),
                                    np.concatenate(levels) if levels else np.zeros(0, dtype=int), config.level,
                                    len(LEVELS))
    return Calibrations(ratio_calibration(pairs, d, results, config.level), delta)


def predict_datasets(datasets: Sequence[PairDataset], config: PredictorConfig = DEFAULT_PREDICTOR, *,
                     only: Sequence[str] | None = None) -> pd.DataFrame:
    """Every unordered pair of each dataset's job types (of the datasets keyed in ``only``, default all):
    measured values where measured, predictions with their intervals elsewhere; every dataset is evidence.

    ``source`` is ``measured`` (ok), ``measured-infeasible`` (ratios 0) or ``predicted``; failed/skipped
    pairs are predicted. ``evidence`` names the closest evidence a prediction had (:data:`LEVELS`). Needs at
    least two measured pairs per dataset to learn from (three to calibrate intervals).
    """
    from threadpoolctl import threadpool_limits

    for dataset in datasets:
        if len(dataset.pairs) < 2 and (only is None or dataset.key in only):
            raise InputError(f"{dataset.name}: {len(dataset.pairs)} measured pair(s); the predictor needs at least 2",
                             source=dataset.source, field="pairs", valid="a campaign with group_sizes including 2")
    pairs = pair_set(datasets)
    mask = np.ones(len(pairs), dtype=bool)
    evidence = Evidence(pairs, mask)
    tables = []
    with threadpool_limits(limits=1, user_api="blas"):
        for d, dataset in enumerate(datasets):
            if only is None or dataset.key in only:
                tables.append(_fill(pairs, evidence, mask, d, dataset, config))
    return pd.concat(tables, ignore_index=True)


def predict_dataset(dataset: PairDataset, config: PredictorConfig = DEFAULT_PREDICTOR) -> pd.DataFrame:
    """:func:`predict_datasets` of one dataset alone."""
    return predict_datasets([dataset], config)


def _fill(pairs: PairSet, evidence: Evidence, mask: np.ndarray, d: int, dataset: PairDataset,
          config: PredictorConfig) -> pd.DataFrame:
    types = sort_job_types(dataset.job_types)
    measured = {(r.type_a, r.type_b): r for r in dataset.pairs.itertuples(index=False)}
    infeasible = {(r.type_a, r.type_b) for r in dataset.infeasible.itertuples(index=False)}
    todo = [(a, b) for i, a in enumerate(types) for b in types[i:] if (a, b) not in measured and (a, b) not in infeasible]
    rows = [{"type_a": a, "type_b": b, "ratio_a": min(r.ratio_a, MAX_RATIO), "ratio_b": min(r.ratio_b, MAX_RATIO),
             "delta": r.delta, "source": "measured", "repeats": r.repeats, "evidence": "measured"}
            for (a, b), r in measured.items()]  # a ratio above the table's bound is noise: capped as colocation-table
    rows += [{"type_a": a, "type_b": b, "ratio_a": 0.0, "ratio_b": 0.0, "delta": 0.0,
              "source": "measured-infeasible", "repeats": 0, "evidence": "measured"} for a, b in infeasible]
    if todo:
        rows += _predicted_rows(pairs, evidence, mask, d, dataset, config, todo)
    table = pd.DataFrame(rows)
    for column in INTERVAL_COLUMNS:
        if column not in table:
            table[column] = math.nan
    table.insert(0, "gpu_type", dataset.gpu_type)
    table.insert(1, "sharing", dataset.sharing)
    order = {t: i for i, t in enumerate(types)}
    return table.sort_values(["type_a", "type_b"], key=lambda s: s.map(order)).reset_index(drop=True)


def _predicted_rows(pairs: PairSet, evidence: Evidence, mask: np.ndarray, d: int, dataset: PairDataset,
                    config: PredictorConfig, todo: list[tuple[str, str]]) -> list[dict]:
    model = Predictor(evidence, d, mask, config)
    a = np.array([pairs.index[t] for t, _ in todo])
    b = np.array([pairs.index[t] for _, t in todo])
    ratios, levels = model.predict(np.concatenate([a, b]), np.concatenate([b, a]))
    n = len(todo)
    ra, rb, la, lb = ratios[:n], ratios[n:], levels[:n], levels[n:]
    t_a, t_b = dataset.solo_times([x for x, _ in todo]), dataset.solo_times([y for _, y in todo])
    delta = delta_of(t_a, t_b, ra, rb)
    columns: dict[str, np.ndarray] = {}
    if len(dataset.pairs) >= 3:
        calibration = calibrate(pairs, dataset, d, config)
        columns["low_a"], columns["high_a"] = calibration.ratios.interval(ra, la)
        columns["low_b"], columns["high_b"] = calibration.ratios.interval(rb, lb)
        for key in ("low_a", "high_a", "low_b", "high_b"):
            columns[key] = np.clip(columns[key], 0.0, MAX_RATIO)
        columns["delta_low"], columns["delta_high"] = calibration.delta.interval(delta, np.maximum(la, lb))
    rows = []
    for k, (x, y) in enumerate(todo):
        row = {"type_a": x, "type_b": y, "ratio_a": ra[k], "ratio_b": rb[k], "delta": delta[k],
               "source": "predicted", "repeats": 0, "evidence": LEVELS[max(la[k], lb[k])]}
        rows.append(row | {key: float(values[k]) for key, values in columns.items()})
    return rows


__all__ = ["INTERVAL_COLUMNS", "SOLO_FEATURES", "Calibrations", "PairDataset", "baseline_features", "calibrate",
           "delta_of", "feature_matrix", "make_datasets", "pair_set", "predict_dataset", "predict_datasets"]
