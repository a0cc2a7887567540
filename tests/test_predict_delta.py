"""δ predictor: matrix completion, evidence levels, filling the colocation table with intervals, the protocols
against the baselines, the intervals' coverage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from analysis_fixtures import cpu_campaign  # noqa: F401  (session fixture)

from colocate.analysis.gavel import gavel_results
from colocate.analysis.results import load_results
from colocate.prediction.predict import feature_matrix, make_datasets, predict_dataset, predict_datasets
from colocate.prediction.predict_eval import METHODS, EvaluationResult, decision_metrics, evaluate, summarise
from colocate.prediction.predict_report import evaluation_report
from common.errors import InputError
from scheduler.formats.colocation_table import MAX_RATIO, read_colocation_table, validate_colocation_table
from scheduler.learning.predictor.config import PredictorConfig
from scheduler.learning.predictor.ratio_model import fit_arrays, soft_impute


@pytest.fixture(scope="module")
def gavel_path(gavel_throughputs: Path) -> Path:
    return gavel_throughputs


def test_soft_impute_recovers_a_low_rank_matrix() -> None:
    rng = np.random.default_rng(0)
    n = 20
    truth = rng.normal(size=(n, 2)) @ rng.normal(size=(2, n))
    mask = rng.random((n, n)) < 0.6
    rows, cols = np.nonzero(mask)
    estimate = soft_impute(rows, cols, truth[mask], n, lam=0.05, iters=2000, tol=1e-9)
    hidden = ~mask
    error = np.abs(estimate[hidden] - truth[hidden]).mean()
    assert error < 0.1 * np.abs(truth[hidden]).mean()


def test_fit_reproduces_training_pairs_better_than_their_spread(gavel_path: Path) -> None:
    dataset = make_datasets(gavel_results(gavel_path, gpu_types=("v100",)))[0]
    features, used = feature_matrix(dataset.solo)
    assert used == ["solo_iter_time_s", "batch_size"]  # all Gavel's file has measured alone
    index = {t: i for i, t in enumerate(features.index)}
    a = np.array([index[t] for t in dataset.pairs["type_a"]])
    b = np.array([index[t] for t in dataset.pairs["type_b"]])
    target = np.log(np.concatenate([dataset.pairs["ratio_a"], dataset.pairs["ratio_b"]]))
    model = fit_arrays(np.concatenate([a, b]), np.concatenate([b, a]), target, features.to_numpy(), PredictorConfig())
    fitted = np.exp(model.predict_log(a, b))
    truth = dataset.pairs["ratio_a"].to_numpy()
    assert np.abs(fitted - truth).mean() < 0.5 * np.abs(truth - truth.mean()).mean()


def test_gavel_held_out_pairs_are_predicted_from_the_others(gavel_path: Path) -> None:
    from dataclasses import replace

    dataset = make_datasets(gavel_results(gavel_path, gpu_types=("v100",)))[0]
    pairs = dataset.pairs
    held = pairs.iloc[::10]
    training = replace(dataset, pairs=pairs.drop(index=held.index).reset_index(drop=True))
    table = predict_dataset(training).set_index(["type_a", "type_b"])
    guesses = table.loc[list(zip(held["type_a"], held["type_b"]))]
    assert set(guesses["source"]) == {"predicted"}
    assert (guesses["low_a"] <= guesses["high_a"]).all() and (guesses["delta_low"] <= guesses["delta_high"]).all()
    inside = (held["ratio_a"].to_numpy() >= guesses["low_a"].to_numpy()) & (
        held["ratio_a"].to_numpy() <= guesses["high_a"].to_numpy())
    assert 0.6 <= inside.mean() <= 0.97  # 80 % intervals on pairs the fit never saw
    ours = np.abs(guesses["ratio_a"].to_numpy() - held["ratio_a"].to_numpy()).mean()
    mean_guess = np.concatenate([training.pairs["ratio_a"], training.pairs["ratio_b"]]).mean()
    baseline = np.abs(mean_guess - held["ratio_a"].to_numpy()).mean()
    assert ours < 0.6 * baseline


@pytest.mark.slow
def test_both_protocols_beat_every_baseline_on_gavel_with_calibrated_intervals(gavel_path: Path) -> None:
    datasets = make_datasets(gavel_results(gavel_path))  # K80, P100, V100: each is evidence for the others
    results = evaluate(datasets, only=["v100/timeslice", "p100/timeslice"], protocols=("pair", "type"))
    assert [(r.gpu_type, r.protocol) for r in results] == [("p100", "pair"), ("p100", "type"), ("v100", "pair"),
                                                          ("v100", "type")]
    for result in results:
        summary = result.summary.set_index("method")
        assert set(summary.index) == set(METHODS)
        assert result.beats_baselines(), summary.to_string()
        assert result.calibrated(), result.coverage()  # the 80 % intervals cover 75-85 % of held-out ratios
        assert 0.7 <= result.coverage()[1] <= 0.9
    pair, new_type = results[2], results[3]
    assert pair.pairs == pair.measured_pairs > 300 and new_type.pairs > pair.pairs  # a pair once per member
    assert set(pair.predictions["evidence"]) <= {"pair", "models"}  # the same pair on the K80 and P100 stays
    assert set(new_type.predictions["evidence"]) <= {"new type, model known", "new type", "new model"}
    mae = lambda r: r.summary.set_index("method").loc["predictor", "mae_delta"]  # noqa: E731
    assert mae(pair) < mae(new_type)  # a new job type is the harder question
    width = lambda r: r.summary.set_index("method").loc["predictor", "interval_width"]  # noqa: E731
    assert width(pair) < width(new_type)  # ... and its intervals say so


def test_table_fills_every_pair_and_keeps_measurements(cpu_campaign: Path) -> None:  # noqa: F811
    datasets = make_datasets(load_results(cpu_campaign))
    assert [(d.gpu_type, d.sharing) for d in datasets] == [("cpu", "timeslice")]
    dataset = datasets[0]
    table = predict_dataset(dataset)
    types = dataset.job_types
    assert len(table) == len(types) * (len(types) + 1) // 2
    measured = table[table["source"] == "measured"].set_index(["type_a", "type_b"])
    for row in dataset.pairs.itertuples():
        # measured values are kept, capped at the table's bound (a loaded CPU can time a pair above it)
        assert measured.loc[(row.type_a, row.type_b), "ratio_a"] == pytest.approx(min(row.ratio_a, MAX_RATIO))
    validate_colocation_table(table)  # the scheduler accepts it


def test_cpu_both_protocols_run_and_report(cpu_campaign: Path) -> None:  # noqa: F811
    dataset = make_datasets(load_results(cpu_campaign))[0]
    result, by_type = evaluate([dataset])  # one model in the campaign: no leave-one-model-out fold
    assert len(result.predictions) == len(METHODS) * len(dataset.pairs)
    pairs_with_two_types = int((dataset.pairs["type_a"] != dataset.pairs["type_b"]).sum())
    assert by_type.pairs == len(dataset.pairs) + pairs_with_two_types  # each member's fold predicts the pair
    assert result.summary["mae_ratio"].notna().all()
    assert ((result.predictions["pred_ratio_a"] > 0) & (result.predictions["pred_ratio_a"] <= 1.5)).all()


def test_unmeasured_pairs_are_predicted_between_job_types_with_baselines(gavel_path: Path) -> None:
    dataset = make_datasets(gavel_results(gavel_path, gpu_types=("k80",)))[0]
    from dataclasses import replace

    sparse = replace(dataset, pairs=dataset.pairs.iloc[::3].reset_index(drop=True))
    table = predict_dataset(sparse, PredictorConfig())
    counts = table["source"].value_counts()
    assert counts["measured"] == len(sparse.pairs)
    assert counts["predicted"] == 351 - len(sparse.pairs) - len(sparse.infeasible)
    predicted = table[table["source"] == "predicted"]
    assert predicted["ratio_a"].between(0.01, 1.5).all() and predicted["delta"].gt(0).all()


def test_too_few_pairs_is_an_input_error(cpu_campaign: Path) -> None:  # noqa: F811
    dataset = make_datasets(load_results(cpu_campaign))[0]
    from dataclasses import replace

    with pytest.raises(InputError, match="at least 2"):
        predict_dataset(replace(dataset, pairs=dataset.pairs.iloc[:1]))
    with pytest.raises(InputError, match="at least 3"):
        evaluate([replace(dataset, pairs=dataset.pairs.iloc[:2])])


@pytest.mark.slow
def test_cli_predict_and_evaluate(cpu_campaign: Path, tmp_path: Path) -> None:  # noqa: F811
    table = tmp_path / "predicted.csv"
    done = subprocess.run([sys.executable, "-m", "colocate.cli", "predict", str(cpu_campaign), "--out", str(table)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    frame = read_colocation_table(table)
    assert set(frame["source"]) <= {"measured", "predicted", "measured-infeasible"}
    report = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "colocate.cli", "predict", "--evaluate", str(cpu_campaign),
                           "--report-dir", str(report)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text = (report / "report.md").read_text()
    assert "cpu/timeslice" in text and "| predictor |" in text and "| mean |" in text
    assert "| job-type-mean |" in text and "| same-models-mean |" in text and "## Verdict" in text
    assert "leave one pair out" in text and "leave one job type (model@batch) out" in text and "coverage" in text
    assert (report / "held_out_predictions.csv").is_file() and (report / "evaluation.json").is_file()
    # the table carries each prediction's interval; measured rows leave it blank
    predicted = frame[frame["source"] == "predicted"]
    assert {"low_a", "high_a", "low_b", "high_b", "delta_low", "delta_high", "evidence"} <= set(frame.columns)
    assert predicted["low_a"].notna().all() and frame.loc[frame["source"] == "measured", "low_a"].isna().all()
    assert (frame["interval_level"] == 0.8).all()
    # rounded values in the filled table
    assert all(len(str(v).split(".")[-1]) <= 4 for v in frame["ratio_a"])
    # an unknown sharing mode names the modes present
    bad = subprocess.run([sys.executable, "-m", "colocate.cli", "predict", "--evaluate", str(cpu_campaign),
                          "--sharing", "mps", "--report-dir", str(tmp_path / "r2")], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "valid: timeslice" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_mean_baselines_predict_ratios_and_delta_follows_the_formula(gavel_path: Path) -> None:
    dataset = make_datasets(gavel_results(gavel_path, gpu_types=("p100",)))[0]
    result = evaluate([dataset], protocols=("pair",))[0]
    preds = result.predictions
    solo = dataset.solo["solo_iter_time_s"]
    for method in ("mean", "job-type-mean", "same-models-mean"):
        part = preds[preds["method"] == method]
        t_a, t_b = solo.loc[part["type_a"]].to_numpy(), solo.loc[part["type_b"]].to_numpy()
        expected = (t_a + t_b) / np.maximum(t_a / part["pred_ratio_a"], t_b / part["pred_ratio_b"])
        np.testing.assert_allclose(part["pred_delta"], expected)
        assert part["pred_delta"].nunique() > 10  # not a constant δ
    # job-type mean by hand for the first held-out pair: a's ratios over its other pairs
    first = preds[preds["method"] == "job-type-mean"].iloc[0]
    a = first["type_a"]
    pairs = dataset.pairs.drop(index=0)
    own = pd.concat([pairs.loc[pairs["type_a"] == a, "ratio_a"], pairs.loc[pairs["type_b"] == a, "ratio_b"]])
    assert first["pred_ratio_a"] == pytest.approx(own.mean())
    # same-models mean: only pairs of the same two models (other batch sizes); the job-type mean without any
    model = lambda frame, col: frame[col].str.split("@").str[0]  # noqa: E731
    same_models = preds[preds["method"] == "same-models-mean"].reset_index(drop=True)
    type_means = preds[preds["method"] == "job-type-mean"].reset_index(drop=True)
    checked = {"same": 0, "fallback": 0}
    for held in (0, 40, 80, 120, 160, 200):
        row = same_models.iloc[held]
        training = dataset.pairs.drop(index=held)
        ma, mb = row["type_a"].split("@")[0], row["type_b"].split("@")[0]
        same = pd.concat([training.loc[(model(training, "type_a") == ma) & (model(training, "type_b") == mb), "ratio_a"],
                          training.loc[(model(training, "type_b") == ma) & (model(training, "type_a") == mb), "ratio_b"]])
        expected = same.mean() if len(same) else type_means.iloc[held]["pred_ratio_a"]
        checked["same" if len(same) else "fallback"] += 1
        assert row["pred_ratio_a"] == pytest.approx(expected), held
    assert checked["same"] >= 3


def test_decision_metrics_and_shortfalls() -> None:
    metrics = decision_metrics(np.array([1.2, 1.1, 0.9, 0.8, 1.3]), np.array([1.5, 0.9, 0.7, 1.2, 1.1]))
    # truth positives: 1.5, 1.2, 1.1 (3); predicted positives: 1.2, 1.1, 1.3 -> tp 2, fp 1, fn 1, tn 1
    assert metrics["precision"] == pytest.approx(2 / 3) and metrics["recall"] == pytest.approx(2 / 3)
    assert metrics["balanced_accuracy"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert metrics["accuracy_delta_gt_1"] == pytest.approx(3 / 5)
    # a predictor worse than a baseline is reported, with the paired standard error
    rows = []
    for k in range(6):
        truth = 1.0 + 0.1 * k
        for method in METHODS:
            guess = truth + (0.3 if method == "predictor" else 0.01)
            rows.append({"method": method, "type_a": f"a{k}", "type_b": "b", "ratio_a": 0.5, "ratio_b": 0.5,
                         "delta": truth, "pred_ratio_a": 0.5, "pred_ratio_b": 0.5, "pred_delta": guess})
    predictions = pd.DataFrame(rows)
    result = EvaluationResult("toy", "g", "timeslice", "pair", 6, 6, 2, (), (), summarise(predictions), predictions,
                              0.0, {"level": 0.8})
    falls = result.shortfalls()
    assert not result.beats_baselines()
    assert {(f["baseline"], f["metric"]) for f in falls} >= {("mean", "mae_delta"), ("job-type-mean", "mae_delta")}
    assert all(not f["within_noise"] for f in falls if f["metric"] == "mae_delta")
    assert "does **not** beat every baseline" in evaluation_report([result])


@pytest.mark.slow
def test_report_dir_defaults_under_the_output_and_a_committed_report_needs_force(cpu_campaign: Path,  # noqa: F811
                                                                                 tmp_path: Path) -> None:
    import shutil

    work = tmp_path / "repo"
    shutil.copytree(cpu_campaign, work / "run")
    run = [sys.executable, "-m", "colocate.cli", "predict", "--evaluate", str(work / "run")]
    first = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    report = work / "run" / "predictor-evaluation" / "report.md"
    assert report.is_file()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "add", str(report)], check=True)
    refused = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "committed report" in refused.stderr and "--force" in refused.stderr
    forced = subprocess.run([*run, "--force"], capture_output=True, text=True, timeout=300)
    assert forced.returncode == 0, forced.stderr


def test_every_dataset_is_evidence_and_only_the_asked_ones_are_written() -> None:
    root = Path(__file__).resolve().parents[1] / "results" / "h100"
    datasets = make_datasets(load_results([root / "first-call", root / "thesis-grid"]))
    assert [d.key for d in datasets] == ["h100/mps", "h100/timeslice"]
    table = predict_datasets(datasets, only=["h100/mps"])
    assert set(table["sharing"]) == {"mps"}
    predicted = table[table["source"] == "predicted"]
    assert len(predicted) and predicted[["low_a", "high_a", "delta_low", "delta_high"]].notna().all().all()
    # batch 512 was never measured in a pair under MPS: new job types there, told by their models at 64-256
    at_512 = predicted[predicted["type_a"].str.contains("@512") & predicted["type_b"].str.contains("@512")]
    assert len(at_512) and "new type, model known" in set(at_512["evidence"])
    assert set(at_512["evidence"]) <= {"pair", "new type, model known", "new type"}
    assert ((at_512["low_a"] <= at_512["ratio_a"]) & (at_512["ratio_a"] <= at_512["high_a"])).all()


def test_a_bad_interval_level_is_refused_in_one_line_naming_its_flag(cpu_campaign: Path) -> None:  # noqa: F811
    from click.testing import CliRunner

    from colocate.cli import app

    bad = CliRunner().invoke(app, ["predict", str(cpu_campaign), "--interval", "1.5"])
    assert isinstance(bad.exception, InputError) and bad.exception.field == "--interval", bad.output
