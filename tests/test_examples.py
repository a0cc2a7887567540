"""Every example in examples/ runs through a real `colocate serve` (local backend, CPU) to completion."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from colocate.cli import app
from tests.serve_helpers import REPO, ServeProcess, by_name, kill_groups, wait_until, write_cluster

pytestmark = pytest.mark.slow
NEEDS = {"plain": ["sklearn"], "ddp": ["sklearn"], "lightning": ["sklearn", "lightning"],
         "huggingface": ["sklearn", "transformers", "accelerate"]}


@pytest.mark.parametrize("example", sorted(NEEDS))
def test_an_example_trains_to_its_target_under_serve(example: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for module in NEEDS[example]:
        pytest.importorskip(module)
    # the job's `python` is this interpreter; its `from colocate import job` this checkout
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    state, job_file = tmp_path / "state", REPO / "examples" / example / "job.yaml"
    result = CliRunner().invoke(app, ["submit", "--state", str(state), str(job_file)])
    assert result.exit_code == 0, result.output
    name = result.output.strip().split()[-1]
    server = ServeProcess(state, write_cluster(tmp_path / "cluster.yaml", {"t4": 2}), "--backend", "local",
                          log=tmp_path / "serve.log")
    try:
        server.start()
        wait_until(lambda: by_name(state)[name]["state"] in ("completed", "failed"), 420, f"{name} to complete")
        log = (state / "jobs" / name / "train.log").read_text(errors="replace")
        assert by_name(state)[name]["state"] == "completed", server.output() + log[-3000:]
        progress = json.loads((state / "jobs" / name / "progress.json").read_text())
        assert progress["state"] == "finished" and progress["samples"] >= progress["target_samples"]
        assert progress["lr"] > 0 and progress.get("grad_var", 0) >= 0  # grad_sqr: once its estimate is positive
    finally:
        server.stop()
        kill_groups(state)
