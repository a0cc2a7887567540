"""Online learning: measured iteration times become the goodput estimates and colocation ratios of the next round.

The round loop folds every measured iteration time into ``measurements`` (one running mean and a sample count
per application, GPU type, GPU count, batch and partner type; :mod:`scheduler.service.state`). From there:

* :class:`LearnedGoodputModel` answers the policy's goodput questions: a measured solo configuration is used
  as measured; an unmeasured one comes from the base model (profiles given to ``serve --profiles``) or, for
  an application nobody profiled, from a Pollux-form prior (:data:`PRIOR`) — both scaled by how far this
  application's measurements on that GPU type (else on any type) sit from them, so one measurement
  calibrates every configuration of the job. It also enforces what the job file allows (GPU types, the
  minimum GPU count): an estimate of None keeps the policy off that configuration.
* :func:`learned_ratios` turns, for every packed pair measured, each member's co-located iteration time and
  its solo time (measured at the same configuration, else the model's) into the pair's ratios
  ``t / t'`` with the sample counts behind them; :func:`policy_table` lays them over the ``--colocation``
  table (measurements win) and adds per-application rows (sample-weighted means) so a pair measured at one
  batch size informs the others. :func:`learned_table_frame` is the export, in the colocation-table format
  ``colocate matrix``/``simulate``/``schedule --colocation`` read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from scheduler.model.colocation import ColocationTable
from scheduler.model.goodput import (
    EstimateArrays,
    GoodputEstimate,
    GoodputModel,
    GoodputModelBase,
    StepTimeModel,
    estimate_arrays,
)
from scheduler.model.jobs import Job
from scheduler.service.jobspec import JobSpec

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from scheduler.model.configs import Configuration

# Prior step-time model (seconds) for an application with no profile: a small CNN on one GPU. Only its shape
# matters once the job has run once — measurements rescale it (see LearnedGoodputModel.calibration).
PRIOR = StepTimeModel(alpha_c=0.02, beta_c=0.0005, alpha_r=0.005, beta_r=0.002, gamma=1.0)


def job_type(application: str, batch_size: int) -> str:
    """The colocation-table key of an application at a global batch size."""
    return f"{application}@{batch_size}"


def batch_candidates(spec: JobSpec | None, job: Job) -> list[int]:
    """Global batch sizes the policy may give a job: its own (rigid), or powers of two within its bounds."""
    batch = job.batch_size or 32
    if not job.adaptive:
        return [batch]
    low = job.min_batch_size or batch
    high = job.max_batch_size or batch
    values = {low, high, batch}
    size = 1
    while size <= high:
        if size >= low:
            values.add(size)
        size *= 2
    return sorted(values)


class LearnedGoodputModel(GoodputModelBase):
    """Goodput from measurements first, then the base model or the prior, calibrated by the measurements."""

    def __init__(self, measurements: Sequence[Mapping[str, Any]], specs: Mapping[str, JobSpec],
                 base: GoodputModel | None = None) -> None:
        self.base = base
        self.specs = dict(specs)
        self.solo: dict[tuple[str, str, int, int], tuple[float, int]] = {}
        for m in measurements:
            if not m["partner_type"]:
                self.solo[(m["application"], m["gpu_type"], int(m["num_gpus"]), int(m["batch_size"]))] = (
                    float(m["iter_time_s"]), int(m["count"]))
        self._calibration: dict[tuple[str, str | None], float] = {}
        self._measured_apps = {key[0] for key in self.solo}
        self._calibrate()

    def _unmeasured(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                    num_nodes: int) -> float | None:
        if self.base is not None:
            value = self.base.throughput(application, gpu_type, num_gpus, batch_size, num_nodes)
            if value is not None:
                return value
            known = getattr(self.base, "applications", None)
            if known is not None and application in known:
                return None  # profiled, but not on this type or at this batch: the base model says no
        local = batch_size / num_gpus
        return float(PRIOR.throughput(local, num_gpus, num_nodes))

    def _calibrate(self) -> None:
        """Median ratio measured / unmeasured-model per (application, GPU type) and per application."""
        ratios: dict[tuple[str, str | None], list[float]] = {}
        for (app, gpu, n, batch), (iter_time, _) in self.solo.items():
            model = self._unmeasured(app, gpu, n, batch, 1)
            if model and iter_time > 0:
                ratio = (batch / iter_time) / model
                ratios.setdefault((app, gpu), []).append(ratio)
                ratios.setdefault((app, None), []).append(ratio)
        self._calibration = {key: float(np.median(values)) for key, values in ratios.items()}

    def calibration(self, application: str, gpu_type: str) -> float:
        return self._calibration.get((application, gpu_type), self._calibration.get((application, None), 1.0))

    def measured(self, application: str, gpu_type: str, num_gpus: int, batch_size: int) -> tuple[float, int] | None:
        """(mean iteration time, samples) of a solo configuration, when measured."""
        return self.solo.get((application, gpu_type, num_gpus, batch_size))

    def throughput(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                   num_nodes: int = 1) -> float | None:
        hit = self.measured(application, gpu_type, num_gpus, batch_size)
        if hit is not None and hit[0] > 0:
            return batch_size / hit[0]
        value = self._unmeasured(application, gpu_type, num_gpus, batch_size, num_nodes)
        return None if value is None else value * self.calibration(application, gpu_type)

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        spec = self.specs.get(job.name)
        if spec is not None and ((spec.gpu_types and gpu_type not in spec.gpu_types) or num_gpus < spec.min_gpus):
            return None
        best: GoodputEstimate | None = None
        efficiency = getattr(self.base, "efficiency", None)
        for batch in batch_candidates(spec, job):
            if batch < num_gpus:
                continue
            tput = self.throughput(job.application, gpu_type, num_gpus, batch, num_nodes)
            if tput is None or tput <= 0:
                continue
            eff = float(efficiency(job, batch)) if efficiency is not None else 1.0
            candidate = GoodputEstimate(batch, tput, eff)
            if best is None or candidate.goodput > best.goodput:
                best = candidate
        return best


    def estimate_arrays(self, job: Job, configs: Sequence[Configuration]) -> EstimateArrays:
        """All configurations at once: the base model's arrays, calibrated, measured points and job limits on top.

        Jobs the base model does not know take the per-configuration path (:meth:`estimate`).
        """
        known = getattr(self.base, "applications", None)
        if self.base is None or known is None or job.application not in known:
            return super().estimate_arrays(job, configs)
        configs = configs if isinstance(configs, tuple) else tuple(configs)
        arrays = estimate_arrays(self.base, job, configs)
        factor = np.array([self.calibration(job.application, c.gpu_type) for c in configs])
        throughput, batch = arrays.throughput * factor, arrays.batch_size
        if job.application in self._measured_apps:
            for i, c in enumerate(configs):
                hit = self.measured(job.application, c.gpu_type, c.num_gpus, int(batch[i])) if batch[i] > 0 else None
                if hit is not None and hit[0] > 0:
                    throughput[i] = batch[i] / hit[0]
        spec = self.specs.get(job.name)
        if spec is not None:
            banned = np.array([(bool(spec.gpu_types) and c.gpu_type not in spec.gpu_types) or c.num_gpus < spec.min_gpus
                               for c in configs], dtype=bool)
            throughput = np.where(banned, np.nan, throughput)
        goodput = throughput * arrays.efficiency
        return EstimateArrays(goodput, np.where(np.isnan(goodput), np.nan, batch), throughput, arrays.efficiency)


def learned_ratios(measurements: Sequence[Mapping[str, Any]], model: LearnedGoodputModel) -> list[dict[str, Any]]:
    """One row per measured pair: ratios ``t/t'`` of both members, their sample counts and solo sources."""
    coloc = {(m["application"], m["gpu_type"], int(m["num_gpus"]), int(m["batch_size"]), m["partner_type"]): m
             for m in measurements if m["partner_type"] and "+" not in m["partner_type"]}  # pairs (the table's rows)
    rows: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for (app, gpu, n, batch, partner_type), m in coloc.items():
        me = job_type(app, batch)
        partner_app, _, partner_batch = partner_type.rpartition("@")
        other = coloc.get((partner_app, gpu, n, int(partner_batch), me))
        if other is None or (gpu, partner_type, me, n) in rows:
            continue  # the partner's side is not measured yet, or this pair is already done
        ratio_a, source_a = _ratio(model, app, gpu, n, batch, float(m["iter_time_s"]))
        ratio_b, source_b = _ratio(model, partner_app, gpu, n, int(partner_batch), float(other["iter_time_s"]))
        rows[(gpu, me, partner_type, n)] = {
            "gpu_type": gpu, "type_a": me, "type_b": partner_type, "num_gpus": n,
            "ratio_a": ratio_a, "ratio_b": ratio_b, "n_a": int(m["count"]), "n_b": int(other["count"]),
            "solo_source": "measured" if source_a and source_b else "model"}
    return list(rows.values())


def _ratio(model: LearnedGoodputModel, app: str, gpu: str, n: int, batch: int, coloc_time: float) -> tuple[float, bool]:
    hit = model.measured(app, gpu, n, batch)
    if hit is not None:
        return hit[0] / coloc_time, True
    tput = model.throughput(app, gpu, n, batch)
    return ((batch / tput) / coloc_time if tput else 0.0), False


def _application_rows(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, float, float]]:
    """Sample-weighted mean ratios per (GPU type, application pair)."""
    sums: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        a, b = r["type_a"].rpartition("@")[0], r["type_b"].rpartition("@")[0]
        acc = sums.setdefault((r["gpu_type"], a, b), [0.0, 0.0, 0.0, 0.0])
        acc[0] += r["ratio_a"] * r["n_a"]
        acc[1] += r["n_a"]
        acc[2] += r["ratio_b"] * r["n_b"]
        acc[3] += r["n_b"]
    return [(gpu, a, b, acc[0] / acc[1], acc[2] / acc[3]) for (gpu, a, b), acc in sums.items() if acc[1] and acc[3]]


def policy_table(base: ColocationTable | None, rows: Sequence[Mapping[str, Any]]) -> ColocationTable | None:
    """The table the next round reads: the base table with learned pair rows (exact and per application) on top."""
    if not rows:
        return base  # the same object every round: the policy's per-table caches stay warm
    merged: dict[tuple[str, str, str], tuple[float, float]] = dict(base.ratios) if base is not None else {}
    learned = ColocationTable.from_rows(
        [*_application_rows(rows), *((r["gpu_type"], r["type_a"], r["type_b"], r["ratio_a"], r["ratio_b"]) for r in rows)])
    merged.update(learned.ratios)
    if not merged:
        return base
    return ColocationTable(merged)


def learned_table_frame(rows: Sequence[Mapping[str, Any]]) -> "pd.DataFrame":
    """The learned ratios in the colocation-table CSV format (extra columns: GPU count, samples, solo source)."""
    import pandas as pd

    columns = ["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b", "num_gpus", "n_a", "n_b", "solo_source"]
    frame = pd.DataFrame(list(rows), columns=columns)
    frame["n"] = frame[["n_a", "n_b"]].min(axis=1) if len(frame) else pd.Series(dtype=int)
    frame["source"] = "measured"
    return frame
