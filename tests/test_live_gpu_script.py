"""``scripts/live-gpu.sh``: its dry run estimates the GPU time from the bundled H100 solo times without a device, and
the whole script runs end to end on the CPU (one logical GPU, tiny models) as the GPU run will: both policies,
a packed job past its memory limit failing alone, a report in at most 8 files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "live-gpu.sh"


def _run(out: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_dry_run_estimates_the_gpu_time_from_the_bundled_h100_solo_times(tmp_path: Path) -> None:
    from scheduler.formats.solo_times import solo_table

    result = _run(tmp_path / "out", "--dry-run", "--policy", "sia", "--job-s", "60")
    assert result.returncode == 0, result.stderr
    solos = solo_table("h100")
    rows = re.findall(r"^\s+(\S+)\s+(\w+)\s+batch\s+(\d+)\s+(\d+) steps\s+alone (\d+) s", result.stdout, re.M)
    assert len(rows) == 6 and {r[0] for r in rows} >= {"hog", "vgg19"}
    for _, model, batch, steps, alone in rows:  # each job sized to ~60 s from its measured solo step time
        assert int(alone) == pytest.approx(int(steps) * solos[(model, int(batch))].iter_time_s, abs=1)
        assert 55 <= int(alone) <= 65
    total = float(re.search(r"sia ≤ (\d+) s", result.stdout).group(1))
    assert total >= 6 * 60  # at least the jobs one after another
    both = _run(tmp_path / "out", "--dry-run")
    assert "total ≤" in both.stdout and float(re.search(r"total ≤ (\d+) s", both.stdout).group(1)) <= 540
    assert not list((tmp_path / "out").glob("*"))  # a dry run writes nothing


def test_the_dry_run_refuses_a_budget_past_one_device_call(tmp_path: Path) -> None:
    result = _run(tmp_path, "--dry-run", "--budget", "900")
    assert result.returncode == 2 and "at most 540" in result.stderr


@pytest.mark.slow
def test_the_script_runs_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _run(out, "--device", "cpu", "--budget", "540", timeout=700)  # a loaded CI machine: the longest window
    assert result.returncode == 0, result.stdout + result.stderr
    text = (out / "summary.txt").read_text()
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and {"summary.txt", "report.json", "states.tar.gz"} <= set(files)
    report = json.loads((out / "report.json").read_text())
    sia, colocate = report["runs"]
    assert sia["policy"] == "sia" and colocate["policy"] == "colocate"
    for run in (sia, colocate):
        assert all(job["state"] == "completed" for job in run["jobs"].values()), text
        assert run["makespan_s"] > 0 and run["gpu_busy_s"] > 0
    assert sia["groups"] == [] and colocate["groups"], text  # sia never packs; colocate does
    hog = [o for o in colocate["ooms"] if o["job"] == "hog"]
    assert hog and "limit" in hog[0]["detail"], text  # past its limit beside a partner: failed alone
    # its partners: the one named when it ran out, or (on a loaded machine the hog can reach its limit only after
    # they ended: "set beside partners that have ended") every job it was ever grouped with
    named = re.search(r"limit beside (\S+)", hog[0]["detail"])
    partners = (set(named.group(1).split(",")) if named else
                {m for g in colocate["groups"] if "hog" in g["members"] for m in g["members"]} - {"hog"})
    assert partners, text
    assert named or "partners that have ended" in hog[0]["detail"], text
    for partner in partners:  # none of them paid for the hog's overrun
        assert colocate["jobs"][partner]["state"] == "completed" and colocate["jobs"][partner]["ooms"] == 0, text
    assert all(m["limit_gib"] > 0 for m in colocate["memory_limits"])
    assert "== sia" in text and "== colocate" in text and "oom hog" in text
