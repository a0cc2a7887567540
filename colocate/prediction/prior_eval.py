"""Does the scheduler's prior earn its place? Leave-one-pair-out on colocation tables, against the job-type mean.

The prior the scheduler plans with before a pair has run (:mod:`scheduler.learning.prior`) sees only a
colocation table: job types and measured ratios, no solo features. This evaluation gives it exactly that:
each feasible pair of a set is held out in turn, the prior is fitted on the set's other pairs and predicts
the held-out pair's two ratios; the **job-type mean** baseline predicts r(a|b) as the mean of a's ratios over
its other pairs (the training mean when a has none). The decision scored is the scheduler's: *pack* when
the two jobs together do more than one alone, ``r_a + r_b > 1`` (accuracy and balanced accuracy, the mean
of both classes' recalls), beside the mean absolute error of that sum.

Sets: the pairs the project ships (``scheduler/data/colocation-default.csv``; its GPU types that are copies
of another are evaluated once), Gavel's measured K80/P100/V100 pairs (``scheduler/data/gavel_throughputs_sf1.json``)
and the project's own measured CPU pairs (``results/cpu-pairs``) when present.

    python -m colocate.prediction.prior_eval [--out results/predict/prior-evaluation.md]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from scheduler.formats.colocation_table import MAX_RATIO
from scheduler.learning.prior import PredictorConfig, fit_table_prior

METHODS = ("prior", "job-type-mean")


def _victim_means(train: pd.DataFrame) -> tuple[dict[str, float], float]:
    both = pd.concat([train[["type_a", "ratio_a"]].set_axis(["t", "r"], axis=1),
                      train[["type_b", "ratio_b"]].set_axis(["t", "r"], axis=1)])
    return both.groupby("t")["r"].mean().to_dict(), float(both["r"].mean())


def leave_one_out(gpu: str, pairs: pd.DataFrame, config: PredictorConfig | None = None) -> pd.DataFrame:
    """One row per held-out feasible pair: the true ratios and each method's prediction."""
    ok = pairs[(pairs["ratio_a"] > 0) & (pairs["ratio_b"] > 0)].reset_index(drop=True).copy()
    ok[["ratio_a", "ratio_b"]] = ok[["ratio_a", "ratio_b"]].clip(upper=MAX_RATIO)
    ok["gpu_type"] = gpu
    rows = []
    for i, held in ok.iterrows():
        train = ok.drop(index=i)
        prior = fit_table_prior(train, config)
        pa, pb = prior(gpu, held["type_a"], held["type_b"])
        means, overall = _victim_means(train)
        ja, jb = means.get(held["type_a"], overall), means.get(held["type_b"], overall)
        rows.append({"type_a": held["type_a"], "type_b": held["type_b"], "ratio_a": held["ratio_a"],
                     "ratio_b": held["ratio_b"], "prior_a": pa, "prior_b": pb, "job-type-mean_a": ja,
                     "job-type-mean_b": jb})
    return pd.DataFrame(rows)


def score(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per method: accuracy and balanced accuracy of ``Σr > 1``, MAE of Σr."""
    truth_sum = predictions["ratio_a"] + predictions["ratio_b"]
    truth = truth_sum.to_numpy() > 1
    out = []
    for method in METHODS:
        total = predictions[f"{method}_a"] + predictions[f"{method}_b"]
        guess = total.to_numpy() > 1
        recalls = [float((guess & truth).sum() / truth.sum()) if truth.any() else math.nan,
                   float((~guess & ~truth).sum() / (~truth).sum()) if (~truth).any() else math.nan]
        known = [r for r in recalls if not math.isnan(r)]
        out.append({"method": method, "pairs": len(truth), "pack_share": float(truth.mean()),
                    "accuracy": float((guess == truth).mean()), "balanced_accuracy": float(np.mean(known)),
                    "mae_sum": float((total - truth_sum).abs().mean())})
    return pd.DataFrame(out)


def datasets(root: Path = Path(".")) -> Iterator[tuple[str, str, pd.DataFrame]]:
    """(set name, GPU type, pairs) for every evaluation set available."""
    from colocate.analysis.gavel import load_inputs
    from colocate.prediction.predict import make_datasets
    from scheduler.formats.bundled import default_colocation, gavel_throughputs
    from scheduler.formats.colocation_table import read_colocation_table

    shipped = read_colocation_table(default_colocation())
    seen: list[pd.DataFrame] = []
    for gpu, rows in shipped.groupby("gpu_type", sort=True):
        rows = rows[["type_a", "type_b", "ratio_a", "ratio_b"]].reset_index(drop=True)
        if any(rows.equals(other) for other in seen):
            continue  # a GPU type whose rows copy another's
        seen.append(rows)
        yield "shipped (colocation-default.csv)", str(gpu), rows
    for d in make_datasets(load_inputs([], [gavel_throughputs()], gpu_types=["k80", "p100", "v100"])):
        yield "Gavel", d.gpu_type, d.pairs[["type_a", "type_b", "ratio_a", "ratio_b"]]
    cpu = root / "results" / "cpu-pairs"
    if cpu.is_dir():
        for d in make_datasets(load_inputs([cpu], [])):
            yield "ours (results/cpu-pairs)", d.gpu_type, d.pairs[["type_a", "type_b", "ratio_a", "ratio_b"]]


def evaluate(config: PredictorConfig | None = None) -> pd.DataFrame:
    frames = []
    for name, gpu, pairs in datasets():
        summary = score(leave_one_out(gpu, pairs, config))
        summary.insert(0, "gpu_type", gpu)
        summary.insert(0, "set", name)
        frames.append(summary)
    return pd.concat(frames, ignore_index=True)


def report(table: pd.DataFrame) -> str:
    lines = ["# The scheduler's pair prior: leave-one-pair-out against the job-type mean", "",
             (__doc__ or "").split("\n\n")[1].replace("\n", " "), "",
             "Command: `python -m colocate.prediction.prior_eval --out results/predict/prior-evaluation.md`.", "",
             "| set | GPU type | pairs | share Σr>1 | method | accuracy | balanced acc. | MAE Σr |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples(index=False):
        lines.append(f"| {r.set} | {r.gpu_type} | {r.pairs} | {r.pack_share:.2f} | {r.method} | {r.accuracy:.3f} | "
                     f"{r.balanced_accuracy:.3f} | {r.mae_sum:.3f} |")
    lines += ["", "## Verdict", ""]
    for (name, gpu), part in table.groupby(["set", "gpu_type"], sort=False):
        ours, base = part.set_index("method").loc["prior"], part.set_index("method").loc["job-type-mean"]
        ok = ours["accuracy"] >= base["accuracy"] and ours["balanced_accuracy"] >= base["balanced_accuracy"]
        lines.append(f"- {name} {gpu}: the prior is {'at least as accurate as' if ok else 'LESS accurate than'} the "
                     f"job-type mean on the pack decision (accuracy {ours['accuracy']:.3f} vs {base['accuracy']:.3f}, "
                     f"balanced {ours['balanced_accuracy']:.3f} vs {base['balanced_accuracy']:.3f}).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Leave-one-pair-out evaluation of the scheduler's pair prior.")
    parser.add_argument("--out", type=Path, default=None, help="Write the markdown report here.")
    args = parser.parse_args(argv)
    text = report(evaluate())
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
