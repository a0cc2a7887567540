"""Two GPU types side by side: do the pairs that pack well on one pack well on the other?

The question a cluster operator asks before reusing a compatibility matrix measured on one GPU type (an H100
campaign on an H200, Gavel's V100 pairs on our H100): per pair measured on both, δ and Σ t/t′ on each, how
much they differ, whether δ crosses 1 (a pair worth packing on one and not on the other), and how the two
types rank the pairs (Spearman's ρ). The solo iteration times of the job types both measured give the speed-up
of one type over the other.

Pairs are matched by job type (``--match job``: ``resnet18@64:tf32`` only with itself), by network and batch
(``batch``: names compared without case, ``-`` and ``_``, precision dropped, so Gavel's ``ResNet-18@64`` meets
our ``resnet18@64:tf32``), or by network alone (``model``: the median over the batches each type measured).
Each GPU type's side is compared in the sharing mode given for it, by default every mode both have.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from colocate.analysis.pairs_export import tidy_pairs
from colocate.analysis.results import ResultsSet, solo_table, split_job_type
from common.errors import InputError

MATCHES = ("job", "batch", "model")


@dataclass(frozen=True)
class GpuComparison:
    """The two types' common pairs (``pairs``), their common solo job types (``solo``) and the figures."""

    type_a: str
    type_b: str
    match: str
    pairs: pd.DataFrame
    solo: pd.DataFrame
    summary: dict[str, Any]


def match_key(job_type: str, match: str) -> str:
    """The name a job type is matched by (module docstring)."""
    if match == "job":
        return job_type
    model, batch = split_job_type(job_type)
    name = re.sub(r"[^a-z0-9]", "", model.lower())
    return name if match == "model" or batch is None else f"{name}@{batch}"


def _side(frame: pd.DataFrame, gpu_type: str, sharing: str, match: str) -> pd.DataFrame:
    """One type's pairs in one sharing mode, keyed by (job_a, job_b) in sorted order, medians over duplicates."""
    rows = frame[(frame["gpu_type"] == gpu_type) & (frame["sharing"] == sharing) & (frame["status"] == "ok")]
    keyed = []
    for r in rows.itertuples(index=False):
        a, b = match_key(str(r.job_a), match), match_key(str(r.job_b), match)
        speed_a, speed_b = (r.speed_a, r.speed_b) if a <= b else (r.speed_b, r.speed_a)
        keyed.append({"job_a": min(a, b), "job_b": max(a, b), "delta": r.delta, "sum": r.throughput_sum,
                      "speed_a": speed_a, "speed_b": speed_b})
    if not keyed:
        return pd.DataFrame(columns=["job_a", "job_b", "delta", "sum", "speed_a", "speed_b", "rows"])
    grouped = pd.DataFrame(keyed).groupby(["job_a", "job_b"], sort=True)
    return grouped.median().assign(rows=grouped.size()).reset_index()


def _modes(frame: pd.DataFrame, gpu_type: str, wanted: str | None) -> list[str]:
    present = sorted(set(frame.loc[frame["gpu_type"] == gpu_type, "sharing"].astype(str)))
    if wanted is not None and wanted not in present:
        raise InputError(f"no pairs of {gpu_type} measured with sharing '{wanted}'", source=gpu_type,
                         field="--sharing", valid=", ".join(present) or "none")
    return [wanted] if wanted is not None else present


def _mode_pairs(frame: pd.DataFrame, type_a: str, type_b: str, sharing: tuple[str | None, str | None]
                ) -> list[tuple[str, str]]:
    """Which sharing mode of A meets which of B: the ones given, else every mode both types have."""
    modes_a, modes_b = _modes(frame, type_a, sharing[0]), _modes(frame, type_b, sharing[1])
    if sharing[0] is not None or sharing[1] is not None:
        return [(a, b) for a in modes_a for b in modes_b]
    common = [m for m in modes_a if m in modes_b]
    if not common:
        raise InputError(f"{type_a} has pairs under {', '.join(modes_a) or 'no mode'} and {type_b} under "
                         f"{', '.join(modes_b) or 'no mode'}: no mode in common", source=f"{type_a},{type_b}",
                         field="--sharing", valid="MODE_A,MODE_B to compare two different modes")
    return [(m, m) for m in common]


def _solo(results: ResultsSet, type_a: str, type_b: str, match: str) -> pd.DataFrame:
    solo = solo_table(results)
    times = {}
    for gpu in (type_a, type_b):
        rows = solo[solo["gpu_type"] == gpu]
        keys = [match_key(str(j), match) for j in rows["job_type"]]
        times[gpu] = pd.Series(rows["solo_iter_time_s"].to_numpy(float), index=keys).groupby(level=0).median()
    both = pd.DataFrame({"time_a": times[type_a], "time_b": times[type_b]}).dropna()
    both.index.name = "job"
    return both.assign(speedup_b_over_a=both["time_a"] / both["time_b"]).reset_index()


def _figures(pairs: pd.DataFrame, solo: pd.DataFrame, only: dict[str, int]) -> dict[str, Any]:
    """The summary of a comparison with at least one common pair."""
    delta_a, delta_b = pairs["delta_a"].to_numpy(float), pairs["delta_b"].to_numpy(float)
    flips = pairs[(delta_a > 1) != (delta_b > 1)]
    rho = float(spearmanr(delta_a, delta_b).statistic) if len(pairs) >= 3 else math.nan
    return {
        "pairs": len(pairs), **only,
        "spearman_delta": None if math.isnan(rho) else round(rho, 4),
        "mae_delta": round(float(np.mean(np.abs(delta_a - delta_b))), 4),
        "mean_delta_diff": round(float(np.mean(delta_b - delta_a)), 4),
        "mae_sum": round(float(np.mean(np.abs(pairs["sum_a"] - pairs["sum_b"]))), 4),
        "packing_pairs_a": int((delta_a > 1).sum()), "packing_pairs_b": int((delta_b > 1).sum()),
        "flips": [f"{r.job_a}+{r.job_b} ({r.sharing_a}/{r.sharing_b}): {r.delta_a:.3f} -> {r.delta_b:.3f}"
                  for r in flips.itertuples(index=False)],
        "solo_job_types": len(solo),
        "median_speedup_b_over_a": round(float(solo["speedup_b_over_a"].median()), 4) if len(solo) else None,
    }


def compare_gpu_types(results: ResultsSet, type_a: str, type_b: str, *, match: str = "job",
                      sharing: tuple[str | None, str | None] = (None, None)) -> GpuComparison:
    """Pairs measured on both ``type_a`` and ``type_b`` side by side (module docstring); bad input → InputError."""
    if match not in MATCHES:
        raise InputError(f"match {match!r}", field="--match", valid=", ".join(MATCHES))
    for gpu in (type_a, type_b):
        if gpu not in results.gpu_types:
            raise InputError(f"GPU type '{gpu}' not in the inputs", source=results.label, field="--types",
                             valid=", ".join(results.gpu_types))
    if type_a == type_b:
        raise InputError(f"the same GPU type twice ({type_a})", field="--types", valid="two different GPU types")
    frame = tidy_pairs(results)
    tables, only = [], {"only_a": 0, "only_b": 0}
    for mode_a, mode_b in _mode_pairs(frame, type_a, type_b, sharing):
        side_a, side_b = _side(frame, type_a, mode_a, match), _side(frame, type_b, mode_b, match)
        merged = side_a.merge(side_b, on=["job_a", "job_b"], how="outer", suffixes=("_on_a", "_on_b"),
                              indicator=True)
        only["only_a"] += int((merged["_merge"] == "left_only").sum())
        only["only_b"] += int((merged["_merge"] == "right_only").sum())
        both = merged[merged["_merge"] == "both"]
        tables.append(pd.DataFrame({
            "sharing_a": mode_a, "sharing_b": mode_b, "job_a": both["job_a"], "job_b": both["job_b"],
            "delta_a": both["delta_on_a"], "delta_b": both["delta_on_b"],
            "delta_diff": both["delta_on_b"] - both["delta_on_a"], "sum_a": both["sum_on_a"],
            "sum_b": both["sum_on_b"], "speed_a_on_a": both["speed_a_on_a"], "speed_b_on_a": both["speed_b_on_a"],
            "speed_a_on_b": both["speed_a_on_b"], "speed_b_on_b": both["speed_b_on_b"],
            "rows_a": both["rows_on_a"].astype(int), "rows_b": both["rows_on_b"].astype(int)}))
    pairs = pd.concat(tables, ignore_index=True)  # _mode_pairs gives at least one pairing of modes, or raises
    if pairs.empty:
        raise InputError(f"no pair measured on both {type_a} and {type_b} (matched by {match})",
                         source=results.label, field="--match",
                         valid="batch or model to match job types across naming, batch and precision")
    pairs = pairs.reindex(pairs["delta_diff"].abs().sort_values(ascending=False).index).reset_index(drop=True)
    solo = _solo(results, type_a, type_b, match)
    sizes = {f"image_size_{side}": _image_size(results, gpu) for side, gpu in (("a", type_a), ("b", type_b))}
    return GpuComparison(type_a, type_b, match, pairs, solo, {**_figures(pairs, solo, only), **sizes})


def _image_size(results: ResultsSet, gpu_type: str) -> int | None:
    """The one input size the type's runs used (the results refuse two per type); None when unrecorded (Gavel)."""
    if "image_size" not in results.runs:
        return None
    sizes = pd.to_numeric(results.runs.loc[results.runs["gpu_type"] == gpu_type, "image_size"], errors="coerce")
    sizes = sizes.dropna().unique()
    return int(sizes[0]) if len(sizes) == 1 else None


def write_comparison(comparison: GpuComparison, out_dir: str | Path) -> list[Path]:
    """``pairs-A-vs-B.csv``, ``solo-A-vs-B.csv``, ``summary-A-vs-B.json`` and ``delta-A-vs-B.png`` in ``out_dir``."""
    import json

    from colocate.analysis.plots import plot_gpu_comparison

    out, stem = Path(out_dir), f"{comparison.type_a}-vs-{comparison.type_b}"
    out.mkdir(parents=True, exist_ok=True)
    written = [out / f"pairs-{stem}.csv", out / f"solo-{stem}.csv", out / f"summary-{stem}.json"]
    comparison.pairs.to_csv(written[0], index=False)
    comparison.solo.to_csv(written[1], index=False)
    document = {"type_a": comparison.type_a, "type_b": comparison.type_b, "match": comparison.match,
                **comparison.summary}
    written[2].write_text(json.dumps(document, indent=1) + "\n")
    written.append(plot_gpu_comparison(comparison.pairs, comparison.type_a, comparison.type_b,
                                       out / f"delta-{stem}.png"))
    return written


__all__ = ["MATCHES", "GpuComparison", "compare_gpu_types", "match_key", "write_comparison"]
