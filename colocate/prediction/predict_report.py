"""The δ predictor's evaluation as Markdown: an overview, one table per dataset and protocol, a verdict.

The verdict names every baseline metric the predictor does not beat, by how much and with the paired
standard error of the difference (:meth:`colocate.prediction.predict_eval.EvaluationResult.shortfalls`), and
every dataset whose intervals do not cover within 5 points of their level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from colocate.prediction import predict_eval
from colocate.prediction.predict_eval import COVERAGE_TOLERANCE, PROTOCOL_TITLES, EvaluationResult, ties

TITLE = "δ predictor: leave one pair out, one job type out, one model out"
SETTINGS = ("ridge_lambda", "nuclear_lambda", "evidence_lambda", "level")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _best(result: EvaluationResult, metric: str, lower: bool) -> tuple[str, float]:
    table = result.summary.set_index("method")[metric].drop("predictor").dropna()
    name = str(table.idxmin() if lower else table.idxmax())
    return name, float(table[name])


def overview(results: Sequence[EvaluationResult]) -> list[str]:
    """One row per dataset and protocol: the predictor beside the best baseline of each metric, and coverage."""
    lines = ["| dataset | protocol | predictions | MAE δ: predictor / best baseline | balanced acc. δ > 1: "
             "predictor / best baseline | coverage of the 80 % interval: ratios / δ |", "|---|---|---|---|---|---|"]
    for r in results:
        row = r.summary.set_index("method").loc["predictor"]
        mae_name, mae = _best(r, "mae_delta", lower=True)
        acc_name, acc = _best(r, "balanced_accuracy", lower=False)
        cover_ratio, cover_delta = r.coverage()
        ours_mae = f"{row['mae_delta']:.4f}"
        ours_acc = _fmt(row["balanced_accuracy"])
        ours_mae = f"**{ours_mae}**" if row["mae_delta"] < mae else ours_mae  # bold: the predictor is ahead
        ours_acc = f"**{ours_acc}**" if row["balanced_accuracy"] >= acc else ours_acc
        lines.append(f"| {r.dataset} | {PROTOCOL_TITLES[r.protocol]} | {r.pairs} | {ours_mae} / {mae:.4f} ({mae_name}) | "
                     f"{ours_acc} / {_fmt(acc)} ({acc_name}) | {cover_ratio:.3f} / {cover_delta:.3f} |")
    return lines


def _table(result: EvaluationResult) -> list[str]:
    lines = ["| method | MAE δ | MAE ratio a | MAE ratio b | MAE ratio | accuracy δ>1 | balanced acc. | precision | "
             "recall | coverage ratios | coverage δ | interval (median high/low) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result.summary.itertuples(index=False):
        lines.append(f"| {row.method} | {row.mae_delta:.4f} | {row.mae_ratio_a:.4f} | {row.mae_ratio_b:.4f} | "
                     f"{row.mae_ratio:.4f} | {_fmt(row.accuracy_delta_gt_1)} | {_fmt(row.balanced_accuracy)} | "
                     f"{_fmt(row.precision)} | {_fmt(row.recall)} | {_fmt(row.coverage_ratio)} | "
                     f"{_fmt(row.coverage_delta)} | {_fmt(row.interval_width, 2)} |")
    return lines


def _choices(result: EvaluationResult) -> list[str]:
    """The nested choice for a model never paired, per fold that met one (new_model.py): chosen on the fold's
    training models only."""
    if not result.choices:
        return []
    return [f"A model never paired, as each fold's nested leave-one-model-out (training models only) chose to answer "
            f"it: {'; '.join(result.choices)}.", ""]


def verdict_lines(result: EvaluationResult) -> list[str]:
    falls = result.shortfalls()
    tied = ties(result)
    tie_note = (f" It ties {', '.join(tied)} on the δ > 1 balanced accuracy ({result.pairs} predictions: one moves "
                f"it by about {1 / max(result.pairs, 1):.2f})." if tied else "")
    cover_ratio, cover_delta = result.coverage()
    level = float(result.config.get("level", 0.8))
    coverage = (f" Its {level:.0%} intervals cover {cover_ratio:.1%} of the held-out ratios and {cover_delta:.1%} "
                f"of the δs" + ("." if result.calibrated() else
                                f": **outside** {level - COVERAGE_TOLERANCE:.0%}–{level + COVERAGE_TOLERANCE:.0%}."))
    if not falls:
        return [f"- {result.title}: the predictor beats every baseline on MAE δ and MAE ratio, and is at least as "
                f"good on the δ > 1 decision (balanced accuracy).{tie_note}{coverage}"]
    lines = [f"- {result.title}: the predictor does **not** beat every baseline.{coverage}"]
    for f in falls:
        why = ("the difference is within two paired standard errors (noise at this many predictions)"
               if f["within_noise"] else "the baseline is better by more than two paired standard errors")
        lines.append(f"  - {f['metric']} vs {f['baseline']}: {f['predictor']:.4f} vs {f['baseline_value']:.4f}, "
                     f"worse by {abs(f['predictor'] - f['baseline_value']):.4f} (paired SE {_fmt(f['paired_se'], 4)}): "
                     f"{why}.")
    return lines + ([f"  - {tie_note.strip()}"] if tied else [])


def evaluation_report(results: Sequence[EvaluationResult], *, title: str = TITLE, provenance: Sequence[str] = (),
                      notes: Sequence[str] = ()) -> str:
    """A Markdown report: the overview, one table per dataset and protocol, the verdict."""
    lines = [f"# {title}", "", *provenance, *([""] if provenance else [])]
    lines += [part.strip() + "\n" for part in (predict_eval.__doc__ or "").split("\n\n")[1:6]]
    lines += ["Ratio a/b follow the canonical job-type order of the pair; infeasible (OOM) pairs are not regression "
              "targets and are excluded.", ""]
    if results:
        config = ", ".join(f"{k}={results[0].config[k]}" for k in SETTINGS if k in results[0].config)
        lines += [f"Predictor settings: {config}.", "", "## Overview", "", *overview(results), "", *notes,
                  *([""] if notes else [])]
    for result in results:
        lines += [f"## {result.title}", "",
                  f"{result.measured_pairs} measured pairs over {result.job_types} job types, {result.pairs} held-out "
                  f"predictions; predictor features: {', '.join(result.features) or 'none'}; solo-utilization "
                  f"features: {', '.join(result.baseline_features) or 'none'}; {result.seconds:.1f} s.", "",
                  *_choices(result), *_table(result), ""]
    verdicts = [line for result in results for line in verdict_lines(result)]
    return "\n".join([*lines, "## Verdict", "", *verdicts, ""])


__all__ = ["evaluation_report", "overview", "verdict_lines"]
