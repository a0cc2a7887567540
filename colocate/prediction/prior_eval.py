"""Does the scheduler's prior earn its place? Every protocol on colocation tables, against the job-type mean.

The prior the scheduler plans with before a pair has run (:mod:`scheduler.learning.predictor.prior`) sees only a
colocation table: job types and measured ratios per GPU type, no solo features. This evaluation gives it exactly
that, under the protocols of :mod:`scheduler.learning.predictor.folds`: each feasible pair held out of its GPU type in
turn (its measurements on the set's other GPU types stay), each job type held out of every GPU type, and each
model (all its batch sizes) held out of every GPU type. The
**job-type mean** baseline predicts r(a|b) as the mean of a's ratios over its other pairs (the training mean when
a has none). The decision scored is the scheduler's: *pack* when the two jobs together do more than one alone,
``r_a + r_b > 1`` (accuracy and balanced accuracy, the mean of both classes' recalls), beside the mean absolute
error of that sum and the coverage of the prior's 80 % intervals on the ratios (each from the residuals of the
evaluation's other folds, :func:`scheduler.learning.predictor.conformal.cross_conformal`).

Sets: the pairs the project ships (``scheduler/data/colocation-default.csv``; its GPU types that are copies
of another are evaluated once), Gavel's measured K80/P100/V100 pairs (``scheduler/data/gavel_throughputs_sf1.json``)
and the project's own measured CPU and H100 pairs (``results/cpu-pairs``, ``results/h100/...``) when present.

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

from scheduler.learning.predictor.config import PredictorConfig
from scheduler.learning.predictor.conformal import cross_conformal
from scheduler.learning.predictor.evidence import LEVELS, PairSet
from scheduler.learning.predictor.folds import PROTOCOL_TITLES as PROTOCOL_NAMES
from scheduler.learning.predictor.folds import PROTOCOLS, fold_fits, folds
from scheduler.learning.predictor.prior import table_datasets

METHODS = ("prior", "job-type-mean")


def held_out(pairs: PairSet, d: int, protocol: str, config: PredictorConfig) -> pd.DataFrame:
    """One row per held-out prediction: the true ratios, the prior's (with intervals) and the job-type mean's."""
    from threadpoolctl import threadpool_limits

    truth_a, truth_b = pairs.pair_ratios(d)
    ratio = np.exp(pairs.y)
    parts = []
    with threadpool_limits(limits=1, user_api="blas"):
        for fit in fold_fits(pairs, d, protocol, config):
            here = fit.mask & (pairs.dataset == d)
            sums, counts = np.zeros(len(pairs.types)), np.zeros(len(pairs.types))
            np.add.at(sums, pairs.victim[here], ratio[here])
            np.add.at(counts, pairs.victim[here], 1.0)
            overall = float(ratio[here].mean()) if here.any() else 0.5
            mean = np.where(counts > 0, sums / np.maximum(counts, 1.0), overall)
            parts.append(pd.DataFrame({
                "fold": fit.number, "ratio_a": truth_a[fit.fold.pairs], "ratio_b": truth_b[fit.fold.pairs],
                "prior_a": fit.ratio_a, "prior_b": fit.ratio_b, "level_a": fit.level_a, "level_b": fit.level_b,
                "job-type-mean_a": mean[fit.a], "job-type-mean_b": mean[fit.b]}))
    frame = pd.concat(parts, ignore_index=True)
    n = len(frame)
    low, high = cross_conformal(np.concatenate([frame["prior_a"], frame["prior_b"]]),
                                np.concatenate([frame["ratio_a"], frame["ratio_b"]]),
                                np.concatenate([frame["level_a"], frame["level_b"]]),
                                np.concatenate([frame["fold"], frame["fold"]]), config.level, len(LEVELS))
    frame["inside_a"] = (frame["ratio_a"] >= low[:n]) & (frame["ratio_a"] <= high[:n])
    frame["inside_b"] = (frame["ratio_b"] >= low[n:]) & (frame["ratio_b"] <= high[n:])
    return frame


def score(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per method: accuracy and balanced accuracy of ``Σr > 1``, MAE of Σr; the prior's interval coverage."""
    truth_sum = predictions["ratio_a"] + predictions["ratio_b"]
    truth = truth_sum.to_numpy() > 1
    out = []
    for method in METHODS:
        total = predictions[f"{method}_a"] + predictions[f"{method}_b"]
        guess = total.to_numpy() > 1
        recalls = [float((guess & truth).sum() / truth.sum()) if truth.any() else math.nan,
                   float((~guess & ~truth).sum() / (~truth).sum()) if (~truth).any() else math.nan]
        known = [r for r in recalls if not math.isnan(r)]
        coverage = float(pd.concat([predictions["inside_a"], predictions["inside_b"]]).mean()) \
            if method == "prior" else math.nan
        out.append({"method": method, "pairs": len(truth), "pack_share": float(truth.mean()),
                    "accuracy": float((guess == truth).mean()), "balanced_accuracy": float(np.mean(known)),
                    "mae_sum": float((total - truth_sum).abs().mean()), "coverage": coverage})
    return pd.DataFrame(out)


def datasets(root: Path = Path(".")) -> Iterator[tuple[str, pd.DataFrame]]:
    """(set name, table frame) for every evaluation set available; a set's GPU types are evaluated together."""
    from colocate.analysis.gavel import load_inputs
    from colocate.prediction.predict import make_datasets
    from scheduler.formats.bundled import default_colocation, gavel_throughputs
    from scheduler.formats.colocation_table import read_colocation_table

    shipped = read_colocation_table(default_colocation())
    seen: list[pd.DataFrame] = []
    keep = []
    for gpu, rows in shipped.groupby("gpu_type", sort=True):
        body = rows[["type_a", "type_b", "ratio_a", "ratio_b"]].reset_index(drop=True)
        if not any(body.equals(other) for other in seen):  # a GPU type whose rows copy another's
            seen.append(body)
            keep.append(gpu)
    yield "shipped (colocation-default.csv)", shipped[shipped["gpu_type"].isin(keep)]
    sources = [("Gavel", [], [gavel_throughputs()]), ("ours (results/cpu-pairs)", [root / "results" / "cpu-pairs"], []),
               ("ours (results/h100)", [root / "results" / "h100" / "first-call", root / "results" / "h100" / "thesis-grid"],
                [])]
    for name, dirs, gavel in sources:
        if not all(d.is_dir() for d in dirs):
            continue
        found = make_datasets(load_inputs(dirs, gavel))
        several = len({d.sharing for d in found}) > 1  # an H100 under MPS and time-sliced: two "GPU types" here
        parts = [d.pairs.assign(gpu_type=d.key if several else d.gpu_type) for d in found]
        yield name, pd.concat(parts, ignore_index=True)[["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b"]]


def evaluate(config: PredictorConfig | None = None) -> pd.DataFrame:
    config = config or PredictorConfig()
    frames = []
    for name, frame in datasets():
        pairs = PairSet(table_datasets(frame))
        for d, gpu in enumerate(pairs.names):
            for protocol in PROTOCOLS:
                if not folds(pairs, d, protocol):  # one model in the table: no leave-one-model-out fold
                    continue
                summary = score(held_out(pairs, d, protocol, config))
                summary.insert(0, "protocol", PROTOCOL_NAMES[protocol])
                summary.insert(0, "gpu_type", gpu)
                summary.insert(0, "set", name)
                frames.append(summary)
    return pd.concat(frames, ignore_index=True)


def report(table: pd.DataFrame) -> str:
    lines = ["# The scheduler's pair prior: every protocol against the job-type mean", "",
             (__doc__ or "").split("\n\n")[1].replace("\n", " "), "",
             "Command: `python -m colocate.prediction.prior_eval --out results/predict/prior-evaluation.md`.", "",
             "| set | GPU type | protocol | predictions | share Σr>1 | method | accuracy | balanced acc. | MAE Σr | "
             "coverage of the 80 % interval |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples(index=False):
        cover = "–" if r.coverage != r.coverage else f"{r.coverage:.3f}"
        lines.append(f"| {r.set} | {r.gpu_type} | {r.protocol} | {r.pairs} | {r.pack_share:.2f} | {r.method} | "
                     f"{r.accuracy:.3f} | {r.balanced_accuracy:.3f} | {r.mae_sum:.3f} | {cover} |")
    lines += ["", "## Verdict", ""]
    for (name, gpu, protocol), part in table.groupby(["set", "gpu_type", "protocol"], sort=False):
        ours, base = part.set_index("method").loc["prior"], part.set_index("method").loc["job-type-mean"]
        ok = ours["accuracy"] >= base["accuracy"] and ours["balanced_accuracy"] >= base["balanced_accuracy"]
        lines.append(f"- {name} {gpu}, {protocol}: the prior is {'at least as accurate as' if ok else 'LESS accurate than'}"
                     f" the job-type mean on the pack decision (accuracy {ours['accuracy']:.3f} vs "
                     f"{base['accuracy']:.3f}, balanced {ours['balanced_accuracy']:.3f} vs "
                     f"{base['balanced_accuracy']:.3f}); its intervals cover {ours['coverage']:.1%}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Both protocols' evaluation of the scheduler's pair prior.")
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
