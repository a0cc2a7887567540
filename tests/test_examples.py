"""Every example in examples/ runs through a real `colocate serve` (local backend, CPU) to completion."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

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


@pytest.mark.parametrize("example", ["plain", "lightning", "huggingface"])
def test_an_example_stopped_by_sigterm_checkpoints_says_stopped_and_exits_0(example: str, tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    for module in NEEDS[example]:
        pytest.importorskip(module)
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLOCATE_CHECKPOINT": str(tmp_path / "c.pt"),
           "COLOCATE_PROGRESS_FILE": str(tmp_path / "p.json"), "COLOCATE_TARGET_SAMPLES": "10000000",
           "COLOCATE_BATCH_SIZE": "32", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(REPO / "examples" / example / "train.py")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    progress = tmp_path / "p.json"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.exists() and json.loads(progress.read_text()).get("step", 0) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out[-3000:]
    record = json.loads(progress.read_text())
    assert record["state"] == "stopped" and record["step"] >= 3, record
    assert (tmp_path / "c.pt").exists() or list(tmp_path.glob("c.pt.hf/checkpoint-*/colocate.json"))
