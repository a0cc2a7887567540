"""The ``colocate bench`` commands run as a user would run them, at the smallest sizes: a benchmark that no
longer starts (``bench serve`` once built a server config its own validation refuses) is a defect that no
figure in results/BENCHMARKS.md would show until someone needs a new one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", "from colocate.cli import main; main()", "bench", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_bench_serve_runs_rounds_and_splits_policy_from_bookkeeping() -> None:
    result = _bench("serve", "--jobs", "12", "--rounds", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "steady state (rounds 2+): median round" in result.stdout and "Traceback" not in result.stderr


def test_bench_scheduler_runs_one_small_case() -> None:
    result = _bench("scheduler", "--cases", "64:12", "--repeats", "1", "--no-reference", "--rounds", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "packing: top-k + pricing" in result.stdout
