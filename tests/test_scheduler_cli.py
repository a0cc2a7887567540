"""`colocate schedule` end to end: the table, the JSON schema, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "scheduler" / "examples"
SMALL = ["--cluster", str(EXAMPLES / "cluster-small.yaml"), "--jobs", str(EXAMPLES / "jobs-small.csv"),
         "--profiles", str(EXAMPLES / "profiles-generic.csv")]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "colocate.cli", "schedule", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_json_output_schema_and_packing() -> None:
    out = run(*SMALL, "--colocation", str(EXAMPLES / "colocation-small.csv"), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) >= {"allocations", "unallocated", "objective", "solver"}
    assert set(doc["solver"]) >= {"name", "status", "time_s", "gap"}
    names = {a["job"] for a in doc["allocations"]} | set(doc["unallocated"])
    assert names == {"r18-a", "r18-b", "r50-a", "tf-a", "tf-b", "r18-c", "r50-b", "r18-d"}
    for a in doc["allocations"]:
        assert set(a) >= {"job", "gpu_type", "num_gpus", "batch_size", "partner", "node", "gpus"}
        assert len(a["gpus"]) * len(a["nodes"]) == a["num_gpus"]
    by_job = {a["job"]: a for a in doc["allocations"]}
    pairs = [a for a in doc["allocations"] if a["partner"]]
    assert pairs, "the small example is GPU-bound: packing should pair some jobs"
    for a in pairs:
        b = by_job[a["partner"]]
        assert (b["gpu_type"], b["node"], b["gpus"]) == (a["gpu_type"], a["node"], a["gpus"])
    no_pack = json.loads(run(*SMALL, "--colocation", str(EXAMPLES / "colocation-small.csv"), "--no-packing",
                             "--json").stdout)
    assert not any(a["partner"] for a in no_pack["allocations"])
    assert doc["objective"] <= no_pack["objective"] + 1e-9


def test_table_output_has_decision_and_solver_line() -> None:
    out = run(*SMALL, "--colocation", str(EXAMPLES / "colocation-small.csv"), "--power", "1")
    assert out.returncode == 0, out.stderr
    assert "Round decision" in out.stdout and "solver HiGHS" in out.stdout and "gap" in out.stdout


@pytest.mark.parametrize("extra, needle", [
    (["--power", "0"], "--power"),
    (["--set", "ilp.top_k=-1"], "--set ilp.top_k"),
    (["--time-limit", "0"], "--time-limit"),
    (["--set", "ilp.solver=gurobi"], "--set ilp.solver"),
    (["--set", "ilp.no_such_knob=1"], "--set"),
    (["--set", "ilp.top_k=3", "--set", "ilp.top_k=x"], "ilp.top_k given twice"),
    (["--max-group-size", "4"], "--max-group-size"),
    (["--set", "ilp.mip_gap=1.5"], "--set ilp.mip_gap"),
    (["--colocation", "/no/such/file.csv"], "--colocation"),
])
def test_bad_arguments_are_one_line_with_status_2(extra: list[str], needle: str) -> None:
    out = run(*SMALL, *extra)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.stderr


def test_bad_job_file_names_row_and_field(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("name,application,num_gpus\nok,resnet18,1\nbad,resnet18,two\n")
    out = run("--cluster", str(EXAMPLES / "cluster-small.yaml"), "--jobs", str(jobs),
              "--profiles", str(EXAMPLES / "profiles-generic.csv"))
    assert out.returncode == 2
    (line,) = [x for x in out.stderr.splitlines() if x.strip()]
    assert "row 3" in line and "num_gpus" in line and str(jobs) in line
    jobs.write_text("name,application\nx,resnet99\n")
    out = run("--cluster", str(EXAMPLES / "cluster-small.yaml"), "--jobs", str(jobs),
              "--profiles", str(EXAMPLES / "profiles-generic.csv"))
    assert out.returncode == 2 and "resnet99" in out.stderr and "application" in out.stderr
