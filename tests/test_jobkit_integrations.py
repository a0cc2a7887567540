"""The job library's framework callbacks on the CPU: Lightning and the Hugging Face Trainer, tiny models built
from a config (nothing downloaded), each stopped at its target and resumed at another batch size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from scheduler.jobkit import JobConfig, JobEnv

pytestmark = pytest.mark.slow


def _env(tmp_path: Path, name: str, steps: int) -> JobEnv:
    return JobEnv(job="t", checkpoint=tmp_path / name, progress_file=tmp_path / "p.json", target_steps=steps)


def _lightning_run(tmp_path: Path, batch: int, steps: int) -> dict[str, Any]:
    lightning = pytest.importorskip("lightning.pytorch")
    from colocate.job import LightningCallback

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=gen)
    data = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())
    callback = LightningCallback(JobConfig(max_micro_batch=4, stats_every=1), env=_env(tmp_path, "c.ckpt", steps),
                                 batch_size=batch)
    loader = torch.utils.data.DataLoader(data, batch_size=callback.tracker.micro_batch, shuffle=True)
    trainer = lightning.Trainer(accelerator="cpu", devices=1, max_epochs=100, callbacks=[callback],
                                accumulate_grad_batches=callback.tracker.accum_steps, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                default_root_dir=str(tmp_path))
    torch.manual_seed(0)
    trainer.fit(Module(), loader, ckpt_path=callback.ckpt_path)
    return json.loads((tmp_path / "p.json").read_text())


def test_lightning_stops_at_its_target_and_resumes_at_another_batch(tmp_path: Path) -> None:
    first = _lightning_run(tmp_path, 8, 5)
    assert (first["state"], first["step"], first["samples"], first["accum_steps"]) == ("finished", 5, 40, 2)
    assert first["grad_sqr"] > 0 and first["grad_var"] >= 0 and first["lr"] == pytest.approx(0.05)
    second = _lightning_run(tmp_path, 16, 8)  # 4 micro-batches of 4 now; the samples go on from 40
    assert (second["state"], second["restored_step"], second["step"], second["samples"]) == ("finished", 5, 8, 88)
    assert 0.05 <= second["lr"] <= 0.1  # AdaScale's gain at twice the base batch: in [1, 2]


def _hf_run(tmp_path: Path, batch: int, steps: int) -> dict[str, Any]:
    transformers = pytest.importorskip("transformers")
    from colocate.job import HuggingFaceCallback

    callback = HuggingFaceCallback(JobConfig(max_micro_batch=2, stats_every=1), env=_env(tmp_path, "c", steps),
                                   batch_size=batch)
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    tokens = torch.randint(0, 64, (64, 16), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": t, "labels": t} for t in tokens]
    args = transformers.TrainingArguments(
        output_dir=callback.output_dir, per_device_train_batch_size=callback.tracker.micro_batch,
        gradient_accumulation_steps=callback.tracker.accum_steps, max_grad_norm=0.0, learning_rate=1e-3,
        lr_scheduler_type="constant", num_train_epochs=50, save_strategy="no", report_to=[], use_cpu=True,
        disable_tqdm=True, logging_steps=1)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train(resume_from_checkpoint=callback.resume_from)
    return json.loads((tmp_path / "p.json").read_text())


def test_hugging_face_stops_at_its_target_and_resumes_at_another_batch(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    first = _hf_run(tmp_path, 4, 3)
    assert (first["state"], first["step"], first["samples"], first["accum_steps"]) == ("finished", 3, 12, 2)
    assert first["grad_sqr"] > 0 and first["grad_var"] >= 0 and first["lr"] == pytest.approx(1e-3)
    assert list((tmp_path / "c.hf").glob("checkpoint-3/colocate.json"))
    second = _hf_run(tmp_path, 8, 5)
    assert (second["state"], second["restored_step"], second["step"], second["samples"]) == ("finished", 3, 5, 28)
    assert 1e-3 <= second["lr"] <= 2e-3


def test_a_job_resized_twice_reaches_the_unresized_validation_loss_at_equal_samples(tmp_path: Path) -> None:
    """scripts/bench_jobkit.py resize, one seed: batch 32 -> 128 -> 64 with AdaScale against batch 32 throughout.
    The tolerance is two standard deviations of five unresized seeds (results/BENCHMARKS.md, "Job library"):
    validation loss 0.02, accuracy 0.015."""
    pytest.importorskip("sklearn")
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_jobkit", Path(__file__).resolve().parents[1] / "scripts" /
                                                  "bench_jobkit.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    torch.set_num_threads(1)
    plain = bench.train_digits(0, 24000, [(0.0, 32)], "adascale", tmp_path)
    resized = bench.train_digits(0, 24000, [(0.0, 32), (1 / 3, 128), (2 / 3, 64)], "adascale", tmp_path)
    assert abs(resized[0] - plain[0]) <= 0.02 and abs(resized[1] - plain[1]) <= 0.015, (plain, resized)
