"""`colocate launch --emit slurm|k8s DIR`: sbatch scripts that bash accepts and runs, HAMi pod manifests."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from common.errors import InputError
from scheduler.executor.command import RunSettings
from scheduler.executor.k8s import K8sOptions, emit_k8s, load_inventory
from scheduler.executor.plan import build_plan
from scheduler.executor.slurm.emit import SlurmOptions, emit_slurm

ALLOCATION = {"allocations": [
    {"job": "a", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": "b", "node": 0, "gpus": [1]},
    {"job": "b", "gpu_type": "h100", "num_gpus": 1, "batch_size": 4, "partner": "a", "node": 0, "gpus": [1]},
    {"job": "c", "gpu_type": "a100", "num_gpus": 1, "batch_size": 8, "partner": "d", "node": 1, "gpus": [0],
     "sharing": "mps"},
    {"job": "d", "gpu_type": "a100", "num_gpus": 1, "batch_size": 8, "partner": "c", "node": 1, "gpus": [0]},
    {"job": "big-job", "gpu_type": "a100", "num_gpus": 2, "batch_size": 64, "partner": None, "node": 0,
     "gpus": [0, 1]},
], "unallocated": []}
APPS = {"a": "tiny_cnn", "b": "tiny_cnn", "c": "tiny_cnn", "d": "custom", "big-job": "resnet50"}
COMMANDS = {"custom": "python my_train.py --batch-size {batch_size} --tag '{job} & {partner}'"}


def _plan(allocation=ALLOCATION, commands=COMMANDS):
    return build_plan(allocation, applications=APPS, commands=commands)


def _bash_n(path: Path) -> None:
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, f"{path.name}: {result.stderr}"


# -- Slurm ------------------------------------------------------------------------------------------------
def test_one_sbatch_script_per_gpu_group_that_bash_accepts(tmp_path: Path) -> None:
    scripts = emit_slurm(_plan(), tmp_path, RunSettings(steps=100), SlurmOptions(extra=("--time=01:00:00",)))
    assert [p.name for p in scripts] == ["g00-a+b.sbatch", "g01-c+d.sbatch", "g02-big-job.sbatch"]
    for script in [*scripts, tmp_path / "submit_all.sh"]:
        _bash_n(script)
        assert os.access(script, os.X_OK)
    pair, mps_pair, solo = (p.read_text() for p in scripts)
    for text in (pair, mps_pair):
        assert "#SBATCH --gres=gpu:1\n" in text and "#SBATCH --nodes=1\n" in text
        assert "#SBATCH --time=01:00:00" in text and "trap cleanup EXIT" in text
        assert text.count(" setsid ") == 2 and text.count("PIDS+=($!)") == 2  # both jobs, in the background
    assert "#SBATCH --constraint=h100" in pair and "#SBATCH --constraint=a100" in mps_pair
    assert "nvidia-cuda-mps-control" not in pair
    assert "nvidia-cuda-mps-control -d" in mps_pair and "echo quit | nvidia-cuda-mps-control" in mps_pair
    assert 'mkdir -m 700 "$CUDA_MPS_PIPE_DIRECTORY"' in mps_pair
    (line,) = [line for line in mps_pair.splitlines() if "/bin/sh -c" in line]
    words = shlex.split(line)  # the user command survives shell quoting intact
    assert words[words.index("-c") + 1] == "python my_train.py --batch-size 8 --tag 'd & c'"
    assert "#SBATCH --gres=gpu:2" in solo and "quiet_torchrun" in solo and "--nproc-per-node=2" in solo
    typed = emit_slurm(_plan(), tmp_path / "typed", RunSettings(), SlurmOptions(typed_gres=True))
    assert "#SBATCH --gres=gpu:h100:1" in typed[0].read_text() and "--constraint" not in typed[0].read_text()
    submit = (tmp_path / "submit_all.sh").read_text()
    assert all(f"sbatch {p.name}" in submit.replace("'", "") for p in scripts)


def test_multi_node_solo_uses_srun_and_torchrun_rendezvous(tmp_path: Path) -> None:
    wide = {"allocations": [{"job": "w", "gpu_type": "h100", "num_gpus": 16, "batch_size": 512, "node": 2,
                             "nodes": [2, 3], "gpus": list(range(8))}]}
    (script,) = emit_slurm(build_plan(wide, applications={"w": "resnet50"}), tmp_path, RunSettings(), SlurmOptions())
    text = script.read_text()
    _bash_n(script)
    assert "#SBATCH --nodes=2" in text and "#SBATCH --gres=gpu:8" in text
    assert "srun --kill-on-bad-exit=1" in text and "--nnodes=2" in text and "--nproc-per-node=8" in text
    assert '--rdzv-endpoint="$HEAD_NODE:29500"' in text and "scontrol show hostnames" in text


def _run_script(script: Path, tmp_path: Path, **extra_env: str) -> subprocess.Popen[str]:
    env = {**os.environ, "COLOCATE_PYTHON": sys.executable, "COLOCATE_LOG_DIR": str(tmp_path / "logs"),
           **extra_env}
    return subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.slow
def test_a_pair_script_runs_both_training_jobs_to_the_end(tmp_path: Path) -> None:
    """What Slurm would run, run by bash here: the two built-in jobs train on CPU and both finish."""
    scripts = emit_slurm(_plan(), tmp_path, RunSettings(device="cpu", steps=20, log_every=10), SlurmOptions())
    process = _run_script(scripts[0], tmp_path)
    out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err
    assert "colocate: job a finished" in out and "colocate: job b finished" in out
    for job in ("a", "b"):
        assert f"[{job}] finished after 20 steps" in (tmp_path / "logs" / f"{job}.log").read_text()
        progress = json.loads((tmp_path / "logs" / f"{job}.progress.json").read_text())
        assert (progress["state"], progress["step"]) == ("finished", 20)


def _mps_stand_in(tmp_path: Path) -> Path:
    """nvidia-cuda-mps-control is absent on CPU machines: a stand-in that records how the script uses it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "mps-calls.txt"
    stand_in = bin_dir / "nvidia-cuda-mps-control"
    stand_in.write_text(f"""#!/bin/bash
if [[ "${{1:-}}" == "-d" ]]; then
  echo "start pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY mode=$(stat -c %a "$CUDA_MPS_PIPE_DIRECTORY") \
cvd=${{CUDA_VISIBLE_DEVICES-unset}}" >> {record}
else
  echo "command $(cat) pipe=$CUDA_MPS_PIPE_DIRECTORY" >> {record}
fi
""")
    stand_in.chmod(0o755)
    return bin_dir


def test_mps_script_starts_a_private_daemon_and_quits_it_when_terminated(tmp_path: Path) -> None:
    client = 'echo "client pipe=$CUDA_MPS_PIPE_DIRECTORY cvd=${{CUDA_VISIBLE_DEVICES-unset}}"; sleep 300 & wait'
    commands = {"tiny_cnn": client, "custom": client}
    scripts = emit_slurm(_plan(commands=commands), tmp_path, RunSettings(), SlurmOptions(grace_s=5))
    bin_dir = _mps_stand_in(tmp_path)
    # Slurm gave the group GPU 1: the daemon is started on it, its clients see it as device 0 (no narrowing)
    process = _run_script(scripts[1], tmp_path, PATH=f"{bin_dir}:{os.environ['PATH']}", CUDA_VISIBLE_DEVICES="1")
    logs = [tmp_path / "logs" / "c.log", tmp_path / "logs" / "d.log"]
    deadline = time.monotonic() + 30
    while not all(log.is_file() and "client" in log.read_text() for log in logs) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(process.pid, signal.SIGTERM)  # what scancel (or --signal=B:TERM) does to the batch shell
    process.communicate(timeout=30)
    assert process.returncode == 143
    calls = (tmp_path / "mps-calls.txt").read_text().splitlines()
    assert len(calls) == 2 and calls[0].startswith("start ") and calls[1].startswith("command quit ")
    pipe = calls[0].split()[1].removeprefix("pipe=")
    assert "mode=700" in calls[0] and calls[1].endswith(f"pipe={pipe}")  # quit goes to our own daemon
    assert all(f"client pipe={pipe} cvd=unset" in log.read_text() for log in logs)  # both clients use its pipe
    assert calls[0].endswith(" cvd=1")  # the daemon owns the group's GPU
    assert not Path(pipe).exists()  # private directories removed
    sleepers = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True).stdout.split()
    assert not [pid for pid in sleepers if str(tmp_path) in Path(f"/proc/{pid}/cwd").resolve().as_posix()]


# -- Kubernetes -------------------------------------------------------------------------------------------
def test_one_hami_pod_manifest_per_job_pins_partners_to_one_gpu(tmp_path: Path) -> None:
    files = emit_k8s(_plan(), tmp_path, RunSettings(steps=100), K8sOptions(image="registry/colocate:1"))
    assert [f.name for f in files] == ["g00-a.yaml", "g00-b.yaml", "g01-c.yaml", "g01-d.yaml", "g02-big-job.yaml"]
    pods = {f.stem.split("-", 1)[1]: yaml.safe_load(f.read_text()) for f in files}
    assert all(p["apiVersion"] == "v1" and p["kind"] == "Pod" for p in pods.values())
    notes = {name: pod["metadata"]["annotations"] for name, pod in pods.items()}
    assert notes["a"]["nvidia.com/use-gpuuuid"] == notes["b"]["nvidia.com/use-gpuuuid"] == "GPU-UUID-h100-node0-gpu1"
    uuid = "nvidia.com/use-gpuuuid"
    assert notes["c"][uuid] == notes["d"][uuid] != notes["a"][uuid]
    assert notes["c"]["nvidia.com/vgpu-mode"] == notes["d"]["nvidia.com/vgpu-mode"] == "mps"
    assert notes["a"]["nvidia.com/vgpu-mode"] == "hami-core"
    assert "nvidia.com/vgpu-mode" not in notes["big-job"]
    assert notes["big-job"]["nvidia.com/use-gpuuuid"] == "GPU-UUID-a100-node0-gpu0,GPU-UUID-a100-node0-gpu1"
    assert notes["a"]["nvidia.com/use-gputype"] == "H100" and notes["a"]["colocate.io/partner"] == "b"
    limits = {name: pod["spec"]["containers"][0]["resources"]["limits"] for name, pod in pods.items()}
    assert limits["a"] == {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50}
    assert limits["big-job"] == {"nvidia.com/gpu": 2}
    a = pods["a"]["spec"]
    assert a["schedulerName"] == "hami-scheduler" and a["containers"][0]["image"] == "registry/colocate:1"
    assert a["containers"][0]["command"][:3] == ["python3", "-m", "scheduler.executor.train"]
    assert pods["d"]["spec"]["containers"][0]["command"][:2] == ["/bin/sh", "-c"]
    env = {e["name"]: e["value"] for e in a["containers"][0]["env"]}
    assert env["COLOCATE_PARTNER"] == "b" and env["COLOCATE_BATCH_SIZE"] == "8"
    assert pods["big-job"]["metadata"]["name"] == "colocate-big-job"


def test_an_inventory_fills_in_gpu_uuids_and_node_names(tmp_path: Path) -> None:
    inventory_path = tmp_path / "inventory.yaml"
    inventory_path.write_text(yaml.safe_dump({
        "h100": [{"node": "h-0", "gpus": ["GPU-h0", "GPU-h1"]}],
        "a100": [{"node": "a-0", "gpus": ["GPU-a0", "GPU-a1"]}, {"node": "a-1", "gpus": ["GPU-b0"]}],
    }))
    inventory = load_inventory(inventory_path)
    files = emit_k8s(_plan(), tmp_path / "out", RunSettings(), K8sOptions(namespace="train"), inventory)
    pods = {f.stem.split("-", 1)[1]: yaml.safe_load(f.read_text()) for f in files}
    assert pods["a"]["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] == "GPU-h1"
    assert pods["a"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "h-0"}
    assert pods["c"]["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] == "GPU-b0"
    assert pods["c"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "a-1"}
    assert pods["c"]["metadata"]["namespace"] == "train"
    short = {"h100": [{"node": "h-0", "gpus": ["GPU-h0"]}], "a100": inventory["a100"]}
    with pytest.raises(InputError, match="lists 1 GPUs"):
        emit_k8s(_plan(), tmp_path / "x", RunSettings(), K8sOptions(), short)
    inventory_path.write_text("h100: [{gpus: [GPU-1]}]\n")
    with pytest.raises(InputError) as info:
        load_inventory(inventory_path)
    assert info.value.field == "h100[0]"


def test_cli_emits_and_prints_where(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from colocate.cli import app

    allocation = tmp_path / "alloc.json"
    allocation.write_text(json.dumps(ALLOCATION))
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("name,application\n" + "".join(f"{n},{a}\n" for n, a in APPS.items()))
    commands = tmp_path / "commands.yaml"
    commands.write_text(yaml.safe_dump(COMMANDS))
    base = ["launch", str(allocation), "--jobs", str(jobs), "--commands", str(commands)]
    runner = CliRunner()
    for kind, suffix, count in (("slurm", ".sbatch", 3), ("k8s", ".yaml", 5)):
        result = runner.invoke(app, [*base, "--emit", kind, str(tmp_path / kind), "--json"])
        assert result.exit_code == 0, result.output
        files = json.loads(result.stdout)["files"]
        assert len(files) == count and all(f.endswith(suffix) and Path(f).is_file() for f in files)
    result = runner.invoke(app, [*base, "--emit", "k8s", str(tmp_path / "table")])
    assert result.exit_code == 0 and "GPU-UUID placeholders" in result.stdout and "g02" in result.stdout
    result = runner.invoke(app, [*base, "--emit", "nomad", str(tmp_path / "n")])
    assert isinstance(result.exception, InputError) and "slurm DIR, k8s DIR" in str(result.exception)
