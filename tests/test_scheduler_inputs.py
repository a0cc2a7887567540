"""Scheduler inputs: cluster YAML, jobs CSV, profile CSV and colocation table — good files load, bad ones say why."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from common.errors import InputError
from scheduler.formats.colocation_table import read_colocation_table, write_colocation_table
from scheduler.formats.profiles import read_generic_profiles
from scheduler.model.cluster import load_cluster
from scheduler.model.colocation import ColocationTable
from scheduler.model.configs import configurations
from scheduler.model.jobs import Job, load_jobs

EXAMPLES = Path(__file__).resolve().parents[1] / "scheduler" / "examples"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_example_clusters_have_the_documented_sizes() -> None:
    sia = load_cluster(EXAMPLES / "sia-64gpu.yaml")
    assert sia.total_gpus == 64
    assert {t.name: (t.nodes, t.gpus_per_node) for t in sia} == {"aws": (6, 4), "dgx-ext": (2, 8), "rtx": (3, 8)}
    big = load_cluster(EXAMPLES / "hetero-2048gpu.yaml")
    assert big.total_gpus == 2048 and len(big.type_names) == 4


def test_configurations_are_powers_of_two_then_whole_nodes() -> None:
    sia = load_cluster(EXAMPLES / "sia-64gpu.yaml")
    shapes = {(c.gpu_type, c.num_gpus, c.num_nodes) for c in configurations(sia)}
    assert {("aws", n, 1) for n in (1, 2, 4)} | {("aws", 4 * k, k) for k in range(2, 7)} <= shapes
    assert {("rtx", n, 1) for n in (1, 2, 4, 8)} | {("rtx", 16, 2), ("rtx", 24, 3)} <= shapes
    assert ("rtx", 3, 1) not in shapes and ("aws", 8, 1) not in shapes


@pytest.mark.parametrize("text, field", [
    ("gpu_types: {a: {nodes: 0, gpus_per_node: 4, memory_gb: 16}}", "gpu_types.a.nodes"),
    ("gpu_types: {a: {nodes: 2, gpus_per_node: 4}}", "gpu_types.a.memory_gb"),
    ("gpu_types: {a: {nodes: 2, gpus_per_node: 4.5, memory_gb: 16}}", "gpu_types.a.gpus_per_node"),
    ("gpu_types: {a: {nodes: 2, gpus_per_node: 4, memory_gb: -1}}", "gpu_types.a.memory_gb"),
    ("gpu_types: {a: {nodes: 2, gpus_per_node: 4, memory_gb: 16, colour: red}}", "gpu_types.a.colour"),
    ("nodes: 3", "gpu_types"),
    ("gpu_types: [1, 2", "gpu_types"),
])
def test_bad_cluster_files_name_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = write(tmp_path, "c.yaml", text)
    with pytest.raises(InputError) as err:
        load_cluster(path)
    assert err.value.field == field
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_jobs_csv_reads_every_column_and_sia_aliases(tmp_path: Path) -> None:
    jobs = load_jobs(EXAMPLES / "jobs-sia64.csv")
    assert len(jobs) == 16
    first = jobs[0]
    assert first.adaptive and first.max_gpus == 16 and first.current_gpu_type == "dgx-ext" and first.age_s == 1800
    assert jobs[8].current_partner == "yolov3-9" and jobs[12].pinned
    sia = write(tmp_path, "w.csv", "name,time,application,num_replicas,batch_size\ncifar10-0,107,cifar10,6,2048\n")
    (job,) = load_jobs(sia)
    assert (job.arrival, job.num_gpus, job.batch_size, job.job_type) == (107.0, 6, 2048, "cifar10@2048")


@pytest.mark.parametrize("text, field", [
    ("name,application,num_gpus\na,x,zero\n", "num_gpus"),
    ("name,application,num_gpus\na,x,0\n", "num_gpus"),
    ("name,application\na,x\na,y\n", "name"),
    ("name,application\na,\n", "application"),
    ("name,application,colour\na,x,red\n", "colour"),
    ("name,application,adaptive\na,x,maybe\n", "adaptive"),
    ("name,application,min_batch_size,max_batch_size\na,x,64,32\n", "max_batch_size"),
    ("name,application,current_partner\na,x,ghost\n", "current_partner"),
    ("name,application,current_num_gpus\na,x,2\n", "current_gpu_type"),
    ("name,num_gpus\na,1\n", "application"),
])
def test_bad_jobs_name_row_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = write(tmp_path, "jobs.csv", text)
    with pytest.raises(InputError) as err:
        load_jobs(path)
    assert err.value.field == field
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_generic_profiles_convert_to_step_times(tmp_path: Path) -> None:
    frame = read_generic_profiles(EXAMPLES / "profiles-generic.csv")
    row = frame[(frame.application == "resnet18") & (frame.gpu_type == "a100") & (frame.num_gpus == 2)].iloc[0]
    assert row.local_bsz == 128 and row.step_time == pytest.approx(256 / 6000)
    bad = write(tmp_path, "p.csv", "application,gpu_type,num_gpus,batch_size,throughput\nx,a,1,32,-5\n")
    with pytest.raises(InputError) as err:
        read_generic_profiles(bad)
    assert err.value.field == "throughput" and "row 2" in str(err.value)
    missing = write(tmp_path, "q.csv", "application,gpu_type,batch_size,throughput\nx,a,32,5\n")
    with pytest.raises(InputError, match="num_gpus"):
        read_generic_profiles(missing)


def test_colocation_table_round_trip_and_lookup(tmp_path: Path) -> None:
    frame = pd.DataFrame({
        "gpu_type": ["a100", "a100"], "type_a": ["resnet18@128", "resnet50"], "type_b": ["resnet50", "bert"],
        "ratio_a": [0.7, 0.0], "ratio_b": [0.6, 0.0], "source": ["measured", "oom"],
    })
    path = write_colocation_table(frame, tmp_path / "t.csv")
    back = read_colocation_table(path)
    assert list(back.columns[:5]) == ["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b"]
    assert back["source"].tolist() == ["measured", "oom"]
    table = ColocationTable.from_frame(back)
    a = Job("a", "resnet18", batch_size=128)
    b = Job("b", "resnet50", batch_size=64)
    assert table.lookup("a100", a, b) == (0.7, 0.6)
    assert table.lookup("a100", b, a) == (0.6, 0.7)        # either order
    assert table.lookup("t4", a, b) is None                # no data on that type
    assert table.lookup("a100", Job("c", "resnet18", batch_size=64), b) is None  # other batch, no app row
    precise = write(tmp_path, "p.csv", "gpu_type,type_a,type_b,ratio_a,ratio_b\na100,resnet50@64:bf16,resnet50@64,0.7,0.6\n")
    assert read_colocation_table(precise)["type_a"].tolist() == ["resnet50@64:bf16"]  # a precision variant
    with pytest.raises(InputError, match="is not a job type"):
        read_colocation_table(write(tmp_path, "q.csv", "gpu_type,type_a,type_b,ratio_a,ratio_b\na100,x@64:,y,0.5,0.5\n"))


def test_interval_columns_are_read_with_the_table_and_older_tables_still_read(tmp_path: Path) -> None:
    from scheduler.learning.pairs import PairBelief, table_prior

    text = ("gpu_type,type_a,type_b,ratio_a,ratio_b,source,low_a,high_a,low_b,high_b,delta_low,delta_high,"
            "interval_level\n"
            "a100,x,y,0.5,0.6,predicted,0.3,0.8,0.4,0.9,0.7,1.2,0.8\n"
            "a100,x,x,0.55,0.55,measured,,,,,,,0.8\n")
    back = read_colocation_table(write(tmp_path, "predicted.csv", text))
    assert back["low_a"].iloc[0] == 0.3 and pd.isna(back["low_a"].iloc[1])
    table = ColocationTable.from_frame(back)
    assert table.intervals[("a100", "x", "y")] == ((0.3, 0.8), (0.4, 0.9))
    assert table.intervals[("a100", "y", "x")] == ((0.4, 0.9), (0.3, 0.8))  # the other order, swapped
    assert ("a100", "x", "x") not in table.intervals and table.interval_level == 0.8
    answer = table_prior(table)("a100", "y", "x")
    assert answer is not None and answer.interval_a == (0.4, 0.9) and answer.ratio_a == 0.6
    belief = PairBelief(table_prior(table))
    wide, measured = belief.estimate("a100", "x", "y"), belief.estimate("a100", "x", "x")
    assert wide.sd_a > measured.sd_a  # a predicted row's interval is its prior's spread; a measured row is sure
    older = read_colocation_table(write(tmp_path, "old.csv", "gpu_type,type_a,type_b,ratio_a,ratio_b\na100,x,y,0.5,0.6\n"))
    assert ColocationTable.from_frame(older).intervals == {}
    from scheduler.formats.colocation_table import load_colocation_tables

    both = load_colocation_tables([tmp_path / "predicted.csv", tmp_path / "old.csv"])  # the later file's row wins
    assert both.ratios[("a100", "x", "y")] == (0.5, 0.6) and ("a100", "x", "y") not in both.intervals
    assert load_colocation_tables([tmp_path / "old.csv", tmp_path / "predicted.csv"]).intervals[("a100", "x", "y")]


@pytest.mark.parametrize("rows, field", [
    ("gpu_type,type_a,type_b,ratio_a,ratio_b,low_a,high_a\na100,x,y,0.5,0.5,0.4,0.6\n", "low_b"),
    ("gpu_type,type_a,type_b,ratio_a,ratio_b,low_a,high_a,low_b,high_b\na100,x,y,0.5,0.5,0.4,,0.4,0.6\n", "high_a"),
    ("gpu_type,type_a,type_b,ratio_a,ratio_b,low_a,high_a,low_b,high_b\na100,x,y,0.5,0.5,0.7,0.6,0.4,0.6\n", "low_a"),
    ("gpu_type,type_a,type_b,ratio_a,ratio_b,low_a,high_a,low_b,high_b\na100,x,y,0.5,0.5,0.4,0.6,n/a,0.6\n", "low_b"),
    ("gpu_type,type_a,type_b,ratio_a,ratio_b,interval_level\na100,x,y,0.5,0.5,80\n", "interval_level"),
    ("gpu_type,type_a,type_b,ratio_a,ratio_b,delta_low\na100,x,y,0.5,0.5,-1\n", "delta_low"),
    ("gpu_type,type_a,type_b,ratio_a,ratio_b\na100,x,y,0.5,2.5\n", "ratio_b"),
    ("gpu_type,type_a,type_b,ratio_a,ratio_b\na100,x,y,-0.1,0.5\n", "ratio_a"),
    ("gpu_type,type_a,type_b,ratio_a,ratio_b\na100,x,y,abc,0.5\n", "ratio_a"),
    ("gpu_type,type_a,type_b,ratio_a,ratio_b\na100,,y,0.5,0.5\n", "type_a"),
    ("gpu_type,type_a,type_b,ratio_a\na100,x,y,0.5\n", "ratio_b"),
    ("gpu_type,type_a,type_b,ratio_a,ratio_b\na100,x,y,0.5,0.5\na100,y,x,0.4,0.4\n", "type_b"),
])
def test_bad_colocation_tables(tmp_path: Path, rows: str, field: str) -> None:
    path = write(tmp_path, "t.csv", rows)
    with pytest.raises(InputError) as err:
        read_colocation_table(path)
    assert err.value.field == field and "\n" not in str(err.value)
