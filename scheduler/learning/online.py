"""Online learning: measured iteration times become the goodput estimates and colocation ratios of the next round.

The round loop folds every measured iteration time into ``measurements`` (one running mean and a sample count
per application, GPU type, GPU count, batch and partner type; :mod:`scheduler.service.state.store`). From there:

* :class:`LearnedGoodputModel` answers the policy's goodput questions: a measured solo configuration is used
  as measured; an unmeasured one comes from the base model (profiles given to ``serve --profiles``) or, for
  an application nobody profiled, from a Pollux-form prior (:data:`PRIOR`) — both scaled by how far this
  application's measurements on that GPU type (else on any type) sit from them, so one measurement
  calibrates every configuration of the job. It also enforces what the job file allows (GPU types, the
  minimum GPU count): an estimate of None keeps the policy off that configuration. A job that reports its
  gradient statistics (:mod:`scheduler.learning.gradient_noise`) is given the statistical efficiency they
  measure, E(M) = (B_noise + M0) / (B_noise + M), in place of its profile's curve or, unprofiled, of 1: its
  batch is chosen for goodput, not throughput. Until its first report an adaptive job is offered its job file's
  batch M0 only (its GPU count still adapts), as Pollux starts a job at M0 until it has statistics: a batch
  chosen before then would rest on throughput alone (or a curve of another run), and the job's learning rate —
  tuned for M0, scaled by AdaScale only once the job has measured its noise — would not follow it.
* :func:`learned_ratios` turns, for every packed pair measured, each member's co-located iteration time and
  its solo time *measured at the same configuration* into the pair's ratios ``t / t'`` with the sample
  counts behind them (a pair whose solo is not measured yet stays ``pending``); :func:`policy_table`
  folds them into the pair belief (:mod:`scheduler.learning.pairs`: the ``--colocation`` table, then the
  δ predictor, as the prior; shrinkage by sample counts) and plans every pair the round's jobs could form
  by the exploration rule (:mod:`scheduler.learning.explore`; optimistic only in a contended round).
  :func:`learned_table_frame` is the export, in the colocation-table format ``colocate matrix``/``simulate``/
  ``schedule``/``serve --colocation`` read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from scheduler.learning.explore import DEFAULT_EXPLORE, ExploreConfig, contended
from scheduler.learning.gradient_noise import GradientStats
from scheduler.learning.measured import job_type, solo_times
from scheduler.learning.pairs import DEFAULT_PAIRS, PairBelief, PairConfig, chain_priors, table_prior
from scheduler.model.colocation import ColocationTable
from scheduler.model.goodput import EstimateArrays, GoodputEstimate, GoodputModelBase, estimate_arrays
from scheduler.model.jobs import Job
from scheduler.model.step_time import StepTimeModel

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from scheduler.model.configs import Configuration

# Prior step-time model (seconds) for an application with no profile: a small CNN on one GPU. Only its shape
# matters once the job has run once — measurements rescale it (see LearnedGoodputModel.calibration).
PRIOR = StepTimeModel(alpha_c=0.02, beta_c=0.0005, alpha_r=0.005, beta_r=0.002, gamma=1.0)


class JobLimits(Protocol):
    """What learning reads of a job file (:class:`scheduler.service.jobs.jobspec.JobSpec`): where the job may run."""

    @property
    def gpu_types(self) -> tuple[str, ...]: ...

    @property
    def min_gpus(self) -> int: ...


def batch_candidates(spec: JobLimits | None, job: Job) -> list[int]:
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

    def __init__(self, measurements: Sequence[Mapping[str, Any]], specs: Mapping[str, JobLimits],
                 base: GoodputModelBase | None = None, gradients: Mapping[str, GradientStats] | None = None) -> None:
        self.base = base
        self.specs = dict(specs)
        self.gradients = dict(gradients or {})  # job name -> the gradient statistics it reported, smoothed
        self.solo = solo_times(measurements)
        self._calibration: dict[tuple[str, str | None, int | None], float] = {}
        self._measured_apps = {key[0] for key in self.solo}
        self._calibrate()

    def _unmeasured(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                    num_nodes: int) -> float | None:
        if self.base is not None:
            value = self.base.throughput(application, gpu_type, num_gpus, batch_size, num_nodes)
            if value is not None:
                return value
            known = self.base.applications
            if known is not None and application in known:
                return None  # profiled, but not on this type or at this batch: the base model says no
        local = batch_size / num_gpus
        return float(PRIOR.throughput(local, num_gpus, num_nodes))

    def _calibrate(self) -> None:
        """Median ratio measured / unmeasured-model per (application, GPU type, batch), per (application, GPU
        type) and per application.

        The batch level comes first because the model is trusted for how a rate scales with the GPU count, not
        for how it scales with the batch: a job measured at its own batch is scaled from that measurement
        alone, not from a median mixed with other batches' errors (which could make its next GPU look worse
        than the model says, or better)."""
        ratios: dict[tuple[str, str | None, int | None], list[float]] = {}
        for (app, gpu, n, batch), (iter_time, _) in self.solo.items():
            model = self._unmeasured(app, gpu, n, batch, 1)
            if model and iter_time > 0:
                ratio = (batch / iter_time) / model
                for key in ((app, gpu, batch), (app, gpu, None), (app, None, None)):
                    ratios.setdefault(key, []).append(ratio)
        self._calibration = {key: float(np.median(values)) for key, values in ratios.items()}

    def calibration(self, application: str, gpu_type: str, batch_size: int | None = None) -> float:
        """The factor on the unmeasured model's rate: the most specific measured level that exists."""
        for key in ((application, gpu_type, batch_size), (application, gpu_type, None), (application, None, None)):
            if key in self._calibration:
                return self._calibration[key]
        return 1.0

    def measured(self, application: str, gpu_type: str, num_gpus: int, batch_size: int) -> tuple[float, int] | None:
        """(mean iteration time, samples) of a solo configuration, when measured."""
        return self.solo.get((application, gpu_type, num_gpus, batch_size))

    def solo_time(self, application: str, gpu_type: str, num_gpus: int, batch_size: int
                  ) -> tuple[float, str] | None:
        """A solo iteration time and what it rests on: ``measured`` (this configuration ran alone), ``profile``
        (the base model's, calibrated by this application's measurements) or ``prior`` (:data:`PRIOR`, calibrated
        the same way); None where the base model says the job cannot run so."""
        hit = self.measured(application, gpu_type, num_gpus, batch_size)
        if hit is not None and hit[0] > 0:
            return hit[0], "measured"
        rate = self.throughput(application, gpu_type, num_gpus, batch_size)
        if rate is None or not rate > 0:
            return None
        profiled = self.base is not None and self.base.throughput(application, gpu_type, num_gpus, batch_size) is not None
        return batch_size / rate, "profile" if profiled else "prior"

    def throughput(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                   num_nodes: int = 1) -> float | None:
        hit = self.measured(application, gpu_type, num_gpus, batch_size)
        if hit is not None and hit[0] > 0:
            return batch_size / hit[0]
        value = self._unmeasured(application, gpu_type, num_gpus, batch_size, num_nodes)
        return None if value is None else value * self.calibration(application, gpu_type, batch_size)

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        spec = self.specs.get(job.name)
        if spec is not None and ((spec.gpu_types and gpu_type not in spec.gpu_types) or num_gpus < spec.min_gpus):
            return None
        best: GoodputEstimate | None = None
        for batch in self._candidates(spec, job):
            candidate = self.at_batch(job, gpu_type, num_gpus, batch, num_nodes)
            if candidate is not None and (best is None or candidate.goodput > best.goodput):
                best = candidate
        return best

    def at_batch(self, job: Job, gpu_type: str, num_gpus: int, batch: int,
                 num_nodes: int = 1) -> GoodputEstimate | None:
        """The job's estimate at one global batch (None where it cannot run so), whatever batch is best."""
        if batch < num_gpus:
            return None
        tput = self.throughput(job.application, gpu_type, num_gpus, batch, num_nodes)
        if tput is None or tput <= 0:
            return None
        return GoodputEstimate(batch, tput, self.efficiency_at(job, batch))

    def efficiency_at(self, job: Job, batch: int) -> float:
        """The job's statistical efficiency at ``batch``: measured from its reports (M0: its own batch), else its
        profile's curve, else 1."""
        stats = self.gradients.get(job.name)
        if stats is not None:
            return float(stats.efficiency(batch, job.batch_size or batch))
        efficiency = self.base.efficiency(job, batch) if self.base is not None else None
        return float(np.asarray(efficiency).reshape(-1)[0]) if efficiency is not None else 1.0

    def _candidates(self, spec: JobLimits | None, job: Job) -> list[int]:
        """The batches :meth:`estimate` chooses among: before the job's first gradient report its job file's batch
        M0 alone (module docstring); for a profiled job with measured gradient statistics the profile's grid
        (what its arrays would choose among: :meth:`estimate_arrays` comes here for it), else
        :func:`batch_candidates`."""
        if job.name not in self.gradients and job.batch_size:
            return [job.batch_size]
        known = self.base.applications if self.base is not None else None
        if self.base is not None and known is not None and job.application in known and job.name in self.gradients:
            grid = self.base.grid_efficiency(job)
            if grid is not None:
                return [int(b) for b in grid[0]]
        return batch_candidates(spec, job)

    def estimate_arrays(self, job: Job, configs: Sequence[Configuration]) -> EstimateArrays:
        """All configurations at once: the base model's arrays, calibrated, measured points and job limits on top.

        Jobs the base model does not know, and adaptive jobs with measured gradient statistics (the profile's batch
        choice rests on its own efficiency curve), take the per-configuration path (:meth:`estimate`); an adaptive
        job before its first report is held at its job file's batch, which the base model's arrays answer as for a
        rigid job (the same figures as the per-configuration path, at a fifth of its cost).
        """
        known = self.base.applications if self.base is not None else None
        asked = job
        held = job.adaptive and job.name not in self.gradients and bool(job.batch_size)
        if held:  # M0 until its first report: the profile's arrays at that one batch, as a rigid job's
            job = replace(job, adaptive=False)
        if (self.base is None or known is None or job.application not in known or job.adaptive
                or job.name in self.gradients):
            return super().estimate_arrays(asked, configs)
        configs = configs if isinstance(configs, tuple) else tuple(configs)
        arrays = estimate_arrays(self.base, job, configs)
        batch = arrays.batch_size
        if held and np.any((batch > 0) & (batch != job.batch_size)):  # a base model that resizes rigid jobs
            return super().estimate_arrays(asked, configs)
        factor = np.array([self.calibration(job.application, c.gpu_type, int(batch[i]) if batch[i] > 0 else None)
                           for i, c in enumerate(configs)])
        throughput = arrays.throughput * factor
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
        if held:  # as :meth:`at_batch`: a batch is split over at most as many GPUs as it has samples
            throughput = np.where(np.array([c.num_gpus for c in configs]) > batch, np.nan, throughput)
        goodput = throughput * arrays.efficiency
        return EstimateArrays(goodput, np.where(np.isnan(goodput), np.nan, batch), throughput, arrays.efficiency)


def pair_belief(base: ColocationTable | None, rows: Sequence[Mapping[str, Any]], *, predicted: bool = True,
                config: PairConfig = DEFAULT_PAIRS, explore: ExploreConfig = DEFAULT_EXPLORE) -> PairBelief:
    """The belief of a round: the user's table, then the δ predictor (``predicted``) as the prior; every
    measured row (``learned_ratios``; pending rows are skipped) folded in with its sample count."""
    prior = table_prior(base)
    if predicted:  # the predictor's answer comes with its calibrated interval: wide for a type it never saw
        prior = chain_priors(prior, _predicted_prior(base))
    belief = PairBelief(prior, config, explore)
    for r in rows:
        if r["solo_source"] == "measured":
            belief.observe(r["gpu_type"], r["type_a"], r["type_b"], r["ratio_a"], r["ratio_b"],
                           min(int(r["n_a"]), int(r["n_b"])))
    return belief


_PRIORS: dict[int, tuple[ColocationTable | None, Any]] = {}  # id(base table) -> (the table, its fitted prior)


def _predicted_prior(base: ColocationTable | None) -> Any:
    """The δ predictor fitted on the shipped pairs and ``base`` (fitted once per base table: ~1 s)."""
    hit = _PRIORS.get(id(base))
    if hit is None or hit[0] is not base:
        from scheduler.learning.predictor.prior import build_prior, table_frame

        if len(_PRIORS) > 8:
            _PRIORS.clear()
        hit = _PRIORS[id(base)] = (base, build_prior(table_frame(base) if base is not None else None))
    return hit[1]


def policy_table(base: ColocationTable | None, rows: Sequence[Mapping[str, Any]],
                 job_types: Mapping[str, Iterable[str]] | None = None, *, predicted: bool = True,
                 explore: ExploreConfig = DEFAULT_EXPLORE, demands: Iterable[int] | None = None,
                 gpus: int = 0) -> ColocationTable | None:
    """The table the next round reads: every pair of the waiting and running ``job_types`` (per GPU type) and
    every measured pair, planned by the exploration rule over the belief (prior + measurements, shrunk).
    ``demands`` (each active job's GPU count, ``min_gpus``) on ``gpus`` GPUs: optimistic only when the round
    is contended (:func:`scheduler.learning.explore.contended`, as in the simulator); None: always.

    With nothing measured and no job types asked about, the base table itself (the same object every round:
    the policy's per-table caches stay warm).
    """
    measured = [r for r in rows if r["solo_source"] == "measured"]
    if not measured and not job_types:
        return base
    belief = pair_belief(base, measured, predicted=predicted, explore=explore)
    busy = demands is None or contended(demands, gpus, explore)
    return belief.planning_table(job_types or {}, busy)


def round_job_types(gpu_types: Iterable[str], jobs: Iterable[tuple[str, int | None]]) -> dict[str, list[str]]:
    """The job types a round plans pairs for: every (application, batch) as ``app@batch`` and the
    application itself (adaptive jobs are looked up by application), on every GPU type."""
    types = sorted({t for app, batch in jobs for t in ((app, job_type(app, batch)) if batch else (app,))})
    return {gpu: types for gpu in gpu_types}


def learned_table_frame(rows: Sequence[Mapping[str, Any]], config: PairConfig = DEFAULT_PAIRS) -> "pd.DataFrame":
    """The learned ratios in the colocation-table format, one row per (GPU type, pair) — what
    ``--colocation`` reads back: sample-weighted (log) means over GPU counts, bounded, pending rows left
    out; extra columns: samples ``n`` and the interval of each ratio."""
    import pandas as pd

    belief = PairBelief(None, config)
    for r in rows:
        if r["solo_source"] == "measured":
            belief.observe(r["gpu_type"], r["type_a"], r["type_b"], r["ratio_a"], r["ratio_b"],
                           min(int(r["n_a"]), int(r["n_b"])))
    measured = [r for r in belief.measured_rows() if "@" in r["type_a"] or "@" in r["type_b"]]
    frame = pd.DataFrame(measured, columns=["gpu_type", "type_a", "type_b", "measured_a", "measured_b", "n",
                                            "low_a", "high_a", "low_b", "high_b"])
    frame = frame.rename(columns={"measured_a": "ratio_a", "measured_b": "ratio_b"})
    frame["interval_level"] = belief.explore.level
    frame["source"] = "measured"
    return frame
