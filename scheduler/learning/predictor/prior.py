"""The δ predictor as the scheduler's prior: fitted on colocation tables, a ratio and an interval for every pair.

The model (:mod:`scheduler.learning.predictor.ratio_model`, weighing the evidence of :mod:`scheduler.learning.predictor.evidence`)
sees here only what a colocation table holds: job types and measured ratios per GPU type, no solo features.
Each GPU type's rows are one dataset, and every GPU type is evidence for the others (the same pair measured on
another GPU type, with a learned transfer factor); job types of one model at other batch sizes are evidence
for each other; a job type's partners give its sensitivity and pressure.

:class:`TablePrior` fits it on the measured pairs the project ships (:func:`default_training_frame`) plus any
table the user gives (:func:`build_prior`, ``colocate serve``) and answers for every pair with a
:class:`~scheduler.learning.pairs.PriorAnswer`: the ratios and their intervals, calibrated by split conformal
on the model's own held-out predictions on the same tables (:mod:`scheduler.learning.predictor.folds`; K-fold over
pairs for the levels a known job type has, leave one job type out and leave one model out for a type it never
saw). A job type it never saw is predicted with no job effects (its own model's pairs at other batches where
there are some; for a model never paired, the mixture of measured types of
:mod:`scheduler.learning.predictor.new_model` — with no solo features in a table, every measured type alike)
and a wide interval; a GPU type it never saw, by the model fitted over all GPU types pooled.

:func:`leave_pair_out_table` predicts every pair of a table from the table's other pairs, the pair held out
of *every* GPU type (nobody in that cluster measured it: the simulator's ``--belief predicted``), each with
its interval from the other pairs' held-out residuals.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pandas as pd

from scheduler.formats.colocation_table import MAX_RATIO
from scheduler.learning.pairs import PriorAnswer, application
from scheduler.learning.predictor.config import PredictorConfig
from scheduler.learning.predictor.conformal import Calibration, cross_conformal
from scheduler.learning.predictor.evidence import LEVELS, UNKNOWN, Dataset, Evidence, PairSet, Predictor
from scheduler.learning.predictor.folds import held_out, ratio_calibration
from scheduler.model.colocation import ColocationTable

TABLE_COLUMNS = ["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b"]
POOLED = "*"  # the dataset of every GPU type's rows together: the answer for a GPU type no table has
CALIBRATION_FOLDS = 10  # K-fold over pairs when the prior calibrates at start-up (leave-one-out is for reports)


def table_datasets(frame: pd.DataFrame) -> list[Dataset]:
    """One dataset per GPU type of a colocation-table frame (feasible rows; ratios capped at the table's bound),
    each with the unknown type :data:`UNKNOWN` as a member (no pairs: no job effects)."""
    ok = frame[(frame["ratio_a"] > 0) & (frame["ratio_b"] > 0)]
    out = []
    for gpu, rows in ok.groupby("gpu_type", sort=True):
        rows = rows[["type_a", "type_b", "ratio_a", "ratio_b"]].reset_index(drop=True)
        rows[["ratio_a", "ratio_b"]] = rows[["ratio_a", "ratio_b"]].clip(upper=MAX_RATIO)
        types = list(dict.fromkeys([*rows["type_a"], *rows["type_b"], UNKNOWN]))
        out.append(Dataset(str(gpu), rows, pd.DataFrame(index=types)))
    return out


class _Fitted:
    """One pair set's predictor per dataset and its calibration, made on first use."""

    def __init__(self, datasets: Sequence[Dataset], config: PredictorConfig) -> None:
        self.pairs = PairSet(datasets)
        self.config = config
        self.mask = np.ones(len(self.pairs), dtype=bool)
        self.evidence = Evidence(self.pairs, self.mask)
        self.models: dict[int, Predictor] = {}
        self.calibrations: dict[int, Calibration] = {}
        self.members = [set(d.pairs["type_a"]) | set(d.pairs["type_b"]) | {UNKNOWN} for d in datasets]

    def index(self, d: int, job_type: str) -> int:
        """The type a query is answered as: itself, else its application, else the unknown type."""
        for name in (job_type, application(job_type)):
            if name in self.members[d]:
                return self.pairs.index[name]
        return self.pairs.index[UNKNOWN]

    def answer(self, d: int, a: str, b: str) -> PriorAnswer:
        if d not in self.models:
            self.models[d] = Predictor(self.evidence, d, self.mask, self.config)
        va, vb = self.index(d, a), self.index(d, b)
        ratios, levels = self.models[d].predict(np.array([va, vb]), np.array([vb, va]))
        ra, rb = float(ratios[0]), float(ratios[1])
        if a == b:  # the same type twice: one value, whichever order was asked
            ra = rb = float(np.sqrt(ra * rb))
        calibration = self.calibration(d)
        if calibration.size == 0:
            return PriorAnswer(ra, rb)
        (la, lb), (ha, hb) = calibration.interval(np.array([ra, rb]), levels)
        return PriorAnswer(ra, rb, (float(la), float(ha)), (float(lb), float(hb)), self.config.level)

    def calibration(self, d: int) -> Calibration:
        hit = self.calibrations.get(d)
        if hit is None:
            n_pairs = int((self.pairs.dataset == d).sum() // 2)
            results = [held_out(self.pairs, d, "pair", self.config, groups=CALIBRATION_FOLDS),
                       held_out(self.pairs, d, "type", self.config),
                       held_out(self.pairs, d, "model", self.config)] if n_pairs >= 3 else []
            hit = self.calibrations[d] = ratio_calibration(self.pairs, d, results, self.config.level)
        return hit


class TablePrior:
    """The model fitted per GPU type on table rows (and once over all rows pooled, for a GPU type no table has).

    Called as ``prior(gpu, a, b)`` it returns a :class:`~scheduler.learning.pairs.PriorAnswer`: the predicted
    ``(r_a, r_b)`` and their calibrated intervals; it answers for every pair.
    """

    def __init__(self, frame: pd.DataFrame, config: PredictorConfig | None = None) -> None:
        self.config = config or PredictorConfig()
        datasets = table_datasets(frame)
        self.gpu_types = [d.name for d in datasets]
        self.fitted = _Fitted(datasets, self.config) if datasets else None
        pooled = table_datasets(frame.assign(gpu_type=POOLED)) if len(frame) else []
        self.pooled = _Fitted(pooled, self.config) if pooled else None
        self._answers: dict[tuple[str, str, str], PriorAnswer] = {}

    def __call__(self, gpu: str, a: str, b: str) -> PriorAnswer:
        hit = self._answers.get((gpu, a, b))
        if hit is None:
            if gpu in self.gpu_types and self.fitted is not None:
                hit = self.fitted.answer(self.gpu_types.index(gpu), a, b)
            elif self.pooled is not None:
                hit = self.pooled.answer(0, a, b)
            else:
                hit = PriorAnswer(0.5, 0.5)
            if len(self._answers) > 65536:
                self._answers.clear()
            self._answers[(gpu, a, b)] = hit
        return hit


def fit_table_prior(frame: pd.DataFrame, config: PredictorConfig | None = None) -> TablePrior:
    """The prior fitted on the feasible rows of a colocation-table frame (infeasible rows, ratio 0, are facts of
    memory, not of interference, and are left out)."""
    return TablePrior(frame[TABLE_COLUMNS], config)


def table_frame(table: ColocationTable) -> pd.DataFrame:
    """A :class:`ColocationTable` back as rows, one per unordered pair."""
    rows = {}
    for (gpu, a, b), (ra, rb) in table.ratios.items():
        if (gpu, b, a) not in rows:
            rows[(gpu, a, b)] = (gpu, a, b, ra, rb)
    return pd.DataFrame(list(rows.values()), columns=TABLE_COLUMNS)


@lru_cache(maxsize=1)
def default_training_frame() -> pd.DataFrame:
    """The measured pairs the project ships: Gavel's K80/P100/V100 pairs and the bundled table derived from them."""
    from scheduler.formats.bundled import default_colocation, gavel_throughputs
    from scheduler.formats.colocation_table import read_colocation_table
    from scheduler.formats.transfer import read_gavel_pairs

    bundled = read_colocation_table(default_colocation())[TABLE_COLUMNS]
    gavel = {}
    for (gpu, a, b), (ra, rb) in read_gavel_pairs(gavel_throughputs()).items():
        a, b = _gavel_type(a), _gavel_type(b)
        if (gpu, b, a) not in gavel:
            gavel[(gpu, a, b)] = (gpu, a, b, min(ra, MAX_RATIO), min(rb, MAX_RATIO))
    return pd.concat([bundled, pd.DataFrame(list(gavel.values()), columns=TABLE_COLUMNS)], ignore_index=True)


def _gavel_type(name: str) -> str:
    """Gavel's ``ResNet-18 (batch size 64)`` as a job type, ``ResNet-18@64``."""
    model, _, rest = name.partition(" (batch size ")
    return f"{model}@{rest.rstrip(')')}" if rest else model


def build_prior(user: pd.DataFrame | None = None, config: PredictorConfig | None = None) -> TablePrior:
    """The serve prior: fitted on the shipped measured pairs plus the user's table (``--colocation``). The
    shipped bundled table's GPU types that the user's table also has are the user's (a measured table wins)."""
    frame = default_training_frame()
    if user is not None and len(user):
        frame = pd.concat([frame[~frame["gpu_type"].isin(set(user["gpu_type"]))], user[TABLE_COLUMNS]],
                          ignore_index=True)
    return fit_table_prior(frame, config)


def leave_pair_out_table(table: ColocationTable, config: PredictorConfig | None = None) -> ColocationTable:
    """Every pair of ``table`` predicted from the table's other pairs, the pair held out of every GPU type, with
    its interval from the other pairs' held-out residuals (cross-conformal, per GPU type and evidence level).

    Infeasible pairs (a ratio of 0) stay infeasible: that is memory, which the scheduler knows without trying.
    GPU types whose rows are identical (a table transferred to several types) are one dataset.
    """
    config = config or PredictorConfig()
    frame = table_frame(table)
    datasets: list[Dataset] = []
    copies: dict[str, int] = {}
    for dataset in table_datasets(frame):
        twin = next((k for k, other in enumerate(datasets) if other.pairs.equals(dataset.pairs)), None)
        if twin is None:
            datasets.append(dataset)
            twin = len(datasets) - 1
        copies[dataset.name] = twin
    pairs = PairSet(datasets) if datasets else None
    predicted: dict[int, dict[tuple[str, str], tuple]] = {}
    for d in range(len(datasets)):
        predicted[d] = _held_out_rows(pairs, d, config) if pairs is not None else {}
    ratios: dict[tuple[str, str, str], tuple[float, float]] = {}
    intervals = []
    for row in frame.itertuples(index=False):
        hit = predicted.get(copies.get(row.gpu_type, -1), {}).get((row.type_a, row.type_b))
        if row.ratio_a <= 0 or row.ratio_b <= 0 or hit is None:
            ratios[(row.gpu_type, row.type_a, row.type_b)] = (0.0, 0.0) if row.ratio_a <= 0 or row.ratio_b <= 0 \
                else (row.ratio_a, row.ratio_b)
            continue
        ratios[(row.gpu_type, row.type_a, row.type_b)] = hit[:2]
        intervals.append((row.gpu_type, row.type_a, row.type_b, hit[2], hit[3]))
    both = {**ratios, **{(g, b, a): (rb, ra) for (g, a, b), (ra, rb) in ratios.items()}}
    return ColocationTable.with_intervals(both, intervals, config.level)


def _held_out_rows(pairs: PairSet, d: int, config: PredictorConfig) -> dict[tuple[str, str], tuple]:
    """(type_a, type_b) → (r_a, r_b, interval_a, interval_b) of every pair of dataset ``d`` held out everywhere."""
    result = held_out(pairs, d, "pair", config, everywhere=True)
    a_of, b_of = pairs.pair_types(d)
    truth_a, truth_b = pairs.pair_ratios(d)
    n = len(result.pair)
    predicted = np.concatenate([result.ratio_a, result.ratio_b])
    truth = np.concatenate([truth_a[result.pair], truth_b[result.pair]])
    levels = np.concatenate([result.level_a, result.level_b])
    folds = np.concatenate([result.fold, result.fold])
    low, high = cross_conformal(predicted, truth, levels, folds, config.level, len(LEVELS))
    out = {}
    for k, p in enumerate(result.pair):
        a, b = pairs.types[a_of[p]], pairs.types[b_of[p]]
        ra, rb = float(result.ratio_a[k]), float(result.ratio_b[k])
        (la, ha), (lb, hb) = (low[k], high[k]), (low[n + k], high[n + k])
        if a == b:  # the same type twice: one value (the table's own convention)
            ra = rb = float(np.sqrt(ra * rb))
        out[(a, b)] = (ra, rb, (float(la), float(ha)), (float(lb), float(hb)))
    return out


__all__ = ["POOLED", "TABLE_COLUMNS", "TablePrior", "build_prior", "default_training_frame", "fit_table_prior",
           "leave_pair_out_table", "table_datasets", "table_frame"]
