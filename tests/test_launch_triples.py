"""`colocate launch` with a group of three on one GPU (what `colocate schedule --max-group-size 3` emits): the
sbatch script, the HAMi pods and the local back end all run the three jobs together with the sharing mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scheduler.executor.launch import LaunchRequest, launch

REPO = Path(__file__).resolve().parents[1]
TRIPLE = {"allocations": [
    {"job": j, "gpu_type": "h100", "num_gpus": 1, "batch_size": b, "partner": others[0], "partners": list(others),
     "node": 0, "gpus": [2], "application": "tiny_cnn"}
    for j, b, others in (("a", 8, ("b", "c")), ("b", 4, ("a", "c")), ("c", 8, ("a", "b")))
], "unallocated": []}


@pytest.fixture
def allocation(tmp_path: Path) -> Path:
    path = tmp_path / "alloc.json"
    path.write_text(json.dumps(TRIPLE))
    return path


def test_cli_emits_one_mps_script_running_all_three(allocation: Path, tmp_path: Path) -> None:
    out = tmp_path / "slurm"
    proc = subprocess.run([sys.executable, "-m", "colocate.cli", "launch", str(allocation), "--emit", "slurm", str(out),
                           "--sharing", "mps"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "a+b+c" in proc.stdout and "mps" in proc.stdout
    (script,) = out.glob("*.sbatch")
    assert script.name == "g00-a+b+c.sbatch"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "#SBATCH --gres=gpu:1\n" in text and "nvidia-cuda-mps-control -d" in text
    assert text.count(" setsid ") == 3 and text.count("PIDS+=($!)") == 3
    for job, others in (("a", "b,c"), ("b", "a,c"), ("c", "a,b")):
        assert f"COLOCATE_JOB={job} " in text and f"COLOCATE_PARTNERS={others} " in text


def test_hami_pods_share_one_gpu_and_split_its_memory_in_three(allocation: Path, tmp_path: Path) -> None:
    outcome = launch(LaunchRequest(allocation, emit=("k8s", tmp_path / "k8s"), sharing="mps"))
    assert outcome.emitted is not None
    pods = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(outcome.emitted.files)}
    assert list(pods) == ["g00-a", "g00-b", "g00-c"]
    notes = [pod["metadata"]["annotations"] for pod in pods.values()]
    assert {n["nvidia.com/use-gpuuuid"] for n in notes} == {"GPU-UUID-h100-node0-gpu2"}
    assert {n["nvidia.com/vgpu-mode"] for n in notes} == {"mps"}
    assert [n["colocate.io/partners"] for n in notes] == ["b,c", "a,c", "a,b"]
    limits = [pod["spec"]["containers"][0]["resources"]["limits"] for pod in pods.values()]
    assert all(lim == {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 33} for lim in limits)


@pytest.mark.slow
def test_local_backend_trains_the_three_together_for_real(allocation: Path, tmp_path: Path) -> None:
    request = LaunchRequest(allocation, device="cpu", steps=5, log_dir=tmp_path / "logs")
    outcome = launch(request)
    assert outcome.report is not None and outcome.report.ok
    assert [(j.job, j.group, j.state, j.step) for j in outcome.report.jobs] == [
        (n, "g00-a+b+c", "finished", 5) for n in "abc"]
