"""Pollux's (OSDI'21 §3.2) iteration-time model, fitted to profile rows: the throughput half of goodput
(:mod:`scheduler.model.goodput`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclass(frozen=True)
class StepTimeModel:
    """Pollux's (OSDI'21 §3.2) iteration-time model for one application on one GPU type.

    ``T_grad(m) = α_c + β_c·m`` (local batch m), ``T_sync = 0`` on one GPU, ``α_r + β_r·(N−2)`` inside one
    node and ``α_n + β_n·(N−2)`` across nodes, and ``T_iter = (T_grad^γ + T_sync^γ)^(1/γ)`` (γ ≥ 1 models
    the overlap of computation and all-reduce). Throughput = N·m / T_iter samples/s.
    """

    alpha_c: float
    beta_c: float
    alpha_r: float = 0.0
    beta_r: float = 0.0
    alpha_n: float = 0.0
    beta_n: float = 0.0
    gamma: float = 1.0

    def step_time(self, local_bsz: "np.ndarray | float", num_gpus: int, num_nodes: int = 1) -> "np.ndarray":
        m = np.asarray(local_bsz, dtype=float)
        grad = self.alpha_c + self.beta_c * m
        if num_gpus <= 1:
            return grad
        if num_nodes <= 1:
            sync = self.alpha_r + self.beta_r * (num_gpus - 2)
        else:
            sync = self.alpha_n + self.beta_n * (num_gpus - 2)
        sync = max(sync, 0.0)
        g = self.gamma
        return (grad ** g + sync ** g) ** (1.0 / g)

    def throughput(self, local_bsz: "np.ndarray | float", num_gpus: int, num_nodes: int = 1) -> "np.ndarray":
        m = np.asarray(local_bsz, dtype=float)
        return num_gpus * m / self.step_time(m, num_gpus, num_nodes)


def linear_fit(x: "np.ndarray", y: "np.ndarray") -> tuple[float, float]:
    """Least-squares ``y ≈ a + b·x`` with a, b ≥ 0 (one distinct x: a line through the origin)."""
    if len(x) == 0:
        return 0.0, 0.0
    if len(np.unique(x)) < 2:
        mean_x = float(np.mean(x))
        if mean_x == 0:
            return max(float(np.mean(y)), 0.0), 0.0
        return 0.0, max(float(np.mean(y)) / mean_x, 0.0)
    b, a = np.polyfit(x, y, 1)
    if b < 0:  # noisy data: a flat line is the best monotone fit
        return max(float(np.mean(y)), 0.0), 0.0
    if a < 0:
        return 0.0, max(float(np.sum(x * y) / np.sum(x * x)), 0.0)
    return float(a), float(b)


def fit_step_time(rows: "pd.DataFrame") -> StepTimeModel:
    """Fit :class:`StepTimeModel` to profile rows of one (application, GPU type) (see :mod:`scheduler.formats.profiles`)."""
    m = rows["local_bsz"].to_numpy(float)
    n = rows["num_gpus"].to_numpy(int)
    k = rows["num_nodes"].to_numpy(int)
    step = rows["step_time"].to_numpy(float)
    sync = rows["sync_time"].to_numpy(float)
    has_sync = np.isfinite(sync)
    compute = np.where(has_sync & (n > 1), np.maximum(step - np.nan_to_num(sync), 1e-9), step)
    # compute time does not depend on N; single-GPU rows are the cleanest, use every row if they are few
    solo = n == 1
    use = solo if solo.sum() >= 2 else np.ones_like(solo)
    alpha_c, beta_c = linear_fit(m[use], compute[use])
    grad = alpha_c + beta_c * m
    observed_sync = np.where(has_sync, np.nan_to_num(sync), np.maximum(step - grad, 0.0))
    local = (n > 1) & (k == 1)
    remote = (n > 1) & (k > 1)
    alpha_r, beta_r = linear_fit((n[local] - 2).astype(float), observed_sync[local])
    alpha_n, beta_n = linear_fit((n[remote] - 2).astype(float), observed_sync[remote])
    if not remote.any():  # no multi-node data: assume the network is no better than the local links
        alpha_n, beta_n = alpha_r, beta_r
    if not local.any():
        alpha_r, beta_r = alpha_n, beta_n
    best = StepTimeModel(alpha_c, beta_c, alpha_r, beta_r, alpha_n, beta_n, 1.0)
    multi = n > 1
    if multi.any():
        best_err = float("inf")
        for gamma in (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 10.0):
            cand = StepTimeModel(alpha_c, beta_c, alpha_r, beta_r, alpha_n, beta_n, gamma)
            pred = np.array([cand.step_time(mi, int(ni), int(ki)) for mi, ni, ki in zip(m[multi], n[multi], k[multi])])
            err = float(np.mean(np.log(pred / step[multi]) ** 2))
            if err < best_err:
                best, best_err = cand, err
    return best


STEP_TIME_MODES = ("interpolated", "fitted")


_TRIANGULATIONS: dict[tuple, Any] = {}  # by the points triangulated (a scipy triangulation is never modified)


def _delaunay(pts: "np.ndarray") -> Any:
    """(triangulation, points, simplices) of ``pts``, or False when they span no volume."""
    from scipy.spatial import Delaunay
    from threadpoolctl import threadpool_limits

    # the point location's barycentric transforms (one 3×3 solve per simplex, made on the first query) go
    # through scipy's own BLAS: starting its threads costs ~1 s of CPU on a 2-core machine, and one thread
    # gives the same transforms bit for bit (results/sim/fidelity/NOTES.md, "Simulator speed with the fidelity models")
    with threadpool_limits(limits=1, user_api="blas"):
        try:
            tri = Delaunay(pts)
            tri.transform  # noqa: B018 (computed here, under the limit, rather than on the first query)
        except Exception:  # degenerate rows (one GPU count, one node count): no hull to interpolate in
            return False
    return tri, pts, np.asarray(tri.simplices)


class _Interpolator:
    """Step and sync times of one (application, GPU type) read off its profile rows by linear interpolation,
    the way Sia's simulator computes true step times (its ``Application.get_throughput``): a profiled
    (GPU count, node count) is interpolated along the local batch; any other over (nodes, GPUs, local batch)
    across every row (mean per point). Outside the rows' range: NaN (the caller falls back to the fit)."""

    def __init__(self, rows: "pd.DataFrame") -> None:
        means = rows.groupby(["num_nodes", "num_gpus", "local_bsz"], sort=True)[["step_time", "sync_time"]].mean()
        means = means.reset_index()
        means["sync_time"] = means["sync_time"].fillna(0.0)
        self._points = means
        self._values = means[["step_time", "sync_time"]].to_numpy(float)
        self._lines: dict[tuple[int, int], tuple["np.ndarray", "np.ndarray", "np.ndarray"]] = {}
        for (k, n), group in means.groupby(["num_nodes", "num_gpus"], sort=False):
            self._lines[(int(n), int(k))] = (group["local_bsz"].to_numpy(float), group["step_time"].to_numpy(float),
                                             group["sync_time"].to_numpy(float))
        self._nd: Any = None
        self._cache: dict[tuple, tuple["np.ndarray", "np.ndarray"]] = {}

    def times(self, local: "np.ndarray", n: int, k: int) -> "tuple[np.ndarray, np.ndarray]":
        m = np.asarray(local, dtype=float)
        line = self._lines.get((n, k))
        if line is not None:
            x, step, sync = line
            if len(x) == 1:
                inside = np.isclose(m, x[0])
                return np.where(inside, step[0], np.nan), np.where(inside, sync[0], np.nan)
            inside = (m >= x[0] - 1e-9) & (m <= x[-1] + 1e-9)
            return (np.where(inside, np.interp(m, x, step), np.nan), np.where(inside, np.interp(m, x, sync), np.nan))
        key = (n, k, m.shape, m.tobytes())
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if len(self._cache) > 65536:
            self._cache.clear()
        result = self._cache[key] = self._across(m, n, k)
        return result

    def prepare(self) -> None:
        """Triangulate the rows now (else on the first query off a profiled line): the same triangulation."""
        if self._nd is None:
            self._nd = self._triangulate()

    def _triangulate(self) -> Any:
        """(triangulation, points, simplices), or False when the rows span no volume; one per distinct set of
        points in the process (a model reloaded for the next workload of a benchmark reuses it)."""
        pts = self._points[["num_nodes", "num_gpus", "local_bsz"]].to_numpy(float)
        key = (pts.shape, pts.tobytes())
        if key not in _TRIANGULATIONS:
            _TRIANGULATIONS[key] = _delaunay(pts)
        return _TRIANGULATIONS[key]

    def _across(self, m: "np.ndarray", n: int, k: int) -> "tuple[np.ndarray, np.ndarray]":
        """Piecewise-linear over the Delaunay triangulation of the rows (what scipy's LinearNDInterpolator
        computes, with barycentric weights solved for the simplices hit only)."""
        if self._nd is None:
            self._nd = self._triangulate()
        if self._nd is False:
            nan = np.full(m.shape, np.nan)
            return nan, nan
        tri, pts, simplices = self._nd
        query = np.column_stack([np.full(m.size, float(k)), np.full(m.size, float(n)), m.reshape(-1)])
        simplex = tri.find_simplex(query)
        inside = simplex >= 0
        out = np.full((m.size, 2), np.nan)
        if inside.any():
            # barycentric weights of each query in its simplex (only the simplices hit, not the whole mesh)
            corners = simplices[simplex[inside]]
            vertices = pts[corners]  # (queries, 4, 3)
            edges = np.transpose(vertices[:, :3, :] - vertices[:, 3:, :], (0, 2, 1))
            offset = (query[inside] - vertices[:, 3, :])[..., None]
            try:
                partial = np.linalg.solve(edges, offset)[..., 0]
            except np.linalg.LinAlgError:  # a flat simplex on the hull: least squares instead
                partial = (np.linalg.pinv(edges) @ offset)[..., 0]
            weights = np.column_stack([partial, 1.0 - partial.sum(axis=1)])
            out[inside] = np.einsum("ij,ijk->ik", weights, self._values[corners])
        return out[:, 0].reshape(m.shape), out[:, 1].reshape(m.shape)


class StepTimes:
    """True step times of every (application, GPU type) in a profile frame.

    ``mode="fitted"``: the Pollux-form fit (:func:`fit_step_time`), measured points used as they are;
    ``"interpolated"``: Sia's simulator's linear interpolation of the rows (:class:`_Interpolator`), the fit
    only outside them. Either way a GPU type with only 1-GPU rows runs multi-GPU like the application's
    reference type (the one with the most multi-GPU rows) scaled by the two types' 1-GPU times (Sia §3.4).
    """

    def __init__(self, profiles: "pd.DataFrame", mode: str = "interpolated") -> None:
        if mode not in STEP_TIME_MODES:
            raise ValueError(f"step-time mode {mode!r} (valid: {', '.join(STEP_TIME_MODES)})")
        self.mode = mode
        self.models: dict[tuple[str, str], StepTimeModel] = {}
        self._measured: dict[tuple[str, str, int, int, float], float] = {}
        self._multi: set[tuple[str, str]] = set()
        self._reference: dict[str, str | None] = {}
        self._interp: dict[tuple[str, str], _Interpolator] = {}
        for (app, gpu), rows in profiles.groupby(["application", "gpu_type"], sort=False):
            self.models[(app, gpu)] = fit_step_time(rows)
            if (rows["num_gpus"] > 1).any():
                self._multi.add((app, gpu))
            if mode == "interpolated":
                self._interp[(app, gpu)] = _Interpolator(rows)
                # triangulated now, with the profiles, rather than on a simulation's first query between rows
                # (scipy's import and the triangulation cost ~0.7 s of CPU, once per process)
                self._interp[(app, gpu)].prepare()
            means = rows.groupby(["num_gpus", "num_nodes", "local_bsz"])["step_time"].mean()
            for (n, k, m), t in means.items():
                self._measured[(app, gpu, int(n), int(k), round(float(m), 6))] = float(t)
        for app in profiles["application"].unique():
            multi = profiles[(profiles["application"] == app) & (profiles["num_gpus"] > 1)]
            self._reference[app] = multi["gpu_type"].value_counts().index[0] if len(multi) else None

    def _fitted(self, app: str, gpu: str, m: "np.ndarray", n: int, k: int) -> "np.ndarray":
        """The fit's step times, measured points as measured (the ``"fitted"`` mode)."""
        model = self.models[(app, gpu)]
        ref = self._reference.get(app) if n > 1 and (app, gpu) not in self._multi else None
        if ref is not None and ref != gpu:
            ref_model = self.models[(app, ref)]
            times = model.step_time(m, 1) * ref_model.step_time(m, n, k) / ref_model.step_time(m, 1)
        else:
            times = model.step_time(m, n, k)
        times = np.array(times, dtype=float, copy=True).reshape(np.shape(m))
        for idx, value in np.ndenumerate(m):
            hit = self._measured.get((app, gpu, n, k, round(float(value), 6)))
            if hit is not None:
                times[idx] = hit
        return times

    def _interpolated(self, app: str, gpu: str, m: "np.ndarray", n: int, k: int) -> "tuple[np.ndarray, np.ndarray]":
        model = self.models[(app, gpu)]
        fit_step = np.asarray(model.step_time(m, n, k), dtype=float) * np.ones(np.shape(m))
        fit_sync = np.maximum(fit_step - (model.alpha_c + model.beta_c * m), 0.0)
        step, sync = self._interp[(app, gpu)].times(m, n, k)
        missing = np.isnan(step)
        return np.where(missing, fit_step, step), np.where(missing | np.isnan(sync), fit_sync, sync)

    def times(self, app: str, gpu: str, local: "np.ndarray | float", n: int, k: int
              ) -> "tuple[np.ndarray, np.ndarray]":
        """(step time, all-reduce time) in seconds at each local batch on ``n`` GPUs over ``k`` nodes."""
        m = np.asarray(local, dtype=float)
        if self.mode == "fitted":
            step = self._fitted(app, gpu, m, n, k)
            model = self.models[(app, gpu)]
            return step, np.clip(step - (model.alpha_c + model.beta_c * m), 0.0, None)
        if n > 1 and (app, gpu) not in self._multi:
            ref = self._reference.get(app)
            if ref is not None and ref != gpu:
                solo, _ = self._interpolated(app, gpu, m, 1, 1)
                ref_step, ref_sync = self._interpolated(app, ref, m, n, k)
                ref_solo, _ = self._interpolated(app, ref, m, 1, 1)
                scale = solo / ref_solo
                return ref_step * scale, ref_sync * scale
        return self._interpolated(app, gpu, m, n, k)

    def step_time(self, app: str, gpu: str, local: "np.ndarray", n: int, k: int) -> "np.ndarray":
        if self.mode == "fitted":
            return self._fitted(app, gpu, np.asarray(local, dtype=float), n, k)
        return np.array(self.times(app, gpu, local, n, k)[0], dtype=float, copy=True).reshape(np.shape(local))
