"""Compatibility matrices, triples, GraphML and colocation tables from a real CPU campaign and Gavel's data."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pandas as pd
import pytest
from analysis_fixtures import cpu_campaign  # noqa: F401  (session fixture)

from colocate.analysis.gavel import gavel_results, load_inputs
from colocate.analysis.matrix import build_matrices, build_matrix, measured_colocation_table, write_matrices
from colocate.analysis.results import group_table, load_results
from common.errors import InputError
from scheduler.formats.colocation_table import read_colocation_table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def gavel_v100(gavel_throughputs: Path):
    return gavel_results(gavel_throughputs, gpu_types=("v100",))


@pytest.mark.slow
def test_campaign_matrix_values_are_the_measured_pairs(cpu_campaign: Path, tmp_path: Path) -> None:  # noqa: F811
    results = load_results(cpu_campaign)
    outputs = write_matrices(results, tmp_path / "m")
    pairs = group_table(results, 2)
    assert len(pairs) == 3 and set(pairs["status"]) <= {"ok", "infeasible", "failed"}
    everything = next(m for m in outputs.matrices if m.batch_size is None)
    assert everything.job_types == ("tiny_cnn@2", "tiny_cnn@8")
    for row in pairs[pairs["status"] == "ok"].itertuples():
        assert everything.values.loc[row.type_a, row.type_b] == pytest.approx(row.delta)
        assert everything.values.loc[row.type_b, row.type_a] == pytest.approx(row.delta)  # symmetric
        if row.type_a != row.type_b:
            assert everything.slowdown.loc[row.type_a, row.type_b] == pytest.approx(row.slowdown_a)
            assert everything.slowdown.loc[row.type_b, row.type_a] == pytest.approx(row.slowdown_b)
    # CSV: upper triangle only, every measured cell filled.
    csv = pd.read_csv(tmp_path / "m" / f"{everything.stem}.csv", index_col=0, dtype=str, keep_default_na=False)
    assert csv.loc["tiny_cnn@8", "tiny_cnn@2"] == ""
    assert csv.loc["tiny_cnn@2", "tiny_cnn@8"] != ""
    # PNG heatmaps are real images.
    for path in outputs.files:
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 5_000
    # One job type per batch size here: no per-batch matrices beyond the full one.
    assert [m.scope for m in outputs.matrices] == ["all"]


def test_triples_are_ranked_by_delta(cpu_campaign: Path, tmp_path: Path) -> None:  # noqa: F811
    outputs = write_matrices(load_results(cpu_campaign), tmp_path / "m", plots=False)
    triples = pd.read_csv(tmp_path / "m" / "triples.csv")
    assert list(triples["job_types"]) == ["tiny_cnn@2+tiny_cnn@2+tiny_cnn@8"]
    ok = outputs.triples[outputs.triples["status"] == "ok"]
    assert list(ok["rank"]) == list(range(1, len(ok) + 1))
    assert list(ok["delta"]) == sorted(ok["delta"], reverse=True)
    assert {"ratio_a", "ratio_b", "ratio_c"} <= set(triples.columns)


@pytest.mark.slow
def test_graphml_edges_carry_delta_and_ratios(gavel_v100, tmp_path: Path) -> None:
    outputs = write_matrices(gavel_v100, tmp_path / "g", plots=False, by_batch=False)
    graph = nx.read_graphml(tmp_path / "g" / "graph_v100_timeslice.graphml")
    pairs = outputs.pairs
    ok = pairs[pairs["status"] == "ok"]
    assert graph.number_of_nodes() == 26
    assert graph.number_of_edges() == len(ok)  # self-pairs are self-loops; infeasible pairs are no edges
    row = ok[ok["job_types"] == "ResNet-18@64+Transformer@32"].iloc[0]
    edge = graph.edges["ResNet-18@64", "Transformer@32"]
    assert edge["weight"] == pytest.approx(row["delta"]) and edge["ratio_a"] == pytest.approx(row["ratio_a"])
    infeasible = pairs[pairs["status"] == "infeasible"].iloc[0]
    assert infeasible["type_b"] in graph.nodes[infeasible["type_a"]]["infeasible_with"].split(";")


def test_gavel_matrix_marks_infeasible_cells(gavel_v100) -> None:
    pairs = group_table(gavel_v100, 2)
    matrix = build_matrix(pairs, "v100", "timeslice", "throughput_sum")
    status = matrix.status.to_numpy()
    assert (status == "infeasible").sum() == 2 * (pairs["status"] == "infeasible").sum() - sum(
        1 for r in pairs.itertuples() if r.status == "infeasible" and r.type_a == r.type_b)
    frame = matrix.to_csv_frame()
    assert (frame.to_numpy() == "infeasible").sum() == (pairs["status"] == "infeasible").sum()
    # per-batch-size matrices hold exactly the job types at that batch size
    per_batch = {m.scope: m for m in build_matrices(pairs) if m.batch_size is not None}
    assert set(per_batch["bs16"].job_types) == {"ResNet-18@16", "ResNet-50@16", "Transformer@16"}
    # slowdown metric: the larger of the two slowdowns
    slow = build_matrix(pairs, "v100", "timeslice", "slowdown")
    row = pairs[pairs["status"] == "ok"].iloc[5]
    assert slow.values.loc[row["type_a"], row["type_b"]] == pytest.approx(max(row["slowdown_a"], row["slowdown_b"]))


def test_several_gpu_types_stay_apart(cpu_campaign: Path, gavel_throughputs: Path) -> None:  # noqa: F811
    results = load_inputs([cpu_campaign], [gavel_throughputs],
                          gpu_types=["cpu", "p100"])
    matrices = build_matrices(group_table(results, 2), by_batch=False)
    by_gpu = {m.gpu_type: set(m.job_types) for m in matrices}
    assert set(by_gpu) == {"cpu", "p100"}
    assert by_gpu["cpu"] == {"tiny_cnn@2", "tiny_cnn@8"} and "tiny_cnn@2" not in by_gpu["p100"]


def test_colocation_table_reads_back_in_the_scheduler_format(cpu_campaign: Path, gavel_v100, tmp_path: Path) -> None:  # noqa: F811
    from scheduler.formats.colocation_table import write_colocation_table

    ours = measured_colocation_table(load_results(cpu_campaign))
    write_colocation_table(ours, tmp_path / "ours.csv")
    back = read_colocation_table(tmp_path / "ours.csv")
    assert len(back) == 3 and set(back["gpu_type"]) == {"cpu"}
    gavel = measured_colocation_table(gavel_v100)
    assert len(gavel) == 351 and ((gavel["ratio_a"] == 0) == (gavel["ratio_b"] == 0)).all()
    assert (gavel["ratio_a"] == 0).sum() == (group_table(gavel_v100, 2)["status"] == "infeasible").sum()


# ---- errors -------------------------------------------------------------------------------------------


def test_missing_empty_and_solo_only_inputs(cpu_campaign: Path, tmp_path: Path) -> None:  # noqa: F811
    with pytest.raises(InputError, match="does not exist"):
        load_results(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no runs.parquet"):
        load_results(tmp_path / "empty")
    solo_only = tmp_path / "solo-only"
    shutil.copytree(cpu_campaign, solo_only)
    runs = pd.read_parquet(solo_only / "runs.parquet")
    runs[runs["kind"] == "solo"].to_parquet(solo_only / "runs.parquet")
    with pytest.raises(InputError, match="no pair or triple runs"):
        write_matrices(load_results(solo_only), tmp_path / "out")


def test_pair_without_solo_baseline_is_named(cpu_campaign: Path, tmp_path: Path) -> None:  # noqa: F811
    broken = tmp_path / "no-baseline"
    shutil.copytree(cpu_campaign, broken)
    runs = pd.read_parquet(broken / "runs.parquet")
    jobs = pd.read_parquet(broken / "jobs.parquet")
    runs[runs["job_types"] != "tiny_cnn@8"].to_parquet(broken / "runs.parquet")
    jobs.loc[jobs["job_type"] == "tiny_cnn@8", "solo_iter_time_s"] = float("nan")
    jobs.to_parquet(broken / "jobs.parquet")
    with pytest.raises(InputError) as caught:
        group_table(load_results(broken), 2)
    assert "no solo baseline for tiny_cnn@8" in str(caught.value) and "\n" not in str(caught.value)


def test_same_gpu_type_at_two_image_sizes_is_refused(cpu_campaign: Path, tmp_path: Path) -> None:  # noqa: F811
    other = tmp_path / "other-size"
    shutil.copytree(cpu_campaign, other)
    runs = pd.read_parquet(other / "runs.parquet")
    runs["image_size"] = 64
    runs.to_parquet(other / "runs.parquet")
    with pytest.raises(InputError, match="image sizes"):
        load_results([cpu_campaign, other])


@pytest.mark.slow
def test_cli_matrix_and_unknown_metric(cpu_campaign: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "cli"
    done = subprocess.run([sys.executable, "-m", "colocate.cli", "matrix", str(cpu_campaign), "--out", str(out),
                           "--no-plots"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (out / "pairs.csv").is_file() and (out / "graph_cpu_timeslice.graphml").is_file()
    failed = subprocess.run([sys.executable, "-m", "colocate.cli", "matrix", str(cpu_campaign), "--metric", "speed"],
                            capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2 and "valid: delta, throughput_sum, slowdown" in failed.stderr
