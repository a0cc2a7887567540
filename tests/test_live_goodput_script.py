"""scripts/live_goodput.py's real-training queue (``--jobs real``): six valid job files whose commands run
scripts/digits_job.py with arguments it accepts; the digits job itself trains on the job library to its target
validation loss (slow: torch and scikit-learn start in a subprocess)."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from scheduler.service.jobs.jobspec import job_from_dict

REPO = Path(__file__).resolve().parents[1]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dry_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "live_goodput.py"), "--dry-run", *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_real_queue_is_six_valid_job_files_running_the_digits_job_with_arguments_it_accepts() -> None:
    out = _dry_run("--jobs", "real", "--samples", "5000")
    assert out.returncode == 0, out.stderr
    specs = [json.loads(line) for line in out.stdout.splitlines()]
    assert len({s["name"] for s in specs}) == 6
    digits = _script("digits_job")
    noise = set()
    for spec in specs:
        job = job_from_dict(spec)
        assert (job.samples, job.batch_size, job.adaptive) == (5000, 32, True)
        words = shlex.split(spec["command"])
        assert words[:3] == ["exec", "env", f"PYTHONPATH={REPO}"] and words[4] == str(REPO / "scripts" / "digits_job.py")
        args = digits.parser().parse_args(words[5:])
        digits.check(args)  # exits 2 on a bad one
        assert args.base_batch == spec["batch_size"]
        noise.add((args.label_noise, args.train_size))
    assert len(noise) >= 3  # what sets their gradient noise scales apart differs
    known = [json.loads(line) for line in _dry_run().stdout.splitlines()]
    assert [s["name"] for s in known] == [f"noise-{b}" for b in (8, 32, 128, 512, 2048, 8192)]


def test_a_bad_argument_is_one_line_naming_it() -> None:
    out = _dry_run("--jobs", "real", "--samples", "0")
    assert out.returncode == 2 and "--samples: 0 is not an integer ≥ 1" in out.stderr
    job = subprocess.run([sys.executable, str(REPO / "scripts" / "digits_job.py"), "--target-loss", "0.5",
                          "--label-noise", "1.5"], capture_output=True, text=True, timeout=60)
    assert job.returncode == 2 and "--label-noise: 1.5 is not a share in [0, 1)" in job.stderr
    assert "Traceback" not in job.stderr


@pytest.mark.slow
def test_the_digits_job_trains_to_its_target_validation_loss_and_reports_its_gradient_noise(tmp_path: Path) -> None:
    from scheduler.executor.job_files import read_progress

    progress = tmp_path / "progress.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLOCATE_JOB": "d", "COLOCATE_BATCH_SIZE": "64",
           "COLOCATE_CHECKPOINT": str(tmp_path / "ckpt.pt"), "COLOCATE_PROGRESS_FILE": str(progress),
           "COLOCATE_TARGET_SAMPLES": "64"}  # serve's estimate of the work: not a stop for this job
    subprocess.run([sys.executable, str(REPO / "scripts" / "digits_job.py"), "--target-loss", "0.6",
                    "--eval-every", "512"], env=env, check=True, timeout=300, capture_output=True)
    record = read_progress(progress)
    assert record is not None and record["state"] == "finished" and record["val_loss"] <= 0.6
    assert record["samples"] > 64 and record["grad_var"] > 0 and record["grad_sqr"] > 0
