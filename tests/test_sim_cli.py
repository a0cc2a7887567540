"""``colocate simulate`` / ``colocate compare`` end to end on the bundled default cluster and profiles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scheduler.formats.bundled import default_cluster, default_profiles_dir
from scheduler.sim.simulator import SUMMARY_KEYS, simulate

REPO = Path(__file__).resolve().parents[1]
CLUSTER = default_cluster()
PROFILES = default_profiles_dir()
TINY = "name,time,application,num_replicas,batch_size,work\n" \
       "cifar10-0,0,cifar10,1,128,300000\ncifar10-1,30,cifar10,2,256,400000\n" \
       "bert-2,60,bert,1,12,6000\ndeepspeech2-3,100,deepspeech2,1,20,40000\n"


def run_cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "colocate.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


@pytest.mark.slow
def test_simulate_json_schema_and_logs(tmp_path):
    workload = tmp_path / "tiny.csv"
    workload.write_text(TINY)
    out = tmp_path / "run"
    proc = run_cli("simulate", "--cluster", str(CLUSTER), "--workload", str(workload), "--policy", "colocate",
                   "--out", str(out), "--json", "--profiles", str(PROFILES))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert list(summary) == list(SUMMARY_KEYS)
    assert summary["policy"] == "colocate" and summary["jobs"] == summary["completed"] == 4
    assert summary["p50_jct_s"] <= summary["p99_jct_s"] and 0 < summary["utilization"] <= 1
    jobs = pd.read_parquet(out / "jobs.parquet")
    rounds = pd.read_parquet(out / "rounds.parquet")
    assert jobs["completed"].all() and len(rounds) > 0
    assert jobs["jct_s"].mean() == pytest.approx(summary["avg_jct_s"])
    assert rounds["gpu_s"].sum() / 3600 == pytest.approx(summary["gpu_hours"])


@pytest.mark.slow
def test_simulate_function_on_the_bundled_demo_workload():
    """The function the demo calls: colocate and sia on the bundled workload, same jobs done, logs filled."""
    demo = REPO / "scheduler/examples/demo-workload.csv"
    results = {p: simulate(CLUSTER, demo, p, profiles=PROFILES) for p in ("colocate", "sia")}
    for name, r in results.items():
        assert r.summary["completed"] == r.summary["jobs"] == len(r.jobs)
        assert r.summary["policy"] == name
    assert results["sia"].summary["packed_fraction"] == 0.0
    assert results["colocate"].allocations["partner"].notna().any()  # the transferred table lets it pack


@pytest.mark.slow
def test_compare_writes_report_table_and_plots(tmp_path):
    for k in (1, 2):
        (tmp_path / "set").mkdir(exist_ok=True)
        (tmp_path / "set" / f"workload-{k}.csv").write_text(TINY if k == 1 else TINY.replace("300000", "200000"))
    out = tmp_path / "report"
    proc = run_cli("compare", "--cluster", str(CLUSTER), "--workloads", str(tmp_path / "set" / "workload-*.csv"),
                   "--policies", "colocate,sia,fifo", "--out", str(out), "--workers", "2",
                   "--profiles", str(PROFILES), timeout=600)
    assert proc.returncode == 0, proc.stderr
    for name in ("report.md", "summary.csv", "jct_cdf.png", "utilization.png", "packed_fraction.png"):
        assert (out / name).is_file(), name
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 6 and set(summary["policy"]) == {"colocate", "sia", "fifo"}
    report = (out / "report.md").read_text()
    assert "## Targets" in report and "avg JCT colocate / sia" in report and "transferred" in report
    assert "| `colocate` | 2 | 8/8 |" in report
    # a second run reuses the finished simulations
    again = run_cli("compare", "--cluster", str(CLUSTER), "--workloads", str(tmp_path / "set" / "workload-*.csv"),
                    "--policies", "colocate,sia,fifo", "--out", str(out), "--workers", "1",
                    "--profiles", str(PROFILES))
    assert again.returncode == 0, again.stderr
    pd.testing.assert_frame_equal(pd.read_csv(out / "summary.csv"), summary)


@pytest.mark.slow
def test_compare_across_load_points_writes_the_load_table_and_plot(tmp_path):
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "workload-1.csv").write_text(TINY)
    out = tmp_path / "report"
    proc = run_cli("compare", "--cluster", str(CLUSTER), "--workloads", str(tmp_path / "set" / "workload-*.csv"),
                   "--policies", "sia,fifo", "--loads", "1,4", "--out", str(out), "--workers", "2",
                   "--profiles", str(PROFILES), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (out / "jct_vs_load.png").is_file()
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(summary["load"].unique()) == [1.0, 4.0] and len(summary) == 4
    fifo = summary[summary["policy"] == "fifo"].set_index("load")
    assert fifo.loc[4.0, "avg_jct_s"] >= fifo.loc[1.0, "avg_jct_s"]  # the same jobs arriving 4x as fast wait more
    report = (out / "report.md").read_text()
    assert "## JCT across load" in report and "Targets across load" in report
    assert "logical CPUs" in report and "UTC" in report  # machine and date read from the machine


def test_bad_load_point_is_a_one_line_error(tmp_path):
    (tmp_path / "w.csv").write_text(TINY)
    proc = run_cli("compare", "--cluster", str(CLUSTER), "--workloads", str(tmp_path / "w.csv"), "--loads", "1,zero",
                   "--out", str(tmp_path / "o"))
    assert proc.returncode != 0
    assert "--loads" in proc.stderr and "Traceback" not in proc.stderr


def test_at_load_divides_arrival_times():
    from scheduler.formats.workloads import Workload, WorkloadJob

    work = Workload("w", (WorkloadJob("a", "cifar10", 0.0), WorkloadJob("b", "cifar10", 600.0)))
    fast = work.at_load(2)
    assert [j.arrival for j in fast.jobs] == [0.0, 300.0] and fast.name == "w@2x"
    assert work.at_load(1) is work


@pytest.mark.slow
def test_simulate_and_compare_with_groups_of_three(tmp_path):
    workload = tmp_path / "tiny.csv"
    workload.write_text(TINY)
    run = tmp_path / "run"
    proc = run_cli("simulate", "--cluster", str(CLUSTER), "--workload", str(workload), "--policy", "colocate",
                   "--max-group-size", "3", "--out", str(run), "--profiles", str(PROFILES))
    assert proc.returncode == 0, proc.stderr
    assert "triple fraction" in proc.stdout
    meta = json.loads((run / "summary.json").read_text())["meta"]
    assert meta["max_group_size"] == 3 and meta["triple_ratios"] == "predicted from pairs (additive slowdowns)"
    out = tmp_path / "report"
    proc = run_cli("compare", "--cluster", str(CLUSTER), "--workloads", str(workload), "--policies",
                   "colocate,colocate-triples", "--out", str(out), "--workers", "1", "--profiles", str(PROFILES))
    assert proc.returncode == 0, proc.stderr
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["policy"]) == {"colocate", "colocate-triples"} and "triple_fraction" in summary
    report = (out / "report.md").read_text()
    assert "triple fraction" in report and "predicted from its three pairs by adding slowdowns" in report


def test_max_group_size_is_refused_for_policies_that_do_not_pack_groups(tmp_path):
    workload = tmp_path / "tiny.csv"
    workload.write_text(TINY)
    proc = run_cli("simulate", "--cluster", str(CLUSTER), "--workload", str(workload), "--policy", "fifo",
                   "--max-group-size", "3", "--profiles", str(PROFILES))
    assert proc.returncode != 0 and "--max-group-size" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_failed_simulation_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    """A run that stops on a broken invariant leaves failed.txt, is listed in the report and returned;
    the other runs finish and are reported; rerunning retries only the failed run."""
    import scheduler.sim.simulator as simulator
    from scheduler.sim.checks import SimulationError
    from scheduler.sim.compare import CompareRequest, compare_policies

    real = simulator.simulate

    def fifo_breaks(cluster, work, policy, **kwargs):
        if policy == "fifo":
            raise SimulationError("round 3 (t=180 s): job x: a broken invariant")
        return real(cluster, work, policy, **kwargs)

    monkeypatch.setattr(simulator, "simulate", fifo_breaks)
    (tmp_path / "w.csv").write_text(TINY)
    request = CompareRequest(cluster=CLUSTER, workloads=str(tmp_path / "w.csv"), policies="sia,fifo",
                             out=tmp_path / "out", workers=1, profiles=PROFILES)
    report, means, failed = compare_policies(request)
    assert len(failed) == 1 and failed[0].endswith("w/fifo: round 3 (t=180 s): job x: a broken invariant")
    label = failed[0].split("/fifo:")[0]  # the workload's label (parent folder and file name)
    assert (tmp_path / "out" / "runs" / label / "fifo" / "failed.txt").is_file()
    assert list(means.index.get_level_values("policy")) == ["sia"]
    assert "**Failed runs**" in report.read_text() and f"{label}/fifo" in report.read_text()
    monkeypatch.setattr(simulator, "simulate", real)
    _, means, failed = compare_policies(request)  # resumes: sia is reused, fifo runs again and now succeeds
    assert failed == [] and sorted(means.index.get_level_values("policy")) == ["fifo", "sia"]
    assert not (tmp_path / "out" / "runs" / label / "fifo" / "failed.txt").exists()
