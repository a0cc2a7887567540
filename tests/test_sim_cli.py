"""``colocate simulate`` / ``colocate compare`` end to end on the bundled default cluster and profiles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scheduler.formats.bundled import bundled_profiles_dir, default_cluster
from scheduler.sim.result import SUMMARY_KEYS
from scheduler.sim.simulator import simulate

REPO = Path(__file__).resolve().parents[1]
CLUSTER = default_cluster()
PROFILES = bundled_profiles_dir()
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
    assert list(summary) == [*SUMMARY_KEYS, "config"]  # the run's settings (tests/test_run_config.py)
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
    # a user's report: no targets to miss; the co-location data is the table the runs used (t4/v100)
    assert "Targets" not in report and "missed by" not in report
    provenance = report.split("## Co-location data")[1].split("##")[0]
    assert "colocation-default.csv" in provenance and "GPU types t4, v100" in provenance
    assert "aws" not in provenance and "Not used" in provenance
    assert "| `colocate` | 2 | 8/8 |" in report
    # the report's command reruns what ran: the profiles it was given included
    command = next(line for line in report.splitlines() if line.startswith("- **command**"))
    assert f"--profiles {PROFILES}" in command and "--policies colocate,sia,fifo" in command
    # a second run reuses the finished simulations; --targets adds the project's target checks
    again = run_cli("compare", "--cluster", str(CLUSTER), "--workloads", str(tmp_path / "set" / "workload-*.csv"),
                    "--policies", "colocate,sia,fifo", "--out", str(out), "--workers", "1",
                    "--profiles", str(PROFILES), "--targets")
    assert again.returncode == 0, again.stderr
    pd.testing.assert_frame_equal(pd.read_csv(out / "summary.csv"), summary)
    report = (out / "report.md").read_text()
    assert "## Targets" in report and "avg JCT colocate / sia" in report and "--targets" in report


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
    assert "## JCT across load" in report and "Targets across load" not in report
    assert "logical CPUs" in report and "UTC" in report  # machine and date read from the machine


@pytest.mark.slow
def test_compare_replicates_jitter_the_arrivals_and_the_tables_show_their_mean(tmp_path):
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "w.csv").write_text(TINY)
    out = tmp_path / "report"
    proc = run_cli("compare", "--cluster", str(CLUSTER), "--workloads", str(tmp_path / "set" / "w.csv"), "--policies",
                   "sia,fifo", "--replicates", "3", "--out", str(out), "--workers", "2", "--profiles", str(PROFILES),
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "× 3 replicates" in proc.stderr and "set-w r2/sia:" in proc.stderr  # progress names each run
    runs = pd.read_csv(out / "summary.csv")
    assert sorted(zip(runs["policy"], runs["replicate"])) == [(p, k) for p in ("fifo", "sia") for k in range(3)]
    arrivals = {}
    for k in range(3):  # replicate 0 where a single run lives, replicate k under r<k>/
        run = out / "runs" / "set-w" / (f"r{k}" if k else "") / "sia"
        assert json.loads((run / "summary.json").read_text())["meta"]["replicate"] == k
        arrivals[k] = pd.read_parquet(run / "jobs.parquet").set_index("job")["arrival_s"].sort_index()
    for k in (1, 2):  # the same jobs, each arriving later by less than one round
        shift = arrivals[k] - arrivals[0]
        assert list(arrivals[k].index) == list(arrivals[0].index)
        assert (shift >= 0).all() and (shift < 60).all() and (shift > 0).any()
    assert not (arrivals[1] == arrivals[2]).all()  # each replicate draws its own shifts
    report = (out / "report.md").read_text()
    command = next(line for line in report.splitlines() if line.startswith("- **command**"))
    assert "--replicates 3" in command and "**replicates**: 3 per workload" in report
    # the tables read one value per workload: the mean over its replicates; "runs" counts every run
    header = next(line for line in report.splitlines() if line.startswith("| workload |"))
    order = [cell.strip(" `") for cell in header.strip("|").split("|")[1:]]
    means = runs.groupby("policy")["avg_jct_s"].mean() / 3600
    assert "| set-w | " + " | ".join(f"{means[p]:.2f}" for p in order) + " |" in report
    assert "| `sia` | 3 | 4/4 |" in report


def test_replicates_out_of_range_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "w.csv").write_text(TINY)
    for bad in ("0", "101", "1.5"):
        proc = run_cli("compare", "--cluster", str(CLUSTER), "--workloads", str(tmp_path / "w.csv"),
                       "--replicates", bad, "--out", str(tmp_path / "o"), "--profiles", str(PROFILES))
        assert proc.returncode == 2, (bad, proc.stdout, proc.stderr)
        assert "replicates" in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert not (tmp_path / "o").exists()


def test_bad_load_point_is_a_one_line_error(tmp_path):
    (tmp_path / "w.csv").write_text(TINY)
    proc = run_cli("compare", "--cluster", str(CLUSTER), "--workloads", str(tmp_path / "w.csv"), "--loads", "1,zero",
                   "--out", str(tmp_path / "o"))
    assert proc.returncode != 0
    assert "--loads" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()  # a refused comparison leaves no empty report directory behind


def test_at_load_divides_arrival_times():
    from scheduler.formats.workload_jobs import Workload, WorkloadJob

    work = Workload("w", (WorkloadJob("a", "cifar10", 0.0), WorkloadJob("b", "cifar10", 600.0)))
    fast = work.at_load(2)
    assert [j.arrival for j in fast.jobs] == [0.0, 300.0] and fast.name == "w@2x"
    assert work.at_load(1) is work


def test_a_jittered_replicate_moves_each_arrival_inside_one_round_and_keeps_the_jobs():
    from common.errors import InputError
    from scheduler.formats.workload_jobs import Workload, WorkloadJob

    work = Workload("w", tuple(WorkloadJob(f"j{i}", "cifar10", 30.0 * i, 1 + i % 2, 64) for i in range(40)))
    assert work.jittered(0) is work and work.jittered(3, spread_s=0) is work
    one, again, other = work.jittered(1), work.jittered(1), work.jittered(2)
    assert one == again and one != other and one.name == "w~r1"  # seeded: the same replicate every time
    moved = {j.name: j for j in one.jobs}
    shifts = [moved[j.name].arrival - j.arrival for j in work.jobs]
    assert all(0 <= d < 60 for d in shifts) and len(set(shifts)) == len(shifts)
    assert {(j.name, j.application, j.num_gpus, j.batch_size) for j in one.jobs} == \
        {(j.name, j.application, j.num_gpus, j.batch_size) for j in work.jobs}
    assert [j.arrival for j in one.jobs] == sorted(j.arrival for j in one.jobs)  # still in arrival order
    with pytest.raises(InputError, match="seed"):
        work.jittered(-1)


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


@pytest.mark.parametrize("option", [("--colocation", "{bad}"), ("--colocation", "{missing}"),
                                    ("--belief", "table:{bad}"), ("--belief", "table:{missing}")])
def test_a_bad_table_is_refused_before_the_simulation_starts(tmp_path, option):
    """Bad --colocation / --belief table:FILE: one line naming the file, exit 2, and no progress bar first."""
    workload, bad = tmp_path / "tiny.csv", tmp_path / "bad.csv"
    workload.write_text(TINY)
    bad.write_text("name,time\nx,1\n")
    flag, value = option[0], option[1].format(bad=bad, missing=tmp_path / "missing.csv")
    proc = run_cli("simulate", "--cluster", str(CLUSTER), "--workload", str(workload), flag, value,
                   "--profiles", str(PROFILES))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "jobs done" not in proc.stderr
    assert ("bad.csv" if "{bad}" in option[1] else "missing.csv") in lines[0]


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


def test_colocation_provenance_describes_the_rows_of_the_cluster_types():
    """The default table is the union of both bundled tables: on the bundled t4/v100 cluster only
    colocation-default.csv has rows, and the note says so (Sia's aws/dgx-ext/rtx table is named as unused)."""
    from scheduler.formats.bundled_files import COLOCATION_FILE
    from scheduler.formats.transfer import DEFAULT_TABLE
    from scheduler.report.comparison import colocation_provenance

    note = colocation_provenance([DEFAULT_TABLE, COLOCATION_FILE], ("t4", "v100"))
    used, unused = note.split("Not used")
    assert "colocation-default.csv" in used and "GPU types t4, v100" in used and "transferred" in used
    assert "colocation-sia-transferred.csv" in unused and "aws" not in note
    sia = colocation_provenance([DEFAULT_TABLE, COLOCATION_FILE], ("aws", "rtx"))
    assert "colocation-sia-transferred.csv" in sia.split("Not used")[0] and "GPU types aws, rtx" in sia
    assert "could not pair" in colocation_provenance([COLOCATION_FILE], ("a100",))


@pytest.mark.slow
def test_simulate_and_compare_read_a_results_directory_as_their_table(tmp_path):
    """``--colocation`` takes a results directory in both commands: its measured pairs are the table."""
    results = tmp_path / "gavel-v100"
    done = run_cli("import-gavel", str(REPO / "scheduler" / "data" / "gavel_throughputs_sf1.json"), "--out", str(results),
                   "--gpu-type", "v100")
    assert done.returncode == 0, done.stderr
    workload = tmp_path / "tiny.csv"
    workload.write_text(TINY)
    common = ["--cluster", str(CLUSTER), "--profiles", str(PROFILES), "--colocation", str(results)]
    simulated = run_cli("simulate", "--workload", str(workload), "--policy", "colocate", "--json", *common)
    assert simulated.returncode == 0, simulated.stderr
    out = tmp_path / "report"
    compared = run_cli("compare", "--workloads", str(workload), "--policies", "colocate", "--out", str(out),
                       "--workers", "1", *common)
    assert compared.returncode == 0, compared.stderr
    table = pd.read_csv(out / "colocation-measured.csv", comment="#")
    assert len(table) > 0 and set(table["gpu_type"]) == {"v100"}
    provenance = (out / "report.md").read_text().split("## Co-location data")[1].split("##")[0]
    assert "colocation-measured.csv" in provenance and "GPU types v100" in provenance
    summary = pd.read_csv(out / "summary.csv")
    assert summary["avg_jct_s"].iloc[0] == pytest.approx(json.loads(simulated.stdout)["avg_jct_s"])
def test_colocation_provenance_counts_predicted_rows_apart_from_measurements(tmp_path):
    from scheduler.report.comparison import colocation_provenance

    table = tmp_path / "predicted.csv"
    table.write_text("gpu_type,type_a,type_b,ratio_a,ratio_b,source,low_a,high_a,low_b,high_b\n"
                     "t4,a,b,0.5,0.6,predicted,0.3,0.8,0.4,0.9\nt4,a,a,0.5,0.5,measured,,,,\n")
    note = colocation_provenance([table], ("t4",))
    assert "**1 are predicted**" in note and "1 are measurements" in note
