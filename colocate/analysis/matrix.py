"""Compatibility matrices: which job types can share a GPU, per GPU type, sharing mode and batch size.

A job type is ``model@batch``. For every (GPU type, sharing mode) — and, where several job types share a
batch size, for each such batch size as well — the measured pairs are pivoted into a square matrix of one
metric (README, "Compatibility matrices"):

* ``delta`` — δ = Σ t / max t′ (thesis eq. 4.1; > 1: co-locating beats running back to back);
* ``throughput_sum`` — Σ t/t′, Gavel's normalized combined throughput (≥ δ);
* ``slowdown`` — the larger of the two slowdowns t′/t.

The matrix is symmetric; its upper triangle (diagonal = a job type paired with itself) is what the CSV and
heatmap show. Beside each value the matrix keeps both jobs' slowdowns, the status (``infeasible`` = out of
memory, ``failed``) and the device-wide GPM occupancy / DRAM bandwidth measured while co-located.
Triples are ranked in a table; the compatibility graph (networkx, GraphML) has job types as nodes and
measured pairs as edges weighted by δ.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import pandas as pd

from colocate.analysis.results import (
    ResultsSet,
    choose_sharing,
    group_table,
    solo_table,
    sort_job_types,
    split_job_type,
)
from common.errors import InputError
from common.names import safe_name
from profiler.results.schema import STATUS_INFEASIBLE, STATUS_OK

METRICS = ("delta", "throughput_sum", "slowdown")
METRIC_LABELS = {
    "delta": "δ = Σt / max t′",
    "throughput_sum": "Σ t/t′ (normalized throughput sum)",
    "slowdown": "max slowdown t′/t",
}
_METRIC_COLUMN = {"delta": "delta", "throughput_sum": "throughput_sum", "slowdown": "max_slowdown"}


@dataclass(frozen=True)
class CompatibilityMatrix:
    """One pivot: square frames indexed by job type (rows = columns = ``job_types``).

    ``values`` holds the metric (NaN where not measured ok), ``status`` the cell status ("" = not measured),
    ``slowdown`` the slowdown of the *row* job when sharing with the *column* job, ``occupancy`` / ``dram``
    the GPM SM-occupancy / DRAM-bandwidth means while co-located (NaN without GPM), ``ci95`` the half-width of
    the metric's 95 % confidence interval where the results give one (δ; NaN otherwise).
    """

    gpu_type: str
    sharing: str
    batch_size: int | None  # None: all job types of this GPU type and sharing mode
    metric: str
    job_types: tuple[str, ...]
    values: pd.DataFrame
    status: pd.DataFrame
    slowdown: pd.DataFrame
    occupancy: pd.DataFrame
    dram: pd.DataFrame
    ci95: pd.DataFrame | None = None

    @property
    def metric_label(self) -> str:
        """The metric's axis label, e.g. for a heatmap's title."""
        return METRIC_LABELS[self.metric]

    @property
    def scope(self) -> str:
        return "all" if self.batch_size is None else f"bs{self.batch_size}"

    @property
    def stem(self) -> str:
        return safe_name(f"matrix_{self.gpu_type}_{self.sharing}_{self.scope}_{self.metric}", None, keep="@+")

    @property
    def measured(self) -> int:
        """Number of measured cells in the upper triangle (any status)."""
        n = len(self.job_types)
        return sum(1 for i in range(n) for j in range(i, n) if self.status.iat[i, j])

    def to_csv_frame(self) -> pd.DataFrame:
        """Upper triangle for people: numbers, ``infeasible``/``failed`` where so, empty where not measured."""
        n = len(self.job_types)
        cells = [["" for _ in range(n)] for _ in range(n)]
        for i in range(n):
            for j in range(i, n):
                status = self.status.iat[i, j]
                value = self.values.iat[i, j]
                if status == STATUS_OK and not math.isnan(value):
                    cells[i][j] = f"{value:.4f}"
                elif status:
                    cells[i][j] = status
        frame = pd.DataFrame(cells, index=list(self.job_types), columns=list(self.job_types))
        frame.index.name = f"{self.metric} ({self.gpu_type}, {self.sharing}, {self.scope})"
        return frame


def build_matrix(
    pairs: pd.DataFrame, gpu_type: str, sharing: str, metric: str = "delta", *,
    batch_size: int | None = None, job_types: Iterable[str] | None = None,
) -> CompatibilityMatrix:
    """Pivot the pairs of one GPU type and sharing mode (optionally only those with both jobs at ``batch_size``)."""
    if metric not in METRICS:
        raise InputError(f"unknown metric '{metric}'", field="--metric", valid=", ".join(METRICS))
    subset = pairs[(pairs["gpu_type"] == gpu_type) & (pairs["sharing"] == sharing)]
    if batch_size is not None:
        same = [split_job_type(a)[1] == batch_size and split_job_type(b)[1] == batch_size
                for a, b in zip(subset["type_a"], subset["type_b"])]
        subset = subset[same]
    types = sort_job_types(job_types) if job_types is not None else sort_job_types(
        list(subset["type_a"]) + list(subset["type_b"]))
    position = {t: i for i, t in enumerate(types)}
    n = len(types)
    values = [[math.nan] * n for _ in range(n)]
    status = [[""] * n for _ in range(n)]
    slowdown = [[math.nan] * n for _ in range(n)]
    occupancy = [[math.nan] * n for _ in range(n)]
    dram = [[math.nan] * n for _ in range(n)]
    ci95 = [[math.nan] * n for _ in range(n)]
    ci_column = f"{_METRIC_COLUMN[metric]}_ci95"  # only δ has one in the results
    column = _METRIC_COLUMN[metric]
    for row in subset.itertuples(index=False):
        if row.type_a not in position or row.type_b not in position:
            continue
        i, j = position[row.type_a], position[row.type_b]
        for x, y, mine in ((i, j, row.slowdown_a), (j, i, row.slowdown_b)):
            status[x][y] = row.status
            values[x][y] = getattr(row, column) if row.status == STATUS_OK else math.nan
            slowdown[x][y] = mine if row.status == STATUS_OK else math.nan
            occupancy[x][y] = row.gpm_sm_occupancy_mean
            dram[x][y] = row.gpm_dram_bw_util_mean
            ci95[x][y] = float(getattr(row, ci_column, math.nan)) if row.status == STATUS_OK else math.nan
        if i == j:  # a self-pair: both jobs are the same type; show the worse slowdown
            slowdown[i][i] = max(row.slowdown_a, row.slowdown_b) if row.status == STATUS_OK else math.nan

    def frame(data: list[list[Any]]) -> pd.DataFrame:
        return pd.DataFrame(data, index=types, columns=types)

    return CompatibilityMatrix(gpu_type, sharing, batch_size, metric, tuple(types), frame(values).astype(float),
                               frame(status), frame(slowdown).astype(float), frame(occupancy).astype(float),
                               frame(dram).astype(float), frame(ci95).astype(float))


def build_matrices(pairs: pd.DataFrame, metric: str = "delta", *, by_batch: bool = True) -> list[CompatibilityMatrix]:
    """All matrices: per (GPU type, sharing mode) one over all job types, and one per shared batch size.

    A per-batch-size matrix is made only when at least two job types share that batch size and it would
    differ from the all-types matrix.
    """
    if metric not in METRICS:
        raise InputError(f"unknown metric '{metric}'", field="--metric", valid=", ".join(METRICS))
    matrices: list[CompatibilityMatrix] = []
    if pairs.empty:
        return matrices
    for (gpu_type, sharing), group in pairs.groupby(["gpu_type", "sharing"], sort=True):
        everything = build_matrix(group, gpu_type, sharing, metric)
        matrices.append(everything)
        if not by_batch:
            continue
        batches: dict[int, set[str]] = {}
        for job_type in everything.job_types:
            batch = split_job_type(job_type)[1]
            if batch is not None:
                batches.setdefault(batch, set()).add(job_type)
        if len(batches) < 2:
            continue
        for batch, members in sorted(batches.items()):
            if len(members) < 2:
                continue
            matrix = build_matrix(group, gpu_type, sharing, metric, batch_size=batch, job_types=members)
            if matrix.measured:
                matrices.append(matrix)
    return matrices


def rank_triples(triples: pd.DataFrame) -> pd.DataFrame:
    """Triples ranked per (GPU type, sharing) by δ, best first; infeasible and failed ones last (rank empty)."""
    if triples.empty:
        return triples.assign(rank=pd.Series(dtype="Int64"))
    ranked = []
    for _, group in triples.groupby(["gpu_type", "sharing"], sort=True):
        ok = group[group["status"] == STATUS_OK].sort_values("delta", ascending=False)
        rest = group[group["status"] != STATUS_OK]
        ok = ok.assign(rank=range(1, len(ok) + 1))
        rest = rest.assign(rank=pd.NA)
        ranked.append(pd.concat([ok, rest], ignore_index=True))
    frame = pd.concat(ranked, ignore_index=True)
    frame["rank"] = frame["rank"].astype("Int64")
    return frame[["rank", *[c for c in frame.columns if c != "rank"]]]


def compatibility_graph(pairs: pd.DataFrame, solo: pd.DataFrame, gpu_type: str, sharing: str) -> nx.Graph:
    """Job types as nodes (solo t, peak memory), measured ok pairs as edges with weight δ.

    Edge attributes: ``weight`` = ``delta``, ``throughput_sum``, ``type_a``/``type_b`` with ``ratio_a``/``ratio_b``
    (t/t′ of that job), ``beneficial`` (δ > 1). Infeasible pairs are listed on their nodes (``infeasible_with``)
    rather than as edges, so graph algorithms never pick them.
    """
    graph = nx.Graph(gpu_type=gpu_type, sharing=sharing, weight="delta")
    gpu_solo = solo[solo["gpu_type"] == gpu_type]
    for row in gpu_solo.itertuples(index=False):
        attributes = {"model": str(row.model), "solo_iter_time_s": float(row.solo_iter_time_s)}
        if not pd.isna(row.batch_size):
            attributes["batch_size"] = int(row.batch_size)
        if not pd.isna(row.peak_memory_mib):
            attributes["peak_memory_mib"] = float(row.peak_memory_mib)
        graph.add_node(str(row.job_type), **attributes)
    subset = pairs[(pairs["gpu_type"] == gpu_type) & (pairs["sharing"] == sharing)]
    infeasible: dict[str, list[str]] = {}
    for row in subset.itertuples(index=False):
        a, b = str(row.type_a), str(row.type_b)
        graph.add_node(a)
        graph.add_node(b)
        if row.status == STATUS_INFEASIBLE:
            infeasible.setdefault(a, []).append(b)
            if a != b:
                infeasible.setdefault(b, []).append(a)
            continue
        if row.status != STATUS_OK:
            continue
        attributes = {"weight": float(row.delta), "delta": float(row.delta),
                      "throughput_sum": float(row.throughput_sum), "type_a": a, "type_b": b,
                      "ratio_a": float(row.ratio_a), "ratio_b": float(row.ratio_b),
                      "beneficial": bool(row.delta > 1.0), "repeats": int(row.repeats)}
        for name in ("gpm_sm_occupancy_mean", "gpm_dram_bw_util_mean"):
            value = getattr(row, name)
            if not pd.isna(value):
                attributes[name] = float(value)
        graph.add_edge(a, b, **attributes)
    for node, partners in infeasible.items():
        graph.nodes[node]["infeasible_with"] = ";".join(sort_job_types(partners))
    return graph


@dataclass(frozen=True)
class MatrixOutputs:
    """What ``colocate matrix`` wrote, for the summary printed at the end."""

    matrices: tuple[CompatibilityMatrix, ...]
    files: tuple[Path, ...]
    pairs: pd.DataFrame
    triples: pd.DataFrame


def write_matrices(
    results: ResultsSet, out_dir: str | Path, *, metric: str = "delta", by_batch: bool = True, plots: bool = True,
) -> MatrixOutputs:
    """Build every matrix of ``results`` and write CSV, PNG heatmaps, the triples ranking and GraphML files."""
    out = Path(out_dir)
    pairs = group_table(results, 2)
    triples = group_table(results, 3)
    if pairs.empty and triples.empty:
        raise InputError("no pair or triple runs to build matrices from", source=results.label, field="kind",
                         valid="a campaign with group_sizes including 2 or 3")
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    matrices = build_matrices(pairs, metric, by_batch=by_batch)
    pairs_path = out / "pairs.csv"
    pairs.to_csv(pairs_path, index=False)
    files.append(pairs_path)
    if plots:
        from colocate.analysis.plots import plot_matrix  # matplotlib only when drawing
    for matrix in matrices:
        csv_path = out / f"{matrix.stem}.csv"
        matrix.to_csv_frame().to_csv(csv_path)
        files.append(csv_path)
        if plots:
            png_path = out / f"{matrix.stem}.png"
            plot_matrix(matrix, png_path)
            files.append(png_path)
    ranked = rank_triples(triples)
    if not ranked.empty:
        triples_path = out / "triples.csv"
        ranked.to_csv(triples_path, index=False)
        files.append(triples_path)
    solo = solo_table(results)
    for gpu_type, sharing in sorted(set(zip(pairs["gpu_type"], pairs["sharing"]))):
        graph = compatibility_graph(pairs, solo, gpu_type, sharing)
        graph_path = out / safe_name(f"graph_{gpu_type}_{sharing}.graphml", None, keep="@+")
        nx.write_graphml(graph, graph_path)
        files.append(graph_path)
    return MatrixOutputs(tuple(matrices), tuple(files), pairs, ranked)


def measured_colocation_table(results: ResultsSet, *, sharing: str | None = None) -> pd.DataFrame:
    """Measured pairs as the scheduler's colocation table: ratios t/t′ (0, 0 = infeasible), one sharing mode.

    Extra columns: ``delta``, ``repeats``, ``source`` (``measured``), ``sharing``. Failed or skipped pairs
    are left out (not a measurement).
    """
    pairs = group_table(results, 2)
    if pairs.empty:
        raise InputError("no pairs measured", source=results.label, field="kind",
                         valid="a campaign with group_sizes including 2, or a Gavel file")
    mode = choose_sharing(pairs["sharing"], sharing, results.label)
    pairs = pairs[(pairs["sharing"] == mode) & pairs["status"].isin([STATUS_OK, STATUS_INFEASIBLE])]
    ok = pairs["status"] == STATUS_OK
    table = pd.DataFrame({
        "gpu_type": pairs["gpu_type"], "type_a": pairs["type_a"], "type_b": pairs["type_b"],
        "ratio_a": pairs["ratio_a"].where(ok, 0.0), "ratio_b": pairs["ratio_b"].where(ok, 0.0),
        "delta": pairs["delta"].where(ok, 0.0), "repeats": pairs["repeats"], "source": "measured", "sharing": mode,
    })
    # A ratio above the table's bound means the solo baseline was measured slower than the pair (noise,
    # e.g. a busy CPU): keep the row, clip it, and flag it so users can see which.
    from scheduler.formats.colocation_table import MAX_RATIO

    table["clipped"] = (table["ratio_a"] > MAX_RATIO) | (table["ratio_b"] > MAX_RATIO)
    table["ratio_a"] = table["ratio_a"].clip(upper=MAX_RATIO)
    table["ratio_b"] = table["ratio_b"].clip(upper=MAX_RATIO)
    return table.reset_index(drop=True)


def measured_pairs(results_dir: Path) -> tuple[tuple[str, str, str, float, float], ...]:
    """A results directory's measured pairs as colocation-table rows (gpu_type, type_a, type_b, ratio_a,
    ratio_b): what ``--colocation DIR`` means on every command that takes it."""
    from colocate.analysis.results import load_results

    frame = measured_colocation_table(load_results(results_dir))
    return tuple((str(r.gpu_type), str(r.type_a), str(r.type_b), float(r.ratio_a), float(r.ratio_b))
                 for r in frame.itertuples(index=False))


def read_colocation(path: Path | None) -> Any:  # -> ColocationTable | None
    """The ``--colocation`` table, read before the command starts its work (a bad file is an error before any
    progress): a CSV as it is, a results directory's measured pairs as a table."""
    from scheduler.formats.colocation_table import load_colocation_table
    from scheduler.model.colocation import ColocationTable

    if path is None:
        return None
    if Path(path).is_dir():
        return ColocationTable.from_rows(measured_pairs(Path(path)))
    return load_colocation_table(path)
