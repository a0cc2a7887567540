"""`colocate launch --emit slurm DIR` under a real Slurm (tests/slurm_cluster.py): sbatch accepts every emitted
option, `submit_all.sh` runs a solo job, a pair and a two-GPU job to completion, `scancel` of a pair reaches
both jobs (they checkpoint and exit within the grace), and a failing member fails its Slurm job with its status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from colocate.cli import app
from tests.serve_helpers import REPO, wait_until

pytestmark = pytest.mark.slurm

ALLOCATION = {"allocations": [
    {"job": "solo", "gpu_type": "t4", "num_gpus": 1, "batch_size": 8, "partner": None, "node": 0, "gpus": [0],
     "application": "tiny_cnn"},
    {"job": "a", "gpu_type": "t4", "num_gpus": 1, "batch_size": 8, "partner": "b", "node": 0, "gpus": [1],
     "application": "tiny_cnn"},
    {"job": "b", "gpu_type": "t4", "num_gpus": 1, "batch_size": 4, "partner": "a", "node": 0, "gpus": [1],
     "application": "tiny_cnn"},
    {"job": "wide", "gpu_type": "a100", "num_gpus": 2, "batch_size": 16, "partner": None, "node": 0, "gpus": [0, 1],
     "application": "tiny_cnn"},
]}


def _emit(tmp_path: Path, allocation: dict[str, Any], *options: str, name: str = "sbatch") -> Path:
    """``colocate launch ALLOCATION --emit slurm DIR`` as a user runs it; returns DIR."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(allocation))
    out = tmp_path / name
    done = CliRunner().invoke(app, ["launch", str(path), "--emit", "slurm", str(out), *options])
    assert done.exit_code == 0, done.output
    return out


def _job_env() -> dict[str, str]:
    """What the submitting shell exports (sbatch passes it to the job): this interpreter and checkout."""
    return {**os.environ, "COLOCATE_PYTHON": sys.executable, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def _submit_all(slurm: Any, folder: Path) -> list[str]:
    done = subprocess.run(["bash", str(folder / "submit_all.sh")], capture_output=True, text=True,
                          env={**_job_env(), "SLURM_CONF": str(slurm.conf)}, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.split()[-1] for line in done.stdout.splitlines() if line.startswith("Submitted batch job")]


def test_sbatch_accepts_every_emitted_option(slurm: Any, tmp_path: Path) -> None:
    """``sbatch --test-only`` parses each script's options and asks the controller whether it could run."""
    wide = {"allocations": [*ALLOCATION["allocations"],
                            {"job": "spread", "gpu_type": "t4", "num_gpus": 4, "batch_size": 32, "partner": None,
                             "node": 2, "nodes": [2, 3], "gpus": [0, 1], "application": "tiny_cnn"}]}
    mps = {"allocations": [{**a, "sharing": "mps"} if a["job"] in ("a", "b") else a
                           for a in ALLOCATION["allocations"]]}
    folders = [_emit(tmp_path, wide, "--sbatch-option=--time=00:10:00", "--sbatch-option=--partition=t4",
                     name="default"),
               _emit(tmp_path, wide, "--typed-gres", name="typed"),
               _emit(tmp_path, mps, "--sharing", "mps", name="mps")]
    checked = 0
    for folder in folders:
        for script in sorted(folder.glob("*.sbatch")):
            if folder.name == "default" and "wide" in script.name:
                continue  # an a100 job in partition t4: refused by the cluster, not by the option parser
            done = slurm.run("sbatch", "--test-only", str(script), check=False)
            assert done.returncode == 0, f"{folder.name}/{script.name}: {done.stderr}"
            assert "to start at" in done.stderr, done.stderr
            checked += 1
    assert checked == 10
    refused = slurm.run("sbatch", "--test-only", "--no-such-option", str(folders[0] / "g00-solo.sbatch"), check=False)
    assert refused.returncode != 0  # the check above would catch an option sbatch does not know


@pytest.mark.slow
def test_submit_all_runs_a_solo_job_a_pair_and_a_two_gpu_job_to_completion(slurm: Any, tmp_path: Path) -> None:
    folder = _emit(tmp_path, ALLOCATION, "--device", "cpu", "--steps", "20")
    ids = _submit_all(slurm, folder)
    assert len(ids) == 3
    ended = slurm.wait_ended(ids, 400)
    for job_id, fields in ended.items():
        out = next((folder / "logs").glob(f"*-{job_id}.out"), None)
        assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), (fields, out and out.read_text())
    assert {ended[i]["JobName"] for i in ids} == {"colocate-g00-solo", "colocate-g01-a+b", "colocate-g02-wide"}
    assert ended[ids[2]]["NodeList"] == "a100-0" and "gpu:2" in ended[ids[2]]["TresPerNode"], ended[ids[2]]
    for job in ("solo", "a", "b", "wide"):
        progress = json.loads((folder / "logs" / f"{job}.progress.json").read_text())
        assert (progress["state"], progress["step"]) == ("finished", 20), job
    pair_out = next((folder / "logs").glob(f"colocate-g01-a+b-{ids[1]}.out")).read_text()
    assert "colocate: job a finished" in pair_out and "colocate: job b finished" in pair_out


@pytest.mark.slow
def test_scancel_of_a_pair_reaches_both_jobs_which_checkpoint_and_exit_within_the_grace(slurm: Any,
                                                                                         tmp_path: Path) -> None:
    pair = {"allocations": [a for a in ALLOCATION["allocations"] if a["job"] in ("a", "b")]}
    folder = _emit(tmp_path, pair, "--device", "cpu", "--steps", "0", "--grace", "8")  # 0: until stopped
    (job_id,) = _submit_all(slurm, folder)
    logs = folder / "logs"

    def both_training() -> bool:
        steps = [json.loads(p.read_text()).get("step", 0) for p in logs.glob("*.progress.json")]
        return len(steps) == 2 and min(steps) >= 3

    wait_until(both_training, 240, "both jobs of the pair to train", 0.5)
    cancelled = time.monotonic()
    slurm.run("scancel", job_id)
    fields = slurm.wait_ended([job_id], 60)[job_id]
    took = time.monotonic() - cancelled
    assert fields["JobState"] == "CANCELLED"
    assert took < slurm.kill_wait_s + 5, f"the pair took {took:.1f} s to end"  # before Slurm's SIGKILL
    for job in ("a", "b"):
        progress = json.loads((logs / f"{job}.progress.json").read_text())
        assert progress["state"] == "stopped" and progress["step"] >= 3, (job, progress)
        assert (logs / f"{job}.checkpoint.pt").stat().st_size > 0, job  # written on SIGTERM
        assert "stopped" in (logs / f"{job}.log").read_text()


def test_a_failing_member_fails_its_slurm_job_with_the_members_status(slurm: Any, tmp_path: Path) -> None:
    pair = {"allocations": [
        {"job": "good", "gpu_type": "t4", "num_gpus": 1, "batch_size": 4, "partner": "bad", "node": 0, "gpus": [0],
         "command": "echo fine; sleep 1"},
        {"job": "bad", "gpu_type": "t4", "num_gpus": 1, "batch_size": 4, "partner": "good", "node": 0, "gpus": [0],
         "command": "echo 'loss is nan' >&2; exit 3"}]}
    folder = _emit(tmp_path, pair)
    (job_id,) = _submit_all(slurm, folder)
    fields = slurm.wait_ended([job_id], 60)[job_id]
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "3:0")
    out = next((folder / "logs").glob(f"*-{job_id}.out")).read_text()
    assert "colocate: job good finished" in out and "colocate: job bad failed with status 3" in out
    assert "loss is nan" in (folder / "logs" / "bad.log").read_text()


SAMPLES = {"--account": "ml", "--qos": "normal", "--reservation": "maint", "--partition": "t4", "--time": "10",
           "--time-min": "5", "--constraint": "t4", "--prefer": "t4", "--exclude": "a100-0", "--nodelist": "t4-0",
           "--mem": "100", "--mem-per-cpu": "100", "--mem-per-gpu": "100", "--tmp": "10", "--licenses": "lic",
           "--comment": "hi", "--mail-type": "END", "--mail-user": "me@example.org", "--wckey": "w",
           "--priority": "1", "--nice": "5", "--exclusive": "user", "--gpu-freq": "medium"}


def test_every_option_colocate_passes_on_is_one_sbatch_knows(slurm: Any, tmp_path: Path) -> None:
    """The allow-list of slurm.options / --sbatch-option (scheduler/executor/slurm/settings.py) names sbatch's own
    options, each given as colocate checks it: a value where it needs one, none for a flag."""
    from scheduler.executor.slurm.settings import SBATCH_PASSED, check_sbatch_option

    def parse_error(option: str) -> str:
        done = slurm.run("sbatch", "--test-only", option, "--output=/dev/null", "--wrap=true", check=False)
        said = done.stderr.lower()
        return said if any(w in said for w in ("unrecognized option", "requires an argument", "allow an argument",
                                               "invalid option", "usage:")) else ""

    assert parse_error("--no-such-option")  # the check below would see an option sbatch does not know
    for name, takes in SBATCH_PASSED.items():
        option = name if takes is False else f"{name}={SAMPLES[name]}"
        assert check_sbatch_option(option, field="test") == option
        assert not parse_error(option), f"{option}: {parse_error(option)}"
