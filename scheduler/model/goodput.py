"""Goodput: what a job achieves on a configuration = throughput × statistical efficiency (Pollux, OSDI'21).

This module defines the interface policies and the simulator call (:class:`GoodputModel`,
:class:`GoodputEstimate`) and two implementations: :class:`ProfileGoodputModel` (measured profiles, a
Pollux-form fitted step-time model, statistical efficiency from gradient-noise curves, Sia's 1-GPU
bootstrap for new GPU types) and :class:`TableGoodputModel` (an explicit table, for tests and examples).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from scheduler.model.efficiency import ValidationCurves, statistical_efficiency
from scheduler.model.jobs import Job
from scheduler.model.step_time import StepTimeModel, StepTimes

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from scheduler.model.configs import Configuration
    from scheduler.model.efficiency import GnsCurve


@dataclass(frozen=True)
class GoodputEstimate:
    """A job's best (adaptive) or fixed (rigid) operating point on one configuration.

    ``throughput`` in samples/s, ``efficiency`` in (0, 1], ``goodput = throughput × efficiency``
    (statistically useful samples/s). ``batch_size`` is the global batch.
    """

    batch_size: int
    throughput: float
    efficiency: float = 1.0

    @property
    def goodput(self) -> float:
        return self.throughput * self.efficiency


@runtime_checkable
class GoodputModel(Protocol):
    """Answers "how fast does this job go on N GPUs of type T over K nodes?"."""

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        """Best batch size for adaptive jobs (within their limits), the job's own batch for rigid ones.

        None when the job cannot run there (no profile for the application/type, or the batch does not fit).
        """
        ...

    def throughput(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                   num_nodes: int = 1) -> float | None:
        """Samples/s at a given global batch size, or None when unknown."""
        ...


# --------------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EstimateArrays:
    """Estimates for many configurations at once as arrays (NaN where the job cannot run)."""

    goodput: "np.ndarray"
    batch_size: "np.ndarray"
    throughput: "np.ndarray"
    efficiency: "np.ndarray"

    @classmethod
    def empty(cls, n: int) -> "EstimateArrays":
        nan = np.full(n, np.nan)
        return cls(nan, nan.copy(), nan.copy(), nan.copy())

    @classmethod
    def from_list(cls, estimates: "Sequence[GoodputEstimate | None]") -> "EstimateArrays":
        def col(f):
            return np.array([np.nan if e is None else f(e) for e in estimates], dtype=float)

        return cls(col(lambda e: e.goodput), col(lambda e: e.batch_size), col(lambda e: e.throughput),
                   col(lambda e: e.efficiency))

    def at(self, i: int) -> GoodputEstimate | None:
        if not (self.goodput[i] > 0):
            return None
        return GoodputEstimate(int(self.batch_size[i]), float(self.throughput[i]), float(self.efficiency[i]))

    def to_list(self) -> list[GoodputEstimate | None]:
        return [self.at(i) for i in range(len(self.goodput))]

    @cached_property
    def estimates(self) -> "tuple[GoodputEstimate | None, ...]":
        """:meth:`to_list`, built once: models hand back the same (read-only) arrays round after round."""
        return tuple(self.to_list())


class GoodputModelBase:
    """Base of every goodput model: the bulk estimates in terms of each other, and the optional capabilities a
    caller may ask of any model. Each capability answers "unknown" here (no curves, no batch limits, any
    application); a profile model answers them, a wrapper forwards them (:class:`GoodputWrapper`)."""

    curves: "Mapping[str, GnsCurve]" = MappingProxyType({})  # gradient-noise curves per application
    validation: "Mapping[str, ValidationCurves]" = MappingProxyType({})  # Sia's curves per application
    steps: StepTimes | None = None  # the true step times the model reads (a profile model's)

    @property
    def applications(self) -> set[str] | None:
        """The applications the model knows (None: it answers for any)."""
        return None

    def gpu_types(self, application: str) -> set[str] | None:
        """The GPU types the model has profiles of for ``application`` (None: unknown)."""
        return None

    def local_batch_range(self, application: str, gpu_type: str) -> tuple[float, float] | None:
        """The smallest and largest local batch profiled (memory bounds the largest), or None."""
        return None

    def efficiency(self, job: Job, batch_size: "np.ndarray | float") -> "np.ndarray | None":
        """The job's statistical efficiency at each global batch, or None when the model has no curves."""
        return None

    def grid_efficiency(self, job: Job) -> "tuple[np.ndarray, np.ndarray] | None":
        """The global batches an estimate chooses among for ``job`` and the efficiency at each, or None."""
        return None

    def throughput(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                   num_nodes: int = 1) -> float | None:
        """Samples/s at a given global batch size, or None when unknown."""
        return None

    def estimate_arrays(self, job: Job, configs: "Sequence[Configuration]") -> EstimateArrays:
        """All configurations at once (the ILP calls this once per job); override for speed."""
        return EstimateArrays.from_list(self.estimate_many(job, configs))

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        from scheduler.model.configs import Configuration

        return self.estimate_many(job, [Configuration(gpu_type, num_nodes, num_gpus)])[0]

    def estimate_many(self, job: Job, configs: "Sequence[Configuration]") -> list[GoodputEstimate | None]:
        """One estimate per configuration (vectorised in subclasses; the ILP calls this once per job)."""
        return [self.estimate(job, c.gpu_type, c.num_gpus, c.num_nodes) for c in configs]


class GoodputWrapper(GoodputModelBase):
    """A model that changes some answers of ``inner`` and forwards every capability to it unchanged."""

    def __init__(self, inner: GoodputModel) -> None:
        self.inner = inner
        base = self._base
        self.curves, self.validation, self.steps = base.curves, base.validation, base.steps

    @property
    def _base(self) -> GoodputModelBase:
        return self.inner if isinstance(self.inner, GoodputModelBase) else _NO_CAPABILITIES

    @property
    def applications(self) -> set[str] | None:
        return self._base.applications

    def gpu_types(self, application: str) -> set[str] | None:
        return self._base.gpu_types(application)

    def local_batch_range(self, application: str, gpu_type: str) -> tuple[float, float] | None:
        return self._base.local_batch_range(application, gpu_type)

    def efficiency(self, job: Job, batch_size: "np.ndarray | float") -> "np.ndarray | None":
        return self._base.efficiency(job, batch_size)

    def grid_efficiency(self, job: Job) -> "tuple[np.ndarray, np.ndarray] | None":
        return self._base.grid_efficiency(job)

    def throughput(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                   num_nodes: int = 1) -> float | None:
        return self.inner.throughput(application, gpu_type, num_gpus, batch_size, num_nodes)


_NO_CAPABILITIES = GoodputModelBase()


def estimate_many(model: GoodputModel, job: Job, configs: "Sequence[Configuration]") -> list[GoodputEstimate | None]:
    """``model.estimate_many`` for models on :class:`GoodputModelBase`, else one ``estimate`` per configuration."""
    if isinstance(model, GoodputModelBase):
        return model.estimate_many(job, configs)
    return [model.estimate(job, c.gpu_type, c.num_gpus, c.num_nodes) for c in configs]


def estimate_arrays(model: GoodputModel, job: Job, configs: "Sequence[Configuration]") -> EstimateArrays:
    """``model.estimate_arrays`` for models on :class:`GoodputModelBase`, else built from per-configuration
    estimates."""
    if isinstance(model, GoodputModelBase):
        return model.estimate_arrays(job, configs)
    return EstimateArrays.from_list(estimate_many(model, job, configs))


class TableGoodputModel(GoodputModelBase):
    """Goodput from an explicit table ``(application, gpu_type, num_gpus) -> samples/s`` (efficiency 1).

    For tests, examples and users who already know their throughputs; rigid jobs use their own batch size
    (or ``default_batch_size``) and adaptive jobs the same, since the table has no batch dimension.
    """

    def __init__(self, table: "Mapping[tuple[str, str, int], float]", default_batch_size: int = 32) -> None:
        self.table = dict(table)
        self.default_batch_size = default_batch_size

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        value = self.table.get((job.application, gpu_type, num_gpus))
        if value is None or value <= 0:
            return None
        return GoodputEstimate(job.batch_size or self.default_batch_size, float(value), 1.0)

    def throughput(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                   num_nodes: int = 1) -> float | None:
        return self.table.get((application, gpu_type, num_gpus))


# --------------------------------------------------------------------------------------------------
# Goodput from profiles (+ optional gradient-noise curves)
# --------------------------------------------------------------------------------------------------

RESULT_CACHE_SIZE = 16384


class ProfileGoodputModel(GoodputModelBase):
    """Goodput from measured profiles: fitted step-time model × GNS efficiency, with Sia's bootstrap.

    * Measured points are used as they are; other (N, nodes, batch) points come from the Pollux-form fit.
    * A GPU type with only 1-GPU rows for an application is bootstrapped from a reference type that has
      multi-GPU rows (Sia §3.4): ``tput_B(N, m) ≈ tput_B(1, m) / tput_A(1, m) · tput_A(N, m)``.
    * The local batch may not exceed the largest profiled on that GPU type (memory limit).
    * Adaptive jobs: the global batch is chosen on a geometric grid between the job's (or the
      application's) limits to maximise goodput; rigid jobs use their own batch (or the best one if unset).
    """

    GRID_POINTS = 24

    def __init__(self, profiles: "pd.DataFrame", curves: "Mapping[str, GnsCurve] | None" = None,
                 validation: "Mapping[str, ValidationCurves] | None" = None, step_times: str = "fitted") -> None:
        self.profiles = profiles
        self.curves = dict(curves or {})
        # Sia's efficiency (curves at the job's own batch); without them, the initial batch's GNS curve
        self.validation = dict(validation or {})
        self.steps: StepTimes = StepTimes(profiles, step_times)  # true step times: fitted or interpolated
        self._models: dict[tuple[str, str], StepTimeModel] = self.steps.models
        self._local_range: dict[tuple[str, str], tuple[float, float]] = {}
        self._table_cache: dict[tuple, tuple[object, "np.ndarray"]] = {}
        self._apps = set(profiles["application"].unique())
        self._grid_cache: dict[tuple, tuple[int, ...]] = {}
        self._content_cache: dict[tuple, "np.ndarray"] = {}
        self._grid_arrays: dict[tuple[int, ...], "np.ndarray"] = {}
        self._efficiency_cache: dict[tuple, "np.ndarray"] = {}
        self._result_by_id: dict[tuple, tuple[object, EstimateArrays]] = {}
        self._result_by_content: dict[tuple, EstimateArrays] = {}
        self._singles: dict[tuple[str, int, int], tuple] = {}
        self._curve_arrays = {
            app: (np.asarray(c.progress), np.asarray(c.grad_sqr), np.asarray(c.grad_var), c.init_batch_size)
            for app, c in self.curves.items()
        }
        for (app, gpu), rows in profiles.groupby(["application", "gpu_type"], sort=False):
            self._local_range[(app, gpu)] = (float(rows["local_bsz"].min()), float(rows["local_bsz"].max()))

    def clear_caches(self) -> None:
        """Forget every memoised table, efficiency and estimate (they are recomputed on the next call)."""
        for cache in (self._table_cache, self._content_cache, self._grid_cache, self._grid_arrays,
                      self._efficiency_cache, self._result_by_id, self._result_by_content):
            cache.clear()


    @property
    def applications(self) -> set[str]:
        return {a for a, _ in self._models}

    def gpu_types(self, application: str) -> set[str]:
        return {g for a, g in self._models if a == application}

    def local_batch_range(self, application: str, gpu_type: str) -> tuple[float, float] | None:
        return self._local_range.get((application, gpu_type))

    def _step_times(self, app: str, gpu: str, local: "np.ndarray", n: int, k: int) -> "np.ndarray":
        return self.steps.step_time(app, gpu, local, n, k)

    def throughput(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                   num_nodes: int = 1) -> float | None:
        if (application, gpu_type) not in self._models:
            return None
        local = batch_size / num_gpus
        lo, hi = self._local_range[(application, gpu_type)]
        if local > hi * (1 + 1e-9):
            return None
        t = float(self._step_times(application, gpu_type, np.array([local]), num_gpus, num_nodes)[0])
        return batch_size / t

    def grid_efficiency(self, job: Job) -> "tuple[np.ndarray, np.ndarray]":
        """The global batches an estimate chooses among for ``job`` and its efficiency at each (read-only)."""
        grid = self._batch_grid(job)
        grid_arr = self._grid_arrays.get(grid)
        if grid_arr is None:
            grid_arr = self._grid_arrays[grid] = np.asarray(grid, dtype=float)
        return grid_arr, self._grid_efficiency(job, grid, grid_arr)

    def _batch_grid(self, job: Job) -> tuple[int, ...]:
        key = (job.application, job.adaptive, job.batch_size, job.min_batch_size, job.max_batch_size)
        grid = self._grid_cache.get(key)
        if grid is None:
            grid = self._grid_cache[key] = self._make_batch_grid(job)
        return grid

    def state_key(self, job: Job) -> tuple | None:
        """What this model's answers for ``job`` are a function of, or None when that is not a short key.

        With validation curves every estimate and efficiency depends on the job only through its
        application, batch limits and epoch (:meth:`estimate_arrays`, :meth:`_grid_efficiency`), so a
        caller may keep answers by this key (the simulator re-reads a job's goodput several times a round,
        mostly inside one epoch). Without them the efficiency moves with the progress itself: None."""
        measured = self.validation.get(job.application)
        if measured is None:
            return None
        return (job.application, job.adaptive, job.batch_size, job.min_batch_size, job.max_batch_size,
                measured.epoch(job.progress))

    def _make_batch_grid(self, job: Job) -> tuple[int, ...]:
        if not job.adaptive and job.batch_size:
            return (int(job.batch_size),)
        curve = self.curves.get(job.application)
        ranges = [r for (a, _), r in self._local_range.items() if a == job.application]
        lo = job.min_batch_size or (curve.init_batch_size if curve else int(min(r[0] for r in ranges)))
        hi = job.max_batch_size or (curve.max_batch_size if curve else int(max(r[1] for r in ranges) * 64))
        lo, hi = int(lo), int(max(hi, lo))
        grid = np.unique(np.round(np.geomspace(lo, hi, self.GRID_POINTS)).astype(int))
        return tuple(int(x) for x in grid)

    def _table(self, app: str, grid: tuple[int, ...], configs: "tuple[Configuration, ...]") -> "np.ndarray":
        """Throughput [config × batch], NaN where the local batch does not fit or the type is unprofiled."""
        # fast path by identity (the ILP passes the same tuple for every job of a kind), then by content
        key = (app, grid, id(configs))
        hit = self._table_cache.get(key)
        if hit is not None and hit[0] is configs:  # the entry keeps its tuple alive, so the id is not reused
            return hit[1]
        content_key = (app, grid, configs)
        table = self._content_cache.get(content_key)
        if table is not None:
            self._table_cache[key] = (configs, table)
            return table
        M = np.asarray(grid, dtype=float)
        table = np.full((len(configs), len(grid)), np.nan)
        for row, c in enumerate(configs):
            rng = self._local_range.get((app, c.gpu_type))
            if rng is None:
                continue
            local = M / c.num_gpus
            ok = local <= rng[1] * (1 + 1e-9)
            if not ok.any():
                continue
            times = self._step_times(app, c.gpu_type, local[ok], c.num_gpus, c.num_nodes)
            table[row, ok] = M[ok] / times
        if len(self._table_cache) > 4096:
            self._table_cache.clear()
            self._content_cache.clear()
        self._table_cache[key] = (configs, table)
        self._content_cache[content_key] = table
        return table

    def efficiency(self, job: Job, batch_size: "np.ndarray | float") -> "np.ndarray":
        """Statistical efficiency of ``job`` at its current progress for each global batch size.

        With validation curves (Sia's simulator): gradient statistics of the job's epoch interpolated at
        each batch size; else Pollux's ``(φ + M0) / (φ + M)`` with φ from the initial batch's curve.
        """
        measured = self.validation.get(job.application)
        if measured is not None:
            return measured.efficiency(job.progress, batch_size)
        arrays = self._curve_arrays.get(job.application)
        if arrays is None:
            return np.ones_like(np.asarray(batch_size, dtype=float))
        progress, sqr, var, m0 = arrays
        g2 = float(np.interp(job.progress, progress, sqr))
        v = float(np.interp(job.progress, progress, var))
        phi = m0 * v / g2 if g2 > 0 else float("inf")
        return statistical_efficiency(batch_size, m0, phi)

    def _grid_efficiency(self, job: Job, grid: tuple[int, ...], grid_arr: "np.ndarray") -> "np.ndarray":
        """:meth:`efficiency` on a batch grid; with validation curves it depends on the progress only through
        the epoch, so it is computed once per (application, epoch, grid) and reused (read-only)."""
        measured = self.validation.get(job.application)
        if measured is None:
            return self.efficiency(job, grid_arr)
        key = (job.application, measured.epoch(job.progress), grid)
        eff = self._efficiency_cache.get(key)
        if eff is None:
            if len(self._efficiency_cache) > 4096:
                self._efficiency_cache.clear()
            eff = self._efficiency_cache[key] = measured.efficiency_at_epoch(key[1], grid_arr)
            eff.setflags(write=False)
        return eff

    def estimate_arrays(self, job: Job, configs: "Sequence[Configuration]") -> "EstimateArrays":
        """Best batch per configuration. With validation curves the answer depends on the job only through
        (application, batch grid, epoch), so it is kept (read-only) per those and the configurations: by
        the tuple's identity first (the ILP passes the same shapes for every job of a kind), then by content."""
        if job.application not in self._apps:
            return EstimateArrays.empty(len(configs))
        grid = self._batch_grid(job)
        configs = configs if isinstance(configs, tuple) else tuple(configs)
        measured = self.validation.get(job.application)
        if measured is None:
            return self._best_on_grid(job, grid, configs)
        key = (job.application, grid, measured.epoch(job.progress))
        by_id = key + (id(configs),)
        hit = self._result_by_id.get(by_id)
        if hit is not None and hit[0] is configs:  # the entry keeps its tuple alive, so the id is not reused
            return hit[1]
        by_content = key + (configs,)
        result = self._result_by_content.get(by_content)
        if result is None:
            result = self._best_on_grid(job, grid, configs)
            for array in (result.goodput, result.batch_size, result.throughput, result.efficiency):
                array.setflags(write=False)
            if len(self._result_by_content) > RESULT_CACHE_SIZE:
                self._result_by_content.clear()
            self._result_by_content[by_content] = result
        if len(self._result_by_id) > RESULT_CACHE_SIZE:
            self._result_by_id.clear()
        self._result_by_id[by_id] = (configs, result)
        return result

    def _best_on_grid(self, job: Job, grid: tuple[int, ...], configs: "tuple[Configuration, ...]") -> "EstimateArrays":
        table = self._table(job.application, grid, configs)
        grid_arr = self._grid_arrays.get(grid)
        if grid_arr is None:
            grid_arr = self._grid_arrays[grid] = np.asarray(grid, dtype=float)
        eff = self._grid_efficiency(job, grid, grid_arr)
        good = np.where(np.isnan(table), -np.inf, table * eff[None, :])
        best = np.argmax(good, axis=1)
        rows = np.arange(len(configs))
        value = good[rows, best]
        ok = np.isfinite(value) & (value > 0)
        batch = grid_arr[best]
        return EstimateArrays(
            goodput=np.where(ok, value, np.nan),
            batch_size=np.where(ok, batch, np.nan),
            throughput=np.where(ok, table[rows, best], np.nan),
            efficiency=np.where(ok, eff[best], np.nan),
        )

    def estimate_many(self, job: Job, configs: "Sequence[Configuration]") -> list[GoodputEstimate | None]:
        return self.estimate_arrays(job, configs).to_list()

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        # one tuple per configuration, so the simulator's per-job questions hit the estimate caches by identity
        key = (gpu_type, num_nodes, num_gpus)
        single = self._singles.get(key)
        if single is None:
            from scheduler.model.configs import Configuration

            single = self._singles[key] = (Configuration(gpu_type, num_nodes, num_gpus),)
        return self.estimate_arrays(job, single).estimates[0]
