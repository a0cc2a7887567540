"""The job library (scheduler.jobkit, public as colocate.job): environment, estimates, LR scaling, a run's records."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from common.errors import InputError
from scheduler.jobkit import GradientNoise, JobConfig, JobEnv, attach, lr_factor, read_env

REPO = Path(__file__).resolve().parents[1]


def test_the_public_module_imports_none_of_the_schedulers_heavy_dependencies() -> None:
    code = ("import sys; from colocate import job; assert job.attach; "
            "print(sorted(m for m in ('pandas', 'highspy', 'scipy', 'pulp', 'pyarrow', 'typer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_environment_is_read_and_a_bad_variable_is_named() -> None:
    env = read_env({"COLOCATE_JOB": "a", "COLOCATE_BATCH_SIZE": "64", "COLOCATE_TARGET_SAMPLES": "1000",
                    "COLOCATE_CHECKPOINT": "/x/c.pt", "WORLD_SIZE": "2", "RANK": "1"})
    assert (env.job, env.batch_size, env.target_samples, env.world_size, env.rank) == ("a", 64, 1000, 2, 1)
    assert env.checkpoint == Path("/x/c.pt") and env.progress_file is None and env.memory_limit_bytes is None
    with pytest.raises(InputError, match="COLOCATE_BATCH_SIZE.*'sixty'"):
        read_env({"COLOCATE_BATCH_SIZE": "sixty"})
    with pytest.raises(InputError, match="RANK"):
        read_env({"WORLD_SIZE": "2", "RANK": "2"})
    with pytest.raises(InputError, match="lr_scaling.*adascale, linear, sqrt, none"):
        JobConfig(lr_scaling="cubic")


def test_the_job_files_lr_scaling_reaches_the_run_and_an_explicit_one_wins() -> None:
    """serve hands a job file's ``lr_scaling`` to the job as COLOCATE_LR_SCALING: read back as named, a bad name
    refused naming the variable; the script's own JobConfig value wins over it, the library default comes last."""
    from scheduler.service.jobs.jobspec import job_from_dict

    spec = job_from_dict({"name": "a", "model": "tiny_cnn", "steps": 3, "batch_size": 8, "lr_scaling": "sqrt"})
    env = read_env({"COLOCATE_LR_SCALING": spec.lr_scaling or ""})
    assert env.lr_scaling == "sqrt" and read_env({}).lr_scaling is None
    assert JobConfig().scaling(env) == "sqrt" and JobConfig(lr_scaling="none").scaling(env) == "none"
    assert JobConfig().scaling(read_env({})) == "adascale"
    with pytest.raises(InputError, match="environment: field 'COLOCATE_LR_SCALING': 'cubic'.*adascale, linear"):
        read_env({"COLOCATE_LR_SCALING": "cubic"})


def test_the_estimates_recover_a_known_gradient_norm_and_noise() -> None:
    """Per-example gradients g_i = G + noise with |G|² = 4 and tr Σ = 64: the two-batch estimators, averaged,
    find both (unbiased: the mean over 400 steps is within a few standard errors)."""
    gen = torch.Generator().manual_seed(0)
    dim, true_g = 64, torch.zeros(64)
    true_g[0] = 2.0
    noise = GradientNoise(smoothing=0.99)
    for _ in range(400):
        examples = true_g + torch.randn(128, dim, generator=gen)  # Σ = I: tr Σ = 64
        small, big = examples[:16].mean(0), examples.mean(0)
        noise.update(float(small.pow(2).sum()), 16, float(big.pow(2).sum()), 128)
    assert noise.grad_sqr == pytest.approx(4.0, rel=0.25)
    assert noise.grad_var == pytest.approx(64.0, rel=0.1)
    assert noise.noise_scale == pytest.approx(16.0, rel=0.3)
    assert GradientNoise().grad_sqr is None and GradientNoise().grad_var is None  # nothing before an estimate


def test_the_learning_rate_scalings() -> None:
    noisy, clean = GradientNoise(smoothing=0.0), GradientNoise(smoothing=0.0)
    noisy.update(1 + 1000 / 8, 8, 1 + 1000 / 64, 64)  # |G|² = 1, tr Σ = 1000
    clean.update(1 + 0.01 / 8, 8, 1 + 0.01 / 64, 64)
    assert lr_factor("linear", 128, 32) == 4 and lr_factor("sqrt", 128, 32) == 2 and lr_factor("none", 128, 32) == 1
    assert lr_factor("adascale", 128, 32) == 1.0  # no statistics yet: no gain
    noisy_gain, clean_gain = lr_factor("adascale", 128, 32, noisy), lr_factor("adascale", 128, 32, clean)
    assert 1 <= clean_gain < 1.01 and 3.0 < noisy_gain <= 4  # in [1, s]: s while noise dominates, 1 when clean
    assert lr_factor("adascale", 32, 32, noisy) == 1.0


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(200, 8, generator=gen)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long()


def _train(env: JobEnv, batch: int, config: JobConfig, *, stop_after: int | None = None) -> str:
    x, y = _data()
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    loss_fn = torch.nn.CrossEntropyLoss()
    with attach(model, optimizer, lr_scheduler=sched, config=config, env=env, batch_size=batch) as run:
        while run.running():
            idx = run.batch_indices(len(x))
            run.backward(lambda xb, yb: loss_fn(run.model(xb), yb), x[idx], y[idx])
            run.step()
            if stop_after is not None and run.step_count == stop_after:
                os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's stop: the step ends, then the run
    return run.close()


def test_a_run_reports_checkpoints_and_resumes_at_another_batch_size(tmp_path: Path) -> None:
    progress, ckpt = tmp_path / "progress.json", tmp_path / "ckpt.pt"
    env = JobEnv(job="t", progress_file=progress, checkpoint=ckpt, target_samples=960)
    config = JobConfig(stats_every=1, stats_budget=1.0, log_every=0)
    assert _train(env, 16, config, stop_after=20) == "stopped"
    first = json.loads(progress.read_text())
    assert (first["state"], first["step"], first["samples"], first["batch_size"]) == ("stopped", 20, 320, 16)
    assert first["grad_sqr"] > 0 and first["grad_var"] >= 0 and first["lr"] == pytest.approx(0.01)  # StepLR: 0.02/2
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers handed back
    # resumed at 4x the batch: the samples go on from 320, the LR scheduler from its step 20, the LR gains
    assert _train(env, 64, config) == "finished"
    last = json.loads(progress.read_text())
    assert (last["state"], last["restored_step"], last["samples"], last["step"]) == ("finished", 20, 960, 30)
    assert 0.005 < last["lr"] <= 0.02  # 0.005 (StepLR after 30 steps) × AdaScale's gain in [1, 4]
    state = torch.load(ckpt, weights_only=True)
    assert state["base_batch"] == 16 and state["noise"]["updates"] == 30


@pytest.mark.parametrize(("from_file", "in_script", "factor"), [
    ("linear", None, 4.0), ("sqrt", None, 2.0), ("none", None, 1.0), ("linear", "sqrt", 2.0), (None, "linear", 4.0)])
def test_the_learning_rate_after_a_resize_follows_the_job_files_scaling_unless_the_script_sets_one(
        tmp_path: Path, from_file: str | None, in_script: str | None, factor: float) -> None:
    """Stopped at batch 16 after 20 steps, resumed at 64 (s = 4): the LR is StepLR's 0.005 times the scaling's
    factor — the job file's (COLOCATE_LR_SCALING), unless the script's JobConfig names one."""
    progress = tmp_path / "progress.json"
    env = JobEnv(job="t", progress_file=progress, checkpoint=tmp_path / "ckpt.pt", target_samples=960,
                 lr_scaling=from_file)
    config = JobConfig(lr_scaling=in_script, stats_every=1, stats_budget=1.0, log_every=0)
    assert _train(env, 16, config, stop_after=20) == "stopped"
    assert json.loads(progress.read_text())["lr"] == pytest.approx(0.01)  # at the base batch: no scaling
    assert _train(env, 64, config) == "finished"
    last = json.loads(progress.read_text())
    assert last["lr"] == pytest.approx(0.005 * factor) and last["lr_scaling"] == (in_script or from_file)


def test_a_job_that_reaches_its_own_target_finishes_before_its_sample_target(tmp_path: Path) -> None:
    """Run.finish (a target validation loss, say): the loop ends, the run closes "finished" at the step it was
    called, far short of the environment's sample target."""
    progress = tmp_path / "progress.json"
    x, y = _data()
    model = _mlp()
    run = attach(model, torch.optim.SGD(model.parameters(), lr=0.02), batch_size=16, config=JobConfig(log_every=0),
                 env=JobEnv(job="t", progress_file=progress, checkpoint=tmp_path / "c.pt", target_samples=10**6))
    loss_fn = torch.nn.CrossEntropyLoss()
    while run.running():
        idx = run.batch_indices(len(x))
        run.backward(lambda xb, yb: loss_fn(run.model(xb), yb), x[idx], y[idx])
        run.step()
        if run.step_count == 5:
            run.finish()
    assert run.close() == "finished" and run.step_count == 5
    record = json.loads(progress.read_text())
    assert (record["state"], record["samples"]) == ("finished", 80)


def test_batch_indices_stream_on_by_samples_whatever_the_batch(tmp_path: Path) -> None:
    model, seen = _mlp(), []
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    for batch, steps in ((4, 3), (8, 2)):
        run = attach(model, optimizer, env=JobEnv(checkpoint=tmp_path / "c.pt", target_steps=steps + len(seen) // 4),
                     batch_size=batch, config=JobConfig(log_every=0))
        while run.running():
            seen += run.batch_indices(10).tolist()
            run.backward(lambda xb: model(xb).sum() * 0, torch.zeros(batch, 8))
            run.step()
        run.close()
    first, second = seen[:10], seen[10:20]
    assert sorted(first) == list(range(10)) and sorted(second) == list(range(10)) and first != second
    assert seen[:10] == attach(_mlp(), torch.optim.SGD(_mlp().parameters(), lr=0.0), env=JobEnv(), batch_size=10,
                                config=JobConfig(log_every=0)).batch_indices(10).tolist()


def test_accumulation_leaves_the_mean_gradient_of_the_batch() -> None:
    x, y = _data()
    grads = []
    for micro in (None, 7):
        model = _mlp()
        run = attach(model, torch.optim.SGD(model.parameters(), lr=0.0), env=JobEnv(), batch_size=40,
                     config=JobConfig(max_micro_batch=micro, log_every=0))
        net = model  # one replica: the model itself
        run.backward(lambda xb, yb, net=net: torch.nn.functional.cross_entropy(net(xb), yb), x[:40], y[:40])
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        assert run.accum_steps == (1 if micro is None else 6) and run.local_batch == 40
        run.close()
    torch.testing.assert_close(grads[0], grads[1])


def _trainer(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "scheduler.executor.train", "--job", "t", "--model", "tiny_cnn",
                             "--batch-size", "8", "--device", "cpu", "--log-every", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO), "COLOCATE_CHECKPOINT": str(tmp_path / "c.pt"),
                                 "COLOCATE_PROGRESS_FILE": str(tmp_path / "p.json"), **(env or {})})


@pytest.mark.slow
def test_the_trainer_stops_on_sigterm_with_a_checkpoint_and_exit_0(tmp_path: Path) -> None:
    proc = _trainer(tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        progress = tmp_path / "p.json"
        if progress.exists() and json.loads(progress.read_text()).get("step", 0) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    record = json.loads((tmp_path / "p.json").read_text())
    assert record["state"] == "stopped" and record["step"] >= 3 and (tmp_path / "c.pt").is_file()


@pytest.mark.slow
def test_the_built_in_trainer_scales_its_lr_as_the_job_file_says_unless_its_flag_does(tmp_path: Path) -> None:
    """The trainer at batch 8, then resumed at 32 (s = 4) under COLOCATE_LR_SCALING=sqrt: --lr 0.01 × 2; the same
    resume with --lr-scaling none keeps 0.01."""
    lrs = []
    for batch, steps, flag in (("8", "3", ()), ("32", "5", ()), ("32", "7", ("--lr-scaling", "none"))):
        proc = _trainer(tmp_path, "--steps", steps, *flag, env={"COLOCATE_LR_SCALING": "sqrt",
                                                                 "COLOCATE_BATCH_SIZE": batch})
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        record = json.loads((tmp_path / "p.json").read_text())
        assert record["step"] == int(steps)
        lrs.append((record["lr"], record["lr_scaling"]))
    assert lrs == [(pytest.approx(0.01), "sqrt"), (pytest.approx(0.02), "sqrt"), (pytest.approx(0.01), "none")]


@pytest.mark.slow
def test_the_trainer_past_its_memory_limit_writes_the_record_and_exits_3(tmp_path: Path) -> None:
    proc = _trainer(tmp_path, "--steps", "5", "--batch-size", "256", env={"COLOCATE_MEMORY_LIMIT_BYTES": str(512 * 2**20 + 2**20),
                                                   "COLOCATE_OOM_FILE": str(tmp_path / "oom.json")})
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out
    record = json.loads((tmp_path / "oom.json").read_text())
    assert record["local_batch"] == 256 and record["reached_bytes"] > 2**20 and "out of memory" in out


@pytest.mark.slow
def test_the_trainer_under_torchrun_trains_data_parallel_and_measures_the_noise(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "scheduler.executor.quiet_torchrun", "--standalone",
                           "--nproc-per-node=2", "-m", "scheduler.executor.train", "--job", "t", "--model", "tiny_cnn",
                           "--batch-size", "16", "--device", "cpu", "--steps", "12", "--log-every", "0"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "COLOCATE_CHECKPOINT": str(tmp_path / "c.pt"),
                               "COLOCATE_PROGRESS_FILE": str(tmp_path / "p.json"), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((tmp_path / "p.json").read_text())
    assert (record["state"], record["step"], record["samples"], record["local_batch"]) == ("finished", 12, 192, 8)
    assert record["lr"] == pytest.approx(0.01) and math.isfinite(record.get("grad_var", 0.0))
    assert torch.load(tmp_path / "c.pt", weights_only=True)["noise"]["updates"] == 2  # steps 0 and 10
