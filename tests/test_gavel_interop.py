"""Gavel interop on Gavel's own published file: import into our schema, export back, errors on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from analysis_fixtures import cpu_campaign  # noqa: F401  (session fixture)

from colocate.analysis.gavel import export_gavel, gavel_job_type, gavel_results, import_gavel, load_inputs, write_import
from colocate.analysis.results import group_table, load_results, solo_table
from common.errors import InputError

ORACLE_P100 = Path(__file__).resolve().parent / "data" / "gavel_oracle_p100.json"


@pytest.fixture(scope="module")
def gavel_path(gavel_throughputs: Path) -> Path:
    """Gavel's simulation_throughputs.json at scale factor 1, as bundled in the package."""
    return gavel_throughputs


@pytest.fixture(scope="module")
def gavel_raw(gavel_path: Path) -> dict:
    return json.loads(gavel_path.read_text())


def _sf1(raw: dict, gpu: str) -> dict[str, dict]:
    """Gavel's entries with scale factor 1, keyed by job name, straight from the JSON (independent of our parser)."""
    out = {}
    for key, entry in raw[gpu].items():
        name, factor = key[2:].rsplit("', ", 1)
        if factor.rstrip(")") == "1":
            out[name] = entry
    return out


def test_import_counts_and_values_match_the_file(gavel_path: Path, gavel_raw: dict) -> None:
    results = gavel_results(gavel_path)
    assert results.gpu_types == ("k80", "p100", "v100")  # *_unconsolidated skipped
    pairs = group_table(results, 2)
    solo = solo_table(results)
    for gpu in results.gpu_types:
        entries = _sf1(gavel_raw, gpu)
        assert (solo["gpu_type"] == gpu).sum() == len(entries) == 26
        gpu_pairs = pairs[pairs["gpu_type"] == gpu]
        assert len(gpu_pairs) == 26 * 27 // 2  # unordered pairs incl. self-pairs
        zero = {tuple(sorted((a, key[2:].rsplit("', ", 1)[0]))) for a, e in entries.items()
                for key, value in e.items() if key != "null" and value == [0.0, 0.0]}
        assert (gpu_pairs["status"] == "infeasible").sum() == len(zero)
    # One pair by hand: t = 1/throughput, δ = (t_a + t_b) / max(t'_a, t'_b).
    v100 = _sf1(gavel_raw, "v100")
    a, b = "ResNet-18 (batch size 64)", "LM (batch size 20)"
    x_a, x_b = v100[a][f"('{b}', 1)"]
    t_a, t_b = 1 / v100[a]["null"], 1 / v100[b]["null"]
    row = pairs[(pairs["gpu_type"] == "v100") & (pairs["job_types"] == "LM@20+ResNet-18@64")].iloc[0]
    assert row["type_a"] == "LM@20"  # canonical order: model name, then batch size
    assert row["delta"] == pytest.approx((t_a + t_b) / max(1 / x_a, 1 / x_b))
    assert row["ratio_b"] == pytest.approx(x_a / v100[a]["null"])
    assert row["ratio_a"] == pytest.approx(x_b / v100[b]["null"])
    assert row["throughput_sum"] == pytest.approx(x_a / v100[a]["null"] + x_b / v100[b]["null"])


def test_median_normalized_throughput_matches_gavel_source_notes(gavel_path: Path) -> None:
    # SOURCE.md: v100 median Σ x/iso = 1.37, p100 1.13, k80 1.05 over feasible sf=1 pairs.
    pairs = group_table(gavel_results(gavel_path), 2)
    ok = pairs[pairs["status"] == "ok"]
    medians = ok.groupby("gpu_type")["throughput_sum"].median()
    assert medians["v100"] == pytest.approx(1.37, abs=0.005)
    assert medians["p100"] == pytest.approx(1.13, abs=0.005)
    assert medians["k80"] == pytest.approx(1.05, abs=0.005)


def test_oracle_file_and_asymmetric_pairs(tmp_path: Path) -> None:
    # The older oracle file keys jobs by name only (no scale factor) and is symmetric as published.
    path = ORACLE_P100
    raw = json.loads(path.read_text())
    imported = import_gavel(path, gpu_types=("p100",))
    assert imported.meta["counts"]["p100"]["job_types"] == len(raw["p100"]) == 26
    assert imported.meta["counts"]["p100"]["asymmetric_pairs"] == 0
    # Where the two directions of a pair disagree, both are kept as repeats and the pair averages them.
    a, b = "ResNet-50 (batch size 16)", "ResNet-50 (batch size 32)"
    forward = raw["p100"][a][b]
    raw["p100"][b][a] = [forward[1] * 0.5, forward[0] * 0.5]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(raw))
    changed = import_gavel(edited, gpu_types=("p100",))
    assert changed.meta["counts"]["p100"]["asymmetric_pairs"] == 1
    pair = group_table(gavel_results(edited, gpu_types=("p100",)), 2).set_index("job_types").loc["ResNet-50@16+ResNet-50@32"]
    assert pair["repeats"] == 2
    assert pair["ratio_a"] == pytest.approx(0.75 * forward[0] / raw["p100"][a]["null"])


def test_written_import_reads_back_like_the_in_memory_one(gavel_path: Path, tmp_path: Path) -> None:
    imported = import_gavel(gavel_path, gpu_types=("v100",))
    files = write_import(imported, tmp_path / "gavel")
    assert all(f.is_file() for f in files)
    meta = json.loads((tmp_path / "gavel" / "meta.json").read_text())
    assert meta["source"]["scale_factor"] == 1 and "timeslice" in " ".join(meta["notes"])
    from_disk = group_table(load_results(tmp_path / "gavel"), 2).drop(columns=["results_dir"])
    in_memory = group_table(gavel_results(gavel_path, gpu_types=("v100",)), 2).drop(columns=["results_dir"])
    assert from_disk.equals(in_memory)


def test_export_round_trips_gavel_values(gavel_path: Path, gavel_raw: dict) -> None:
    exported = export_gavel(gavel_results(gavel_path, gpu_types=("p100",)))
    assert set(exported) == {"p100"}
    original = {k: v for k, v in gavel_raw["p100"].items() if k.endswith(", 1)")}
    assert set(exported["p100"]) == set(original)
    for key, entry in original.items():
        assert exported["p100"][key]["null"] == pytest.approx(entry["null"])
        for partner, value in entry.items():
            if partner == "null" or not partner.endswith(", 1)"):
                continue
            assert exported["p100"][key][partner] == pytest.approx(value, rel=1e-9, abs=1e-12)


@pytest.mark.slow
def test_export_of_our_campaign_is_steps_per_second(cpu_campaign: Path, tmp_path: Path) -> None:  # noqa: F811
    results = load_results(cpu_campaign)
    exported = export_gavel(results)
    solo = solo_table(results)
    pairs = group_table(results, 2)
    table = exported["cpu"]
    for row in solo.itertuples():
        key = str((f"{row.model} (batch size {int(row.batch_size)})", 1))
        assert table[key]["null"] == pytest.approx(1.0 / row.solo_iter_time_s)
    for row in pairs[pairs["status"] == "ok"].itertuples():
        key_a = str((gavel_job_type_name(row.type_a), 1))
        key_b = str((gavel_job_type_name(row.type_b), 1))
        x_a, x_b = table[key_a][key_b]
        assert x_a == pytest.approx(row.ratio_a * table[key_a]["null"])
        if row.type_a != row.type_b:  # a self-pair has one entry, in (a, b) order
            assert table[key_b][key_a] == pytest.approx([x_b, x_a])
    # and it imports back to the same ratios
    path = tmp_path / "ours.json"
    path.write_text(json.dumps(exported))
    back = group_table(gavel_results(path), 2)
    ok = pairs[pairs["status"] == "ok"].set_index("job_types")
    for row in back[back["status"] == "ok"].itertuples():
        assert row.ratio_a == pytest.approx(ok.loc[row.job_types, "ratio_a"])


def gavel_job_type_name(job_type: str) -> str:
    model, batch = job_type.split("@")
    name = f"{model} (batch size {batch})"
    assert gavel_job_type(name)[2] == job_type
    return name


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("{not json", None),
        ("[1, 2]", "<top level>"),
        ('{"v100": {"(\'A (batch size 1)\', 1)": {"null": 1.0, "(\'A (batch size 1)\', 1)": [1.0]}}}', "v100."),
        ('{"v100": {"(\'A (batch size 1)\', 1)": {"(\'A (batch size 1)\', 1)": [1.0, 1.0]}}}', "null"),
        ('{"v100": {"(\'A (batch size 1)\', 1)": {"null": "fast"}}}', "null"),
        ('{"v100": {"(A, 1)": {"null": 1.0}}}', "v100.(A, 1)"),
    ],
)
def test_malformed_gavel_files_are_one_line_input_errors(tmp_path: Path, content: str, field: str | None) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError) as caught:
        import_gavel(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    if field:
        assert field in message


def test_unknown_gpu_type_lists_the_valid_ones(gavel_path: Path) -> None:
    with pytest.raises(InputError, match="valid: .*p100.*v100"):
        load_inputs([], [gavel_path], gpu_types=["h100"])


@pytest.mark.slow
def test_cli_import_and_error_exit(gavel_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "imported"
    done = subprocess.run([sys.executable, "-m", "colocate.cli", "import-gavel", str(gavel_path), "--out", str(out),
                           "--gpu-type", "v100", "--no-matrices"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (out / "runs.parquet").is_file() and (out / "jobs.csv").is_file()
    bad = tmp_path / "broken.json"
    bad.write_text('{"v100": ')
    failed = subprocess.run([sys.executable, "-m", "colocate.cli", "import-gavel", str(bad), "--out", str(tmp_path / "x")],
                            capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2
    lines = [line for line in failed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "not valid JSON" in lines[0] and "Traceback" not in failed.stderr


# --------------------------------------------------------------------------------------------------------
# Any pair table in (import-pairs), the tidy CSV + JSON out (export-pairs)

from colocate.analysis.pairs_export import export_pairs, tidy_pairs  # noqa: E402
from colocate.analysis.pairs_import import PairColumns, import_pairs, load_column_map, parse_column_flags  # noqa: E402

THEIR_TABLE = """# a colleague's measurements (speeds = t/t' and solo throughputs in iterations/s)
model_1,model_2,gpu,mode,norm_1,norm_2,it_s_1,it_s_2,mem_1
resnet50@64,bert@16,a100,mps,0.62,0.71,5.0,8.0,9000
resnet50@64,bert@16,a100,mps,0.58,0.69,5.0,8.0,9000
bert@16,resnet50@64,a100,timeslice,0.48,0.45,8.0,5.0,3000
resnet50@64,resnet50@64,a100,mps50,0.5,0.5,5.0,5.0,9000
resnet50@64,vgg19@64,a100,mps,0,0,5.0,2.0,
"""
THEIR_COLUMNS = {"job_a": "model_1", "job_b": "model_2", "gpu_type": "gpu", "sharing": "mode", "speed_a": "norm_1",
                 "speed_b": "norm_2", "throughput_a": "it_s_1", "throughput_b": "it_s_2", "memory_a": "mem_1"}


def test_import_pairs_maps_columns_and_computes_delta(tmp_path: Path) -> None:
    path = tmp_path / "theirs.csv"
    path.write_text(THEIR_TABLE)
    imported = import_pairs(path, PairColumns(THEIR_COLUMNS))
    out = tmp_path / "imported"
    write_import(imported, out)
    results = load_results(out)
    pairs = group_table(results, 2).set_index(["sharing", "job_types"])
    mps = pairs.loc[("mps", "bert@16+resnet50@64")]
    assert mps["repeats"] == 2 and mps["type_a"] == "bert@16"  # canonical order: the table's b job comes first
    assert mps["ratio_a"] == pytest.approx((0.71 + 0.69) / 2) and mps["ratio_b"] == pytest.approx(0.60)
    t_bert, t_resnet = 1 / 8.0, 1 / 5.0
    deltas = [(t_bert + t_resnet) / max(t_bert / 0.71, t_resnet / 0.62),
              (t_bert + t_resnet) / max(t_bert / 0.69, t_resnet / 0.58)]
    assert mps["delta"] == pytest.approx(sum(deltas) / 2)
    assert pairs.loc[("timeslice", "bert@16+resnet50@64"), "ratio_a"] == pytest.approx(0.48)
    assert pairs.loc[("mps50", "resnet50@64+resnet50@64"), "ratio_a"] == pytest.approx(0.5)  # MPS thread limit 50
    assert pairs.loc[("mps", "resnet50@64+vgg19@64"), "status"] == "infeasible"
    solo = solo_table(results).set_index("job_type")
    assert solo.loc["resnet50@64", "solo_iter_time_s"] == pytest.approx(0.2)
    assert solo.loc["resnet50@64", "peak_memory_mib"] == 9000


def test_import_pairs_yaml_map_flags_and_time_columns(tmp_path: Path) -> None:
    table = tmp_path / "times.csv"
    table.write_text("a,b,t_a,t_b,tt_a,tt_b\nx@1,y@2,0.1,0.2,0.15,0.4\nx@1,z@4,0.1,0.3,0.2,0.3\ny@2,z@4,0.2,0.3,0.25,0.5\n")
    mapping = tmp_path / "map.yaml"
    mapping.write_text("columns: {job_a: a, job_b: b, time_a: t_a, time_b: t_b}\ndefaults: {gpu_type: H100}\n")
    columns = load_column_map(mapping)
    columns = PairColumns({**columns.names, **parse_column_flags(["colocated_time_a=tt_a", "colocated_time_b=tt_b"])},
                          columns.defaults)
    imported = import_pairs(table, columns)
    assert imported.meta["gpu_types"] == ["h100"]
    out = tmp_path / "r"
    write_import(imported, out)
    pair = group_table(load_results(out), 2).set_index("job_types").loc["x@1+y@2"]
    assert pair["ratio_a"] == pytest.approx(0.1 / 0.15) and pair["ratio_b"] == pytest.approx(0.5)
    assert pair["delta"] == pytest.approx(0.3 / 0.4) and pair["sharing"] == "timeslice"


@pytest.mark.parametrize(
    ("content", "flags", "message"),
    [
        ("job_a,job_b,gpu_type,time_a,time_b,speed_a,speed_b\nx,y,v100,0.1,0.2,0.5,oops\n", [], "field 'speed_b': row 2: 'oops'"),
        ("job_a,job_b,gpu_type,time_a,time_b\nx,y,v100,0.1,0.2\n", [], "row 2: neither co-located times nor speeds"),
        ("job_a,job_b,gpu_type,speed_a,speed_b\nx,y,v100,0.5,0.5\n", [], "row 2: no solo time for job a"),
        ("job_a,job_b,gpu_type,time_a,time_b,speed_a,speed_b\nx,y,,0.1,0.2,0.5,0.5\n", [], "row 2: empty gpu_type"),
        ("job_a,job_b,gpu_type,sharing,time_a,time_b,speed_a,speed_b\nx,y,g,mig,0.1,0.2,0.5,0.5\n", [],
         "row 2: sharing 'mig'"),
        ("first,second\nx,y\n", ["job_a=first", "job_b=third"], "'third' .*not in the header"),
        ("p,q\nx,y\n", [], "no column 'job_a'.*--column job_a=NAME"),
    ],
)
def test_import_pairs_errors_name_row_and_column(tmp_path: Path, content: str, flags: list[str], message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as caught:
        import_pairs(path, PairColumns(parse_column_flags(flags)))
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_unknown_canonical_column_lists_the_valid_ones() -> None:
    with pytest.raises(InputError, match="unknown column 'jobA'.*valid: job_a, job_b"):
        parse_column_flags(["jobA=x"])


def test_export_pairs_is_tidy_with_units_and_reads_back(cpu_campaign: Path, tmp_path: Path) -> None:  # noqa: F811
    results = load_results(cpu_campaign)
    csv_path, json_path = export_pairs(results, tmp_path / "share" / "pairs.csv")
    document = json.loads(json_path.read_text())
    assert document["format"] == "colocate-pairs/1" and "s per iteration" in document["units"]["time_a"]
    provenance = document["provenance"][0]
    assert provenance["protocol"]["repeats"] == 2 and provenance["versions"]["torch"]
    frame = pd.read_csv(csv_path, comment="#")
    assert len(frame) == len(document["pairs"]) == 3
    assert {"gpu_name", "sharing", "batch_a", "repeats", "delta_ci95", "time_a", "colocated_time_a"} <= set(frame)
    row = frame.iloc[0]
    assert row["colocated_time_a"] == pytest.approx(row["time_a"] / row["speed_a"])
    # the export is what import-pairs reads without any mapping
    back = tmp_path / "back"
    write_import(import_pairs(csv_path), back)
    theirs = group_table(results, 2).set_index("job_types")
    ours = group_table(load_results(back), 2).set_index("job_types")
    for job_types, pair in theirs.iterrows():
        assert ours.loc[job_types, "ratio_a"] == pytest.approx(pair["ratio_a"])
        assert ours.loc[job_types, "ratio_b"] == pytest.approx(pair["ratio_b"])


def test_export_of_gavel_data_marks_infeasible_pairs(gavel_path: Path) -> None:
    frame = tidy_pairs(gavel_results(gavel_path, gpu_types=("v100",)))
    assert len(frame) == 351 and (frame["status"] == "infeasible").sum() == 21
    assert (frame.loc[frame["status"] == "infeasible", "speed_a"] == 0).all()


@pytest.mark.slow
def test_cli_import_pairs_feeds_matrix_predict_and_colocation_table(tmp_path: Path, gavel_path: Path) -> None:
    shared = tmp_path / "pairs.csv"
    export_pairs(gavel_results(gavel_path, gpu_types=("k80",)), shared)
    out = tmp_path / "imported"
    repo = Path(__file__).resolve().parents[1]
    run = lambda *args: subprocess.run([sys.executable, "-m", "colocate.cli", *args], capture_output=True,  # noqa: E731
                                       text=True, timeout=300, cwd=repo)
    done = run("import-pairs", str(shared), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert list((out / "matrices").glob("matrix_k80_timeslice_all_delta.csv"))
    done = run("predict", str(out), "--out", str(tmp_path / "filled.csv"))
    assert done.returncode == 0, done.stderr
    done = run("colocation-table", str(out), "--out", str(tmp_path / "table.csv"))
    assert done.returncode == 0, done.stderr
    assert len(pd.read_csv(tmp_path / "table.csv")) == 351
    # pairs named by application feed the simulator as its colocation table
    apps = tmp_path / "apps.csv"
    apps.write_text("job_a,job_b,gpu_type,time_a,time_b,speed_a,speed_b\ncifar10,cifar10,t4,0.05,0.05,0.95,0.95\n"
                    "cifar10,deepspeech2,t4,0.05,0.3,0.9,0.9\ncifar10,cifar10,v100,0.04,0.04,0.95,0.95\n")
    assert run("import-pairs", str(apps), "--out", str(tmp_path / "apps"), "--no-matrices").returncode == 0
    from colocate.analysis.matrix import read_colocation
    from scheduler.model.jobs import Job

    table = read_colocation(tmp_path / "apps")
    assert table.lookup("t4", Job("a", "cifar10"), Job("b", "deepspeech2")) == pytest.approx((0.9, 0.9))
    done = run("simulate", "--cluster", "scheduler/data/cluster-default.yaml", "--workload",
               "scheduler/examples/demo-workload.csv", "--colocation", str(tmp_path / "apps"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["completed"] == 24
    # a results directory is a colocation table on schedule too, as on simulate and compare (and serve)
    done = run("schedule", "--cluster", "scheduler/examples/cluster-small.yaml", "--jobs",
               "scheduler/examples/jobs-small.csv", "--profiles", "scheduler/examples/profiles-generic.csv",
               "--colocation", str(tmp_path / "apps"), "--json")
    assert done.returncode == 0, done.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("job_a,job_b,gpu_type,time_a,time_b,speed_a,speed_b\nx,y,v100,0.1,-2,0.5,0.5\n")
    failed = run("import-pairs", str(bad), "--out", str(tmp_path / "x"))
    assert failed.returncode == 2 and "row 2" in failed.stderr and "time_b" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_job_types_with_a_precision_suffix_split_and_import(tmp_path: Path) -> None:
    from colocate.analysis.results import sort_job_types, split_job_type

    assert split_job_type("resnet50@64:bf16") == ("resnet50", 64)
    assert split_job_type("resnet50@64") == ("resnet50", 64)
    assert split_job_type("A3C") == ("A3C", None) and split_job_type("x@64:") == ("x@64:", None)
    assert sort_job_types(["resnet50@64:bf16", "resnet50@128", "resnet50@64"]) == \
        ["resnet50@64", "resnet50@64:bf16", "resnet50@128"]
    path = tmp_path / "precision.csv"
    path.write_text("model_1,model_2,gpu,mode,norm_1,norm_2,it_s_1,it_s_2,mem_1\n"
                    "resnet50@64:bf16,resnet50@64,a100,mps,0.7,0.6,9.0,5.0,\n")
    out = tmp_path / "imported"
    write_import(import_pairs(path, PairColumns(THEIR_COLUMNS)), out)
    results = load_results(out)
    solo = solo_table(results).set_index("job_type")
    assert solo.loc["resnet50@64:bf16", "batch_size"] == 64 and solo.loc["resnet50@64:bf16", "model"] == "resnet50"
    pair = group_table(results, 2).iloc[0]
    assert (pair["type_a"], pair["type_b"]) == ("resnet50@64", "resnet50@64:bf16")
    assert (pair["ratio_a"], pair["ratio_b"]) == (pytest.approx(0.6), pytest.approx(0.7))
