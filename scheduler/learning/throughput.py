"""Throughput learned from the configurations a job has run: one model for the simulator and the live server.

A scheduler does not know how fast a job will run on a configuration it has never tried. It measures the step
time (and the all-reduce time within it) of each configuration the job runs and fits the Pollux iteration-time
model (OSDI'21 §3.2, :class:`scheduler.model.step_time.StepTimeModel`) to those points, per GPU type. This is what
Sia (SOSP'23 §3.4) does, and how its simulator's scheduler sees jobs:

* :func:`~scheduler.learning.pollux_fit.fit_pollux` fits the model as Pollux's scheduler does: one joint
  least-squares fit in log space with Pollux's priors (terms nothing has measured are held at zero), so the
  measured configurations come out as measured and one multi-GPU count measured already makes more GPUs cost
  more.
* :class:`ThroughputLearner` holds the points (first measurement of each configuration) per job and GPU type
  and refits a type only when it gained a point.
* :class:`LearnedThroughputGoodput` is the policy's goodput model built on it: the fitted model on a GPU type
  the job has run on, a projection (ratio of the two types' 1-GPU throughputs) from the first such type on
  the others, and for a job that has not run yet one GPU of every type valued alike (Sia's simulator reads no
  throughput before a job's first run: where it starts is the solver's pick, and it migrates once a fit says
  where it runs best). A job's statistical efficiency at every batch is :func:`pollux_efficiency` of the
  gradient statistics it measured when it last ran, as Sia's scheduler believes it.

The live server can feed the same learner with its measured iteration times (``observe``) and answer the
policy with the same goodput model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from scheduler.learning.pollux_fit import fit_pollux
from scheduler.model.efficiency import statistical_efficiency
from scheduler.model.goodput import EstimateArrays, GoodputEstimate, GoodputModel, GoodputWrapper, estimate_arrays
from scheduler.model.jobs import Job
from scheduler.model.step_time import StepTimeModel

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.cluster import Cluster
    from scheduler.model.configs import Configuration

BLIND_TIE_BREAK = 1e-3  # a never-run job's relative preference per place earlier in the cluster's type list


def _step_times(model: StepTimeModel, local: np.ndarray, gpus: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """:meth:`StepTimeModel.step_time` for rows of shapes at once (``local``: shapes × batches)."""
    grad = model.alpha_c + model.beta_c * local
    extra = (gpus - 2)[:, None]
    sync = np.where((nodes > 1)[:, None], model.alpha_n + model.beta_n * extra, model.alpha_r + model.beta_r * extra)
    sync = np.maximum(sync, 0.0)
    g = model.gamma
    return np.where((gpus > 1)[:, None], (grad ** g + sync ** g) ** (1.0 / g), grad)


def pollux_efficiency(batch_sizes: np.ndarray, grad_sqr: float, grad_var: float, init_batch_size: float
                      ) -> np.ndarray:
    """Pollux's statistical efficiency at each global batch ``M`` from one measurement of the gradient's squared
    norm and variance (OSDI'21 §3.1, as Sia's scheduler evaluates it): ``gain / scale`` with ``scale = M / M0``
    and ``gain = (var + sqr) / (var / scale + sqr)``, which is :func:`statistical_efficiency` with the noise
    scale ``φ = M0 · var / sqr`` (read-only)."""
    phi = init_batch_size * grad_var / grad_sqr if grad_sqr > 0 else float("inf")
    eff = statistical_efficiency(batch_sizes, int(init_batch_size), phi)
    eff.setflags(write=False)
    return eff


Point = tuple[int, int, float]  # (num_nodes, num_gpus, local batch)


def _point(num_nodes: int, num_gpus: int, local_bsz: float) -> Point:
    return (int(num_nodes), int(num_gpus), round(float(local_bsz), 6))


class ThroughputLearner:
    """Measured (step, sync) times per owner (a job), GPU type and configuration, and the fits on them."""

    def __init__(self, fit: Callable[..., StepTimeModel] = fit_pollux) -> None:
        self.fit = fit  # (nodes, GPUs, local batches, step times, sync times) -> StepTimeModel
        self.points: dict[str, dict[str, dict[Point, tuple[float, float]]]] = {}
        self._fits: dict[tuple[str, str], tuple[int, StepTimeModel]] = {}
        # fits by their inputs (points in the order measured): jobs of one application that ran the same
        # configurations measured the same times, so most refits are another job's fit (a pure function)
        self._by_points: dict[tuple, StepTimeModel] = {}
        self.fits = 0  # how many fits were computed (a cost figure)
        # the gradient statistics (squared norm, variance) measured when the job last ran, and the initial batch
        # they are relative to: what Pollux's efficiency extrapolates to other batches
        self.gradients: dict[str, tuple[float, float, float]] = {}

    def observe_gradient(self, owner: str, grad_sqr: float, grad_var: float, init_batch_size: float) -> None:
        """Record the gradient statistics of the job's latest run (each run replaces the last, as in Sia)."""
        if all(math.isfinite(v) for v in (grad_sqr, grad_var)) and init_batch_size > 0:
            self.gradients[owner] = (float(grad_sqr), float(grad_var), float(init_batch_size))

    def observe(self, owner: str, gpu_type: str, num_nodes: int, num_gpus: int, local_bsz: float,
                step_time: float, sync_time: float) -> bool:
        """Record one measurement; True when the configuration is new (the first measurement is kept)."""
        seen = self.points.setdefault(owner, {}).setdefault(gpu_type, {})
        key = _point(num_nodes, num_gpus, local_bsz)
        if key in seen or not (step_time > 0 and math.isfinite(step_time)):
            return False
        seen[key] = (float(step_time), float(sync_time) if math.isfinite(sync_time) else 0.0)
        return True

    def knows(self, owner: str, gpu_type: str, num_nodes: int, num_gpus: int, local_bsz: float) -> bool:
        """Whether the configuration was measured already (:meth:`observe` would keep the first measurement),
        so a caller can skip measuring it again."""
        return _point(num_nodes, num_gpus, local_bsz) in self.points.get(owner, {}).get(gpu_type, {})

    def gpu_types(self, owner: str) -> list[str]:
        return list(self.points.get(owner, {}))

    def max_gpus(self, owner: str) -> int:
        return max((key[1] for seen in self.points.get(owner, {}).values() for key in seen), default=0)

    def version(self, owner: str) -> int:
        return sum(len(seen) for seen in self.points.get(owner, {}).values())

    def model(self, owner: str, gpu_type: str) -> StepTimeModel | None:
        seen = self.points.get(owner, {}).get(gpu_type)
        if not seen:
            return None
        hit = self._fits.get((owner, gpu_type))
        if hit is not None and hit[0] == len(seen):
            return hit[1]
        inputs = tuple(seen.items())
        model = self._by_points.get(inputs)
        if model is None:
            keys, values = list(seen), list(seen.values())
            model = self.fit([q[0] for q in keys], [q[1] for q in keys], [q[2] for q in keys],
                                 [v[0] for v in values], [v[1] for v in values])
            self.fits += 1
            if len(self._by_points) > 65536:
                self._by_points.clear()
            self._by_points[inputs] = model
        self._fits[(owner, gpu_type)] = (len(seen), model)
        return model

    def forget(self, owner: str) -> None:
        self.gradients.pop(owner, None)
        for gpu_type in self.points.pop(owner, {}):
            self._fits.pop((owner, gpu_type), None)


class LearnedThroughputGoodput(GoodputWrapper):
    """The policy's goodput model on a :class:`ThroughputLearner` (see the module docstring).

    ``inner`` is the base model: it gives the batch grid, the statistical efficiency, the local-batch limits
    per GPU type, which shapes a job can run at all, and the values for a job never run. Answers are kept per
    (job, number of points learned, efficiency, shapes), so a job that learned nothing new since the last round
    costs a dictionary look-up. A job never run is valued alike on every shape it can run (:meth:`_blind`); once
    it ran, its statistical efficiency at every batch is :func:`pollux_efficiency` of the gradient statistics it
    measured when it last ran (as Sia's scheduler believes it), not the base model's validation curves (what the
    job will really see)."""

    def __init__(self, inner: GoodputModel, cluster: Cluster, learner: ThroughputLearner | None = None) -> None:
        super().__init__(inner)
        self.cluster = cluster
        self.learner = learner if learner is not None else ThroughputLearner()
        self._ratio: dict[tuple[str, str, str], float | None] = {}
        self._answers: dict[tuple, tuple[object, EstimateArrays]] = {}
        self._shared: dict[tuple, tuple[object, EstimateArrays]] = {}
        self._plans: dict[tuple, tuple[object, dict[str, tuple[np.ndarray, ...]]]] = {}
        self._rates: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._blinded: dict[int, tuple[EstimateArrays, EstimateArrays]] = {}

    def record_run(self, job: str, application: str, config: Configuration, local_bsz: float, batch_size: float,
                   progress: float) -> None:
        """What the job measured in a round on ``config``: its gradient statistics at the batch it ran and its
        epoch now, and (first time only) the configuration's step and all-reduce times at its local batch, both
        read from the base profile model (true step times, validation curves); a base model without them
        teaches nothing."""
        curves = self.validation.get(application)
        if curves is not None:
            sqr, var = curves.gradient_stats(progress, batch_size)
            self.learner.observe_gradient(job, sqr, var, curves.init_batch_size)
        steps = self.steps
        c = config
        if steps is None or self.learner.knows(job, c.gpu_type, c.num_nodes, c.num_gpus, local_bsz):
            return  # the learner keeps a configuration's first measurement: no need to measure it again
        step, sync = steps.times(application, c.gpu_type, local_bsz, c.num_gpus, c.num_nodes)
        self.learner.observe(job, c.gpu_type, c.num_nodes, c.num_gpus, local_bsz, float(step), float(sync))

    def max_observed(self, job: str) -> int:
        return self.learner.max_gpus(job)

    def ratio(self, application: str, gpu_type: str, reference: str) -> float | None:
        """``gpu_type``'s 1-GPU throughput at its largest local batch over ``reference``'s (Sia's ratio)."""
        key = (application, gpu_type, reference)
        if key not in self._ratio:
            rates = []
            for t in (gpu_type, reference):
                span = self.local_batch_range(application, t)
                rate = self.inner.throughput(application, t, 1, int(span[1]), 1) if span else None
                rates.append(rate if rate and rate > 0 else None)
            self._ratio[key] = rates[0] / rates[1] if rates[0] and rates[1] else None
        return self._ratio[key]

    def estimate_arrays(self, job: Job, configs: Sequence[Configuration]) -> EstimateArrays:
        types = self.learner.gpu_types(job.name)
        if not types:
            never_run = estimate_arrays(self.inner, job, configs)
            return self._blind(never_run, configs)
        configs = configs if isinstance(configs, tuple) else tuple(configs)
        known = self.grid_efficiency(job)  # the profile model's (through any wrapper of it)
        if known is None:
            raise TypeError(f"{type(self.inner).__name__} has no batch grid: the fitted belief needs a profile model")
        grid, eff = known
        stats = self.learner.gradients.get(job.name)
        if stats is not None:
            eff = pollux_efficiency(grid, *stats)
        key = (job.name, self.learner.version(job.name), eff.tobytes(), grid.tobytes(), id(configs))
        hit = self._answers.get(key)
        if hit is not None and hit[0] is configs:  # the entry keeps its tuple alive, so the id is not reused
            return hit[1]
        result = self._shared_answer(job, configs, types, grid, eff)
        if len(self._answers) > 16384:
            self._answers.clear()
        self._answers[key] = (configs, result)
        return result

    def _blind(self, base: EstimateArrays, configs: Sequence[Configuration]) -> EstimateArrays:
        """A never-run job's estimates with every runnable shape's goodput set to the lowest of them: nothing
        tells the types apart yet (its GPU cap keeps it to one GPU until it has run, ``sia_max_gpus``), as in
        Sia's simulator, which values the scale-unit configuration of every type alike before a job's first
        run. Batch, throughput and efficiency stay the base model's (how the job would run where placed).

        The tie between types is broken explicitly, toward the type listed first in the cluster file
        (:data:`BLIND_TIE_BREAK` per place in the list), not left to the solver: left to it, which type a
        new job starts on moves with solver options and the run's mean JCT by ±2 %
        (``results/sim/fidelity/NOTES.md``). Sia's simulator starts most new jobs on its first-listed type."""
        hit = self._blinded.get(id(base))
        if hit is not None and hit[0] is base:  # the same arrays in, the same arrays out (callers key on them)
            return hit[1]
        runs = base.goodput > 0
        blind = base
        if runs.any():
            order = {t.name: i for i, t in enumerate(self.cluster)}
            last = len(order) - 1
            prefer = np.array([1.0 + BLIND_TIE_BREAK * (last - order.get(c.gpu_type, last)) for c in configs])
            goodput = np.where(runs, float(base.goodput[runs].min()) * prefer, base.goodput)
            goodput.setflags(write=False)
            blind = EstimateArrays(goodput, base.batch_size, base.throughput, base.efficiency)
        if len(self._blinded) > 16384:
            self._blinded.clear()
        self._blinded[id(base)] = (base, blind)  # the entry keeps ``base`` alive, so its id is not reused
        return blind

    def _shared_answer(self, job: Job, configs: tuple[Configuration, ...], types: Sequence[str], grid: np.ndarray,
                       eff: np.ndarray) -> EstimateArrays:
        """:meth:`_answer`, kept by what it is a function of rather than by job: the base model's values, the
        configurations, batch grid, efficiency and the fit of each GPU type learned. Jobs of one application
        that measured the same points share their fits (:meth:`ThroughputLearner.model`), and so the answer."""
        base = estimate_arrays(self.inner, job, configs)
        models = {t: self.learner.model(job.name, t) for t in types}
        key = (job.application, id(configs), eff.tobytes(), grid.tobytes(), tuple(sorted(models.items())),
               *(a.tobytes() for a in (base.goodput, base.batch_size, base.throughput, base.efficiency)))
        hit = self._shared.get(key)
        if hit is not None and hit[0] is configs:  # the entry keeps its tuple alive, so the id is not reused
            return hit[1]
        result = self._answer(job, configs, models, grid, eff, base)
        if len(self._shared) > 16384:
            self._shared.clear()
        self._shared[key] = (configs, result)
        return result

    def _answer(self, job: Job, configs: tuple[Configuration, ...], models: dict[str, StepTimeModel | None],
                grid: np.ndarray, eff: np.ndarray, base: EstimateArrays) -> EstimateArrays:
        out = [np.array(a, dtype=float, copy=True) for a in (base.goodput, base.batch_size, base.throughput,
                                                             base.efficiency)]
        for gpu_type, (idx, nodes, gpus, ratios) in self._plan(job.application, configs, models, base).items():
            model = models[gpu_type]
            span = self.inner.local_batch_range(job.application, gpu_type)  # type: ignore[attr-defined]
            if model is None:
                continue
            throughput, ok = self._throughputs(model, grid, gpus, nodes, ratios, span[1] if span else None)
            good = np.where(ok, throughput * eff[None, :], -np.inf)
            best = np.argmax(good, axis=1)
            at = np.arange(len(idx))
            fine = np.isfinite(good[at, best])
            for array, value in zip(out, (good[at, best], grid[best], throughput[at, best], eff[best])):
                array[idx] = np.where(fine, value, np.nan)
        for array in out:
            array.setflags(write=False)  # shared between callers
        return EstimateArrays(*out)

    def _throughputs(self, model: StepTimeModel, grid: np.ndarray, gpus: np.ndarray, nodes: np.ndarray,
                     ratios: np.ndarray, max_local: float | None) -> tuple[np.ndarray, np.ndarray]:
        """The believed throughput of each shape (rows) at each batch of the grid (columns), NaN where the local
        batch exceeds ``max_local``, and where it does not. Kept by its inputs: a job's efficiency moves every
        epoch, its fit only when it runs a new configuration, and the step times are the costly part."""
        key = (model, max_local, grid.tobytes(), gpus.tobytes(), nodes.tobytes(), ratios.tobytes())
        hit = self._rates.get(key)
        if hit is None:
            local = grid[None, :] / gpus[:, None]
            ok = local <= max_local * (1 + 1e-9) if max_local is not None else np.ones_like(local, dtype=bool)
            rate = np.where(ok, grid[None, :] / _step_times(model, local, gpus, nodes) * ratios[:, None], np.nan)
            if len(self._rates) > 16384:
                self._rates.clear()
            hit = self._rates[key] = (rate, ok)
        return hit

    def _plan(self, application: str, configs: tuple[Configuration, ...], models: dict[str, StepTimeModel | None],
              base: EstimateArrays) -> dict[str, tuple[np.ndarray, ...]]:
        """Which fit answers each shape: (shape index, nodes, GPUs, ratio) arrays per fitted GPU type; kept by
        what it is a function of (application, shapes, types fitted, shapes the job can run on)."""
        runs = base.goodput > 0
        key = (application, id(configs), frozenset(models), runs.tobytes())
        hit = self._plans.get(key)
        if hit is not None and hit[0] is configs:  # the entry keeps its tuple alive, so the id is not reused
            return hit[1]
        reference = next(t.name for t in self.cluster if t.name in models)
        per_node = self.cluster[reference].gpus_per_node
        # each shape is answered by the fit of its own type, or of the reference type at the same GPU count
        # (nodes of the reference type) times the ratio; shapes the job cannot run on (base) stay so
        rows: dict[str, list[tuple[int, int, int, float]]] = {}
        for i, c in enumerate(configs):
            if not runs[i]:
                continue
            if c.gpu_type in models:
                rows.setdefault(c.gpu_type, []).append((i, c.num_nodes, c.num_gpus, 1.0))
                continue
            ratio = self.ratio(application, c.gpu_type, reference)
            if ratio is not None:
                rows.setdefault(reference, []).append((i, math.ceil(c.num_gpus / per_node), c.num_gpus, ratio))
        plan = {t: tuple(np.array(col) for col in zip(*members)) for t, members in rows.items()}
        if len(self._plans) > 16384:
            self._plans.clear()
        self._plans[key] = (configs, plan)
        return plan

    def estimate_many(self, job: Job, configs: Sequence[Configuration]) -> list[GoodputEstimate | None]:
        return self.estimate_arrays(job, configs).to_list()

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        from scheduler.model.configs import Configuration

        return self.estimate_arrays(job, (Configuration(gpu_type, num_nodes, num_gpus),)).at(0)


__all__ = ["LearnedThroughputGoodput", "ThroughputLearner"]
