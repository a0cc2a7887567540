"""Machine-readable output is exactly what it claims: the real ``colocate`` console script, run as a
subprocess, prints parseable JSON on stdout for every ``--json`` command, whatever a solver prints
(HiGHS >= 1.12 writes a copyright banner to fd 1 when its first ``Highs`` is constructed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "scheduler" / "examples"
SMALL = ["--cluster", str(EXAMPLES / "cluster-small.yaml"), "--jobs", str(EXAMPLES / "jobs-small.csv"),
         "--profiles", str(EXAMPLES / "profiles-generic.csv"), "--colocation", str(EXAMPLES / "colocation-small.csv")]
TINY = "name,time,application,num_replicas,batch_size,work\n" \
       "cifar10-0,0,cifar10,1,128,300000\ncifar10-1,30,cifar10,2,256,400000\n" \
       "bert-2,60,bert,1,12,6000\ndeepspeech2-3,100,deepspeech2,1,20,40000\n"


def console_script() -> str:
    """The installed ``colocate`` entry point (next to this interpreter first), not ``python -m``."""
    found = shutil.which("colocate", path=str(Path(sys.executable).parent)) or shutil.which("colocate")
    assert found, "the colocate console script is not installed (pip install -e .)"
    return found


def colocate(*args: str, cwd: Path = REPO, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Run the console script on this checkout (PYTHONPATH first, so an install elsewhere is not used)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([console_script(), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def json_stdout(done: subprocess.CompletedProcess[str]) -> object:
    assert done.returncode == 0, done.stderr
    assert "Running HiGHS" not in done.stdout and "Copyright" not in done.stdout, done.stdout[:300]
    return json.loads(done.stdout)


def test_new_highs_and_pulp_highs_print_nothing_on_stdout() -> None:
    """The library level: a fresh process that builds HiGHS models directly and through PuLP (and CBC)
    writes nothing at all to its stdout, even when stdout is a pipe (C stdio fully buffered)."""
    code = ("import pulp\n"
            "from scheduler.ilp.solvers.quiet import native_stdout_to_devnull, new_highs\n"
            "h = new_highs(threads=1); h.run()\n"
            "for solver in (pulp.HiGHS(msg=False), pulp.PULP_CBC_CMD(msg=False)):\n"
            "    p = pulp.LpProblem('t', pulp.LpMaximize); x = pulp.LpVariable('x', 0, 1, cat='Binary')\n"
            "    p += x; p += x <= 1\n"
            "    with native_stdout_to_devnull():\n"
            "        p.solve(solver)\n"
            "    assert x.varValue == 1\n"
            "print('done')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"  # what Python prints after a solve still reaches stdout


@pytest.mark.parametrize("solver", ["highs", "pulp-highs", "cbc"])
def test_schedule_json_is_json_with_every_solver(solver: str) -> None:
    doc = json_stdout(colocate("schedule", *SMALL, "--set", f"ilp.solver={solver}", "--json"))
    assert isinstance(doc, dict) and doc["allocations"] and doc["solver"]["status"]


@pytest.mark.slow
def test_simulate_json_is_json_for_ilp_and_gavel_policies(tmp_path: Path) -> None:
    """colocate (HiGHS) and gavel-sia (pulp.HiGHS) policies; the Parquet logs written are readable."""
    workload = tmp_path / "tiny.csv"
    workload.write_text(TINY)
    for policy in ("colocate", "gavel-sia"):
        out = tmp_path / policy
        summary = json_stdout(colocate("simulate", "--cluster", "scheduler/data/cluster-default.yaml",
                                       "--workload", str(workload), "--policy", policy, "--out", str(out),
                                       "--json"))
        assert isinstance(summary, dict) and summary["policy"] == policy and summary["completed"] == 4
        assert len(pd.read_parquet(out / "jobs.parquet")) == 4
        assert json.loads((out / "summary.json").read_text())["policy"] == policy


def test_env_json_is_json() -> None:
    info = json_stdout(colocate("env", "--json"))
    assert isinstance(info, dict) and info


@pytest.mark.slow
def test_launch_emit_json_is_json(tmp_path: Path) -> None:
    """schedule --json feeds launch --emit --json: both ends machine-readable through the console script."""
    allocation = tmp_path / "allocation.json"
    allocation.write_text(colocate("schedule", *SMALL, "--json").stdout)
    commands = tmp_path / "commands.yaml"
    commands.write_text("transformer: python train_transformer.py\n")
    doc = json_stdout(colocate("launch", str(allocation), "--jobs", SMALL[3], "--commands", str(commands), "--emit", "slurm",
                                  str(tmp_path / "slurm"), "--json"))
    assert isinstance(doc, dict) and doc["emit"] == "slurm" and doc["files"]
    assert all(Path(f).exists() for f in doc["files"])
