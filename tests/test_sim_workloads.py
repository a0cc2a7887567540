"""Workload readers, malformed inputs (one-line errors naming file, row and field), generator, transfer."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from common.errors import InputError
from scheduler.formats.transfer import DEFAULT_TABLE, SIA_TO_GAVEL, read_gavel_pairs, transferred_frame
from scheduler.formats.workloads import (
    PHILLY_CLASS_APPS,
    poisson_workload,
    read_gavel_trace,
    read_philly,
    read_sia_workload,
    read_workload,
)
from scheduler.model.cluster import cluster_from_dict
from scheduler.model.goodput import TableGoodputModel
from scheduler.sim.simulator import simulate

HEADER = "name,time,application,num_replicas,batch_size\n"


def write(tmp_path: Path, text: str, name: str = "w.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_reads_sia_format_with_optional_work(tmp_path):
    p = write(tmp_path, "name,time,application,num_replicas,batch_size,work\n"
                        "b,30,bert,2,24,100\na,10.5,cifar10,1,128,\n")
    w = read_workload(p)
    assert [j.name for j in w.jobs] == ["a", "b"]  # arrival order
    assert w.jobs[0].arrival == 10.5 and w.jobs[0].work is None and w.jobs[1].work == 100.0
    assert w.jobs[1].num_gpus == 2 and w.jobs[1].batch_size == 24


@pytest.mark.parametrize("body, row, field", [
    ("a,ten,cifar10,1,128\n", 2, "time"),
    ("a,-5,cifar10,1,128\n", 2, "time"),
    ("a,0,cifar10,0,128\n", 2, "num_replicas"),
    ("a,0,cifar10,1.5,128\n", 2, "num_replicas"),
    ("a,0,cifar10,1,big\n", 2, "batch_size"),
    ("a,0,,1,128\n", 2, "application"),
    (",0,cifar10,1,128\n", 2, "name"),
    ("a,0,cifar10,1,128\na,5,bert,1,12\n", 3, "name"),
    ("a,0,cifar10,1,128,7\n", 2, "name"),
])
def test_malformed_rows_are_one_line_errors_naming_file_row_and_field(tmp_path, body, row, field):
    p = write(tmp_path, HEADER + body)
    with pytest.raises(InputError) as info:
        read_workload(p)
    message = str(info.value)
    assert "\n" not in message
    assert str(p) in message and f"row {row}" in message and f"'{field}'" in message, message


@pytest.mark.parametrize("text, field", [
    ("name,time,application,num_replicas\n", "batch_size"),
    ("name,time,application,num_replicas,batch_size,colour\n", "colour"),
    (HEADER, "name"),
])
def test_malformed_headers_are_rejected(tmp_path, text, field):
    with pytest.raises(InputError, match=f"field '{field}'"):
        read_sia_workload(write(tmp_path, text))


def test_gavel_trace_bad_lines(tmp_path):
    good = "ResNet-18 (batch size 64)\tcmd\t--num_steps\t1\t1000\t0.0\t1\n"
    gavel = tmp_path / "simulation_throughputs.json"
    gavel.write_text(json.dumps({"v100": {"('ResNet-18 (batch size 64)', 1)": {"null": 10.0}}}))
    w = read_gavel_trace(write(tmp_path, good, "t.trace"))
    assert w.jobs[0].application == "cifar10" and w.jobs[0].duration_s == pytest.approx(100.0)
    with pytest.raises(InputError, match=r"field 'total_steps'.*row 2"):
        read_gavel_trace(write(tmp_path, good + good.replace("1000", "many"), "t.trace"))
    with pytest.raises(InputError, match=r"field 'job_type'.*row 1"):
        read_gavel_trace(write(tmp_path, good.replace("ResNet-18", "Mystery"), "t.trace"))
    with pytest.raises(InputError, match="field 'row'"):
        read_gavel_trace(write(tmp_path, "only\tthree\tfields\n", "t.trace"))


def test_unknown_application_is_rejected_before_simulating(tmp_path):
    cluster = cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    p = write(tmp_path, HEADER + "a,0,nosuchapp,1,32\n")
    with pytest.raises(InputError) as info:
        simulate(cluster, p, "fifo", profiles=TableGoodputModel({("x", "g", 1): 1.0}))
    assert "field 'application'" in str(info.value) and str(p) in str(info.value)


def test_cli_prints_one_line_for_a_malformed_workload(tmp_path):
    import subprocess
    import sys

    p = write(tmp_path, HEADER + "a,0,cifar10,two,128\n")
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "colocate.cli", "simulate", "--cluster",
                           str(repo / "scheduler/examples/sia-64gpu.yaml"), "--workload", str(p), "--policy", "sia"],
                          capture_output=True, text=True, cwd=repo, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "row 2" in lines[0] and "num_replicas" in lines[0], proc.stderr


def test_poisson_generator_is_deterministic_and_follows_the_mix():
    a = poisson_workload(400, jobs_per_hour=20, seed=5)
    b = poisson_workload(400, jobs_per_hour=20, seed=5)
    assert a.jobs == b.jobs
    assert a.jobs != poisson_workload(400, jobs_per_hour=20, seed=6).jobs
    apps = pd.Series([j.application for j in a.jobs]).value_counts(normalize=True)
    assert 0.65 < apps["cifar10"] < 0.85  # Philly: 74.6 % of jobs are under one GPU-hour
    gaps = pd.Series([j.arrival for j in a.jobs]).diff().dropna()
    assert 120 < gaps.mean() < 240  # 20 jobs/h = one every 180 s
    sizes = pd.Series([j.num_gpus for j in a.jobs]).value_counts(normalize=True)
    assert sizes[1] > 0.8
    only = poisson_workload(50, seed=1, applications=["bert"])
    assert {j.application for j in only.jobs} == {"bert"}
    with pytest.raises(InputError, match="applications"):
        poisson_workload(5, applications=["gpt9"])


def test_bundled_demo_workload_reads():
    w = read_workload(Path(__file__).resolve().parents[1] / "scheduler/examples/demo-workload.csv")
    assert 20 <= len(w) <= 30
    assert set(w.applications) <= {a for apps in PHILLY_CLASS_APPS.values() for a in apps}


# --------------------------------------------------------------------------------------------------
# Public data: Sia's and Gavel's workload sets (marked sia_data, skipped without ../shared/data)
# --------------------------------------------------------------------------------------------------

@pytest.mark.sia_data
def test_sia_and_pollux_workload_sets_read(shared_data):
    for folder in ("sia/workloads/philly", "sia/workloads/saturn", "pollux/workloads"):
        files = sorted((shared_data / folder).glob("workload-*.csv"))
        assert files, folder
        w = read_workload(files[0])
        assert len(w) == 160 and w.jobs[0].arrival <= w.jobs[-1].arrival


@pytest.mark.sia_data
def test_gavel_and_philly_traces_read(shared_data):
    w = read_workload(shared_data / "gavel/traces/msr/seed=0/11cb48.trace", max_jobs=30)
    assert len(w) == 30 and all(j.duration_s and j.duration_s > 0 for j in w.jobs)
    p = read_philly(shared_data / "sia/traces/philly.csv", num_jobs=100, seed=0)
    assert len(p) == 100 and max(j.num_gpus for j in p.jobs) <= 16
    assert read_philly(shared_data / "sia/traces/philly.csv", num_jobs=100, seed=0).jobs == p.jobs


def test_transferred_table_matches_the_bundled_one(gavel_throughputs):
    gavel = gavel_throughputs  # Gavel's pairs at scale factor 1, bundled (the transfer reads nothing else)
    frame = transferred_frame(gavel)
    bundled = pd.read_csv(DEFAULT_TABLE)
    assert len(frame) == len(bundled) == 3 * 21  # three Sia GPU types × 21 unordered app pairs
    pd.testing.assert_frame_equal(frame.reset_index(drop=True)[["gpu_type", "type_a", "type_b"]],
                                  bundled[["gpu_type", "type_a", "type_b"]])
    assert (frame[["ratio_a", "ratio_b"]] - bundled[["ratio_a", "ratio_b"]]).abs().max().max() < 1e-9
    assert frame["ratio_a"].between(0, 1).all() and frame["ratio_b"].between(0, 1).all()
    assert frame["transferred"].all()
    assert frame[frame["gpu_type"] == "aws"]["source"].str.startswith("gavel:p100").all()
    # each transferred value is one real Gavel pair (up to the clip at 1)
    pairs = read_gavel_pairs(gavel)
    row = frame[(frame.gpu_type == "dgx-ext") & (frame.type_a == "cifar10") & (frame.type_b == "imagenet")].iloc[0]
    label = row.source.split(" ")[1]
    (ma, ba), (mb, bb) = (part.split("@") for part in label.split("+"))
    measured = pairs[("v100", f"{ma} (batch size {ba})", f"{mb} (batch size {bb})")]
    assert (row.ratio_a, row.ratio_b) == pytest.approx((min(measured[0], 1), min(measured[1], 1)), abs=1e-4)
    assert set(SIA_TO_GAVEL) == set(frame.type_a) | set(frame.type_b)
