"""The δ predictor's model: fit log pair ratios on measured pairs, predict the pairs nobody measured.

For a job a sharing a GPU with job b (a the "victim", b the "aggressor"), the log of a's ratio
r(a|b) = t_a / t′_a is

    log r(a|b) = w·[1, f(a), f(b), f(a)⊙f(b), f(a)², f(b)²] + s_a + p_b + c·[a = b] + Z[a, b]

* f(j): standardized solo features of job j (log solo iteration time, log batch size, ... whatever the data
  has; none at all for a bare colocation table);
* s_a, p_b: per-job-type sensitivity and pressure (one-hot columns), c: same-type pairs; all fitted by
  ridge regression (``ridge_lambda``);
* Z: matrix completion of the remaining residuals over the job-type × job-type matrix (soft-impute,
  ``nuclear_lambda``), in the spirit of Quasar / Gavel's collaborative filtering.

The analysis layer (:mod:`colocate.prediction.predict`, :mod:`colocate.prediction.predict_eval`) builds datasets from profiling
campaigns and evaluates this model; the scheduler uses it as the prior of its pair belief
(:mod:`scheduler.learning.pairs`): :func:`fit_table_prior` fits it on colocation tables (the measured pairs
the project ships, :func:`default_training_frame`, plus any table the user gives) and answers for every
pair — a job type it never saw gets no job effects (the model's mean over the known types, with the
same-type term for a pair of two equal types). :func:`leave_pair_out_table` predicts every pair of a table
from the others (the simulator's ``--belief predicted``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from scheduler.formats.colocation_table import MAX_RATIO
from scheduler.model.colocation import ColocationTable

MIN_RATIO = 0.01
LOG_FEATURES = ("solo_iter_time_s", "batch_size", "peak_memory_mib")  # sizes and times enter as logs
UNKNOWN = "?"  # the job type index every unseen type maps to: no observations, so no job effects


@dataclass(frozen=True)
class PredictorConfig:
    """Knobs of the predictor; the defaults were chosen on Gavel's V100 data (see the evaluation report)."""

    ridge_lambda: float = 1.0
    nuclear_lambda: float = 0.3  # soft-impute shrinkage, in log-ratio units
    use_job_effects: bool = True
    use_interactions: bool = True
    use_completion: bool = True
    completion_iters: int = 300
    completion_tol: float = 1e-5


# --------------------------------------------------------------------------------------------------------
# Features


def feature_matrix(solo: pd.DataFrame, columns: Sequence[str]) -> tuple[pd.DataFrame, list[str]]:
    """Standardized solo features per job type (rows = ``solo.index``); returns the frame and the names used.

    Sizes and times enter as logs. Columns with fewer than two distinct known values are dropped; missing
    values get the column mean (0 after standardizing).
    """
    data: dict[str, np.ndarray] = {}
    for column in columns:
        if column not in solo.columns:
            continue
        values = pd.to_numeric(solo[column], errors="coerce").to_numpy(dtype=float)
        if column in LOG_FEATURES:
            values = np.where(values > 0, np.log(np.where(values > 0, values, 1.0)), np.nan)
        known = values[np.isfinite(values)]
        if len(np.unique(known)) < 2:
            continue
        mean, std = known.mean(), known.std()
        data[column] = np.where(np.isfinite(values), (values - mean) / (std if std > 0 else 1.0), 0.0)
    frame = pd.DataFrame(data, index=solo.index)
    return frame, list(frame.columns)


def _design(
    victims: np.ndarray, aggressors: np.ndarray, features: np.ndarray, n_types: int, *,
    interactions: bool, job_effects: bool,
) -> np.ndarray:
    """Rows of the ridge design for directed observations (victim index, aggressor index)."""
    fv, fa = features[victims], features[aggressors]
    parts = [np.ones((len(victims), 1)), fv, fa]
    if interactions and features.shape[1]:
        parts += [fv * fa, fv**2, fa**2]
    if job_effects:
        parts += [np.eye(n_types)[victims], np.eye(n_types)[aggressors], (victims == aggressors)[:, None].astype(float)]
    return np.hstack(parts)


def _ridge(design: np.ndarray, target: np.ndarray, lam: float, gram: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Ridge weights; ``gram`` = precomputed (XᵀX, Xᵀy) for these rows (leave-one-out downdates it)."""
    xtx, xty = gram if gram is not None else (design.T @ design, design.T @ target)
    penalty = lam * np.eye(design.shape[1])
    penalty[0, 0] = 0.0  # never shrink the intercept
    return np.linalg.solve(xtx + penalty, xty)


def soft_impute(
    rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n: int, lam: float, *, iters: int = 300, tol: float = 1e-6,
    init: np.ndarray | None = None,
) -> np.ndarray:
    """Nuclear-norm-regularised completion of an n×n matrix from entries (rows, cols) = values.

    Repeated entries are averaged. Iterates Z ← S_λ(P_Ω(M) + P_Ω⊥(Z)) with S_λ soft-thresholding the
    singular values (Mazumder, Hastie & Tibshirani 2010); convex, so the start (zeros, or ``init``: a nearby
    solution such as the full-data one in leave-one-out) changes only how many iterations it takes.
    """
    total = np.zeros((n, n))
    count = np.zeros((n, n))
    np.add.at(total, (rows, cols), values)
    np.add.at(count, (rows, cols), 1.0)
    observed = count > 0
    target = np.divide(total, count, out=np.zeros_like(total), where=observed)
    estimate = np.zeros((n, n)) if init is None else init.copy()
    for _ in range(iters):
        u, singular, vt = np.linalg.svd(np.where(observed, target, estimate))
        updated = (u * np.maximum(singular - lam, 0.0)) @ vt
        change = np.abs(updated - estimate).max()
        estimate = updated
        if change < tol:
            break
    return estimate


# --------------------------------------------------------------------------------------------------------
# Models: each fits on training pairs and predicts directed ratios for (victim, aggressor) index arrays.


@dataclass
class _Fitted:
    predict_log: Callable[[np.ndarray, np.ndarray], np.ndarray]
    max_ratio: float
    completion: np.ndarray | None = None  # the residual completion Z (None when off)


def _observations(pairs: pd.DataFrame, index: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = pairs["type_a"].map(index).to_numpy(dtype=int)
    b = pairs["type_b"].map(index).to_numpy(dtype=int)
    victims = np.concatenate([a, b])
    aggressors = np.concatenate([b, a])
    ratios = np.concatenate([pairs["ratio_a"].to_numpy(dtype=float), pairs["ratio_b"].to_numpy(dtype=float)])
    return victims, aggressors, np.log(np.clip(ratios, MIN_RATIO, MAX_RATIO))


def fit_ratio_model(
    pairs: pd.DataFrame, features: pd.DataFrame, config: PredictorConfig = PredictorConfig(), *,
    feature_columns: Sequence[str] | None = None,
) -> _Fitted:
    """Fit the predictor (or, with job effects/interactions/completion off, the solo-feature baseline)."""
    index = {job_type: i for i, job_type in enumerate(features.index)}
    columns = list(feature_columns) if feature_columns is not None else list(features.columns)
    matrix = features[columns].to_numpy(dtype=float) if columns else np.zeros((len(index), 0))
    victims, aggressors, target = _observations(pairs, index)
    return _fit_arrays(victims, aggressors, target, matrix, config)


def _fit_arrays(
    victims: np.ndarray, aggressors: np.ndarray, target: np.ndarray, matrix: np.ndarray, config: PredictorConfig,
    design: np.ndarray | None = None, gram: tuple[np.ndarray, np.ndarray] | None = None,
    warm_start: np.ndarray | None = None,
) -> _Fitted:
    """The fit on plain arrays (``design``/``gram`` = precomputed rows and XᵀX, Xᵀy, to save recomputing)."""
    n = matrix.shape[0]
    options = {"interactions": config.use_interactions, "job_effects": config.use_job_effects}
    if design is None:
        design = _design(victims, aggressors, matrix, n, **options)
    weights = _ridge(design, target, config.ridge_lambda, gram)
    completion = np.zeros((n, n))
    if config.use_completion and len(target):
        residual = target - design @ weights
        completion = soft_impute(victims, aggressors, residual, n, config.nuclear_lambda,
                                 iters=config.completion_iters, tol=config.completion_tol, init=warm_start)

    def predict_log(v: np.ndarray, a: np.ndarray) -> np.ndarray:
        return _design(v, a, matrix, n, **options) @ weights + completion[v, a]

    max_ratio = float(np.clip(np.exp(target.max()) if len(target) else 1.0, 1.0, MAX_RATIO))
    return _Fitted(predict_log, max_ratio, completion if config.use_completion else None)


SOLO_BASELINE = PredictorConfig(use_job_effects=False, use_interactions=False, use_completion=False)


def _predict_pairs(fitted: _Fitted, types_a: Sequence[str], types_b: Sequence[str], solo: pd.DataFrame,
                   index: dict[str, int]) -> pd.DataFrame:
    a = np.array([index[t] for t in types_a], dtype=int)
    b = np.array([index[t] for t in types_b], dtype=int)
    ratio_a = np.clip(np.exp(fitted.predict_log(a, b)), MIN_RATIO, fitted.max_ratio)
    ratio_b = np.clip(np.exp(fitted.predict_log(b, a)), MIN_RATIO, fitted.max_ratio)
    t_a = solo.loc[list(types_a), "solo_iter_time_s"].to_numpy(dtype=float)
    t_b = solo.loc[list(types_b), "solo_iter_time_s"].to_numpy(dtype=float)
    delta = (t_a + t_b) / np.maximum(t_a / ratio_a, t_b / ratio_b)
    return pd.DataFrame({"type_a": list(types_a), "type_b": list(types_b), "ratio_a": ratio_a, "ratio_b": ratio_b,
                         "delta": delta})



# --------------------------------------------------------------------------------------------------------
# The scheduler's prior: the model fitted on colocation tables


TABLE_COLUMNS = ["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b"]


def _application(job_type: str) -> str:
    return job_type.rpartition("@")[0] or job_type


@dataclass(frozen=True)
class TablePrior:
    """The model fitted per GPU type (and once over all types, for a GPU type no table has) on table rows.

    Called as ``prior(gpu, a, b)`` it returns the predicted ``(r_a, r_b)``; it knows every pair.
    ``methods``: which fitter each GPU type's table chose (:func:`select_fitter`).
    """

    fits: dict[str | None, tuple[_Fitted, dict[str, int]]]
    methods: dict[str | None, str]

    def _index(self, index: dict[str, int], job_type: str) -> int:
        hit = index.get(job_type)
        if hit is None:
            hit = index.get(_application(job_type), index[UNKNOWN])
        return hit

    def knows(self, gpu: str, a: str, b: str) -> bool:
        """Whether the fit that answers for ``gpu`` saw both job types (exactly or by application); for a type
        it never saw it answers with the model's mean, a generic guess."""
        index = (self.fits.get(gpu) or self.fits[None])[1]
        return all(self._index(index, t) != index[UNKNOWN] for t in (a, b))

    def __call__(self, gpu: str, a: str, b: str) -> tuple[float, float]:
        fitted, index = self.fits.get(gpu) or self.fits[None]
        va, vb = self._index(index, a), self._index(index, b)
        both = fitted.predict_log(np.array([va, vb]), np.array([vb, va]))
        ra, rb = np.clip(np.exp(both), MIN_RATIO, fitted.max_ratio)
        if a == b:  # the same type twice: one value, whichever order was asked
            ra = rb = float(np.sqrt(ra * rb))
        return float(ra), float(rb)


def _fit_rows(rows: pd.DataFrame, config: PredictorConfig) -> tuple[_Fitted, dict[str, int]]:
    types = sorted(set(rows["type_a"]) | set(rows["type_b"]))
    index = {t: i for i, t in enumerate([*types, UNKNOWN])}
    features = pd.DataFrame(index=list(index))  # a table carries no solo features: job effects do the work
    return fit_ratio_model(rows, features, config), index


def _fit_job_type_mean(rows: pd.DataFrame, config: PredictorConfig) -> tuple[_Fitted, dict[str, int]]:
    """The simple rival: r(a|b) = the mean of a's ratios over its measured pairs (the overall mean if none)."""
    types = sorted(set(rows["type_a"]) | set(rows["type_b"]))
    index = {t: i for i, t in enumerate([*types, UNKNOWN])}
    victims, _, target = _observations(rows, index)
    ratios = np.exp(target)
    sums, counts = np.zeros(len(index)), np.zeros(len(index))
    np.add.at(sums, victims, ratios)
    np.add.at(counts, victims, 1.0)
    overall = float(ratios.mean()) if len(ratios) else 0.5
    means = np.log(np.where(counts > 0, sums / np.maximum(counts, 1.0), overall))

    def predict_log(v: np.ndarray, a: np.ndarray) -> np.ndarray:
        return means[v]

    max_ratio = float(np.clip(ratios.max() if len(ratios) else 1.0, 1.0, MAX_RATIO))
    return _Fitted(predict_log, max_ratio), index


def _fit_blend(rows: pd.DataFrame, config: PredictorConfig) -> tuple[_Fitted, dict[str, int]]:
    """The geometric mean of the model and the per-type mean: the mean's robustness, the model's pair terms."""
    (model, index), (mean, _) = _fit_rows(rows, config), _fit_job_type_mean(rows, config)

    def predict_log(v: np.ndarray, a: np.ndarray) -> np.ndarray:
        return 0.5 * (model.predict_log(v, a) + mean.predict_log(v, a))

    return _Fitted(predict_log, max(model.max_ratio, mean.max_ratio)), index


FITTERS = {"model": _fit_rows, "job-type-mean": _fit_job_type_mean, "blend": _fit_blend}
SELECTABLE = ("model", "blend")  # what select_fitter chooses from, the default first
SELECT_MAX_PAIRS = 60  # above this many pairs the model is used as is (the inner leave-one-out grows as n²)


def _decisions(fitted: tuple[_Fitted, dict[str, int]], rows: pd.DataFrame) -> np.ndarray:
    model, index = fitted
    a = np.array([index.get(t, index[UNKNOWN]) for t in rows["type_a"]], dtype=int)
    b = np.array([index.get(t, index[UNKNOWN]) for t in rows["type_b"]], dtype=int)
    total = np.exp(model.predict_log(a, b)) + np.exp(model.predict_log(b, a))
    return total > 1.0


def _balanced(guess: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    recalls = [float((guess[truth]).mean()) if truth.any() else None,
               float((~guess[~truth]).mean()) if (~truth).any() else None]
    known = [r for r in recalls if r is not None]
    return (float(np.mean(known)) if known else 0.0), float((guess == truth).mean())


def select_fitter(rows: pd.DataFrame, config: PredictorConfig) -> str:
    """The method whose pack decisions (Σr > 1) on the rows' own pairs, each held out in turn, are the most
    accurate (balanced accuracy, then accuracy; ties keep the model). A small table is where the model's
    pair and aggressor effects can overfit what the per-type mean gets right."""
    if not 4 <= len(rows) <= SELECT_MAX_PAIRS:
        return "model"
    truth = (rows["ratio_a"] + rows["ratio_b"]).to_numpy() > 1.0
    guesses: dict[str, list[bool]] = {name: [] for name in SELECTABLE}
    for i in range(len(rows)):
        held, train = rows.iloc[[i]], rows.drop(index=rows.index[i])
        for name in SELECTABLE:
            guesses[name].append(bool(_decisions(FITTERS[name](train, config), held)[0]))
    scores = {name: _balanced(np.array(g), truth) for name, g in guesses.items()}
    return max(SELECTABLE, key=lambda name: scores[name])  # the first (the model) wins ties


def fit_table_prior(frame: pd.DataFrame, config: PredictorConfig | None = None, *, select: bool = True) -> TablePrior:
    """Fit the prior on the feasible rows of a colocation-table frame (infeasible rows, ratio 0, are facts of
    memory, not of interference, and are left out): per GPU type the model, or — on a small table where it
    decides worse on held-out pairs (``select``, :func:`select_fitter`) — the per-type mean."""
    config = config or PredictorConfig()
    ok = frame[(frame["ratio_a"] > 0) & (frame["ratio_b"] > 0)].reset_index(drop=True)
    fits: dict[str | None, tuple[_Fitted, dict[str, int]]] = {None: _fit_rows(ok, config)}
    methods: dict[str | None, str] = {None: "model"}
    for gpu, rows in ok.groupby("gpu_type"):
        if len(rows) >= 2:
            method = select_fitter(rows.reset_index(drop=True), config) if select else "model"
            fits[str(gpu)], methods[str(gpu)] = FITTERS[method](rows, config), method
    return TablePrior(fits, methods)


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
    """The serve prior: fitted on the shipped measured pairs plus the user's table (``--colocation``)."""
    frame = default_training_frame()
    if user is not None and len(user):
        frame = pd.concat([frame, user[TABLE_COLUMNS]], ignore_index=True)
    return fit_table_prior(frame, config)


def leave_pair_out_table(table: ColocationTable, config: PredictorConfig | None = None) -> ColocationTable:
    """Every pair of ``table`` predicted by the prior fitted on the table's *other* pairs of the same GPU type.

    Infeasible pairs (a ratio of 0) stay infeasible: that is memory, which the scheduler knows without trying.
    GPU types whose rows are identical (a table transferred to several types) are fitted once.
    """
    from threadpoolctl import threadpool_limits  # small matrices: BLAS threads only contend (BENCHMARKS.md)

    config = config or PredictorConfig()
    frame = table_frame(table)
    done: dict[tuple, list[tuple[float, float]]] = {}
    out = []
    for gpu, rows in frame.groupby("gpu_type", sort=True):
        rows = rows.reset_index(drop=True)
        key = tuple(rows[["type_a", "type_b", "ratio_a", "ratio_b"]].itertuples(index=False, name=None))
        if key not in done:
            with threadpool_limits(limits=1, user_api="blas"):
                done[key] = _held_out(rows, config)
        out += [(str(gpu), r.type_a, r.type_b, *ratios) for r, ratios in zip(rows.itertuples(index=False), done[key])]
    return ColocationTable.from_rows(out)


def _held_out(rows: pd.DataFrame, config: PredictorConfig) -> list[tuple[float, float]]:
    feasible = (rows["ratio_a"] > 0) & (rows["ratio_b"] > 0)
    out = []
    for i, row in rows.iterrows():
        if not feasible[i]:
            out.append((0.0, 0.0))
            continue
        train = rows[feasible & (rows.index != i)].reset_index(drop=True)
        fitted = FITTERS[select_fitter(train, config)](train, config)
        prior = TablePrior({None: fitted}, {None: "held-out"})
        out.append(prior("?", row["type_a"], row["type_b"]))
    return out
