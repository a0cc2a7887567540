"""A PyTorch Lightning callback that keeps the job contract (needs ``lightning``: the ``integrations`` extra).

::

    from colocate.job import LightningCallback

    callback = LightningCallback()
    trainer = L.Trainer(callbacks=[callback], accumulate_grad_batches=callback.tracker.accum_steps, ...)
    loader = DataLoader(data, batch_size=callback.tracker.micro_batch, ...)
    trainer.fit(module, loader, ckpt_path=callback.ckpt_path)

It resumes from ``$COLOCATE_CHECKPOINT`` (Lightning's own checkpoint, with the job's samples and gradient
statistics in it), stops at the target (steps or samples since the first start), writes progress, scales the
learning rate to the batch, and measures the gradient noise when there are two batch sizes to compare (gradient
accumulation ≥ 2: the first micro-batch against the step's batch; ``config.max_micro_batch`` sets it). On SIGTERM
Lightning raises ``SIGTERMException`` (a ``SystemExit`` with status 0) after the current batch: the callback saves
the checkpoint and writes "stopped" first. An out-of-memory failure writes the out-of-memory record.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from scheduler.jobkit.gradients import squared_norm
from scheduler.jobkit.memory import MemoryCap
from scheduler.jobkit.tracker import Tracker

KEY = "colocate"  # the job's counters inside Lightning's checkpoint


class ColocateCallback(pl.Callback):
    """See the module docstring; ``config``: a :class:`scheduler.jobkit.JobConfig`."""

    def __init__(self, config: Any = None, env: Any = None, batch_size: int | None = None) -> None:
        self.tracker = Tracker(config, env, batch_size)
        self._micro = 0  # micro-batches since the last optimizer step

    @property
    def ckpt_path(self) -> str | None:
        """What to pass to ``Trainer.fit(ckpt_path=...)``: the job's checkpoint when there is one."""
        path = self.tracker.env.checkpoint
        return str(path) if path is not None and path.is_file() else None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning catches SIGTERM itself (trainer.received_sigterm, then SIGTERMException): leave its handler
        self.tracker.cap = MemoryCap(self.tracker.env.memory_limit_bytes, pl_module.device)
        if trainer.is_global_zero:
            self.tracker.write("running")

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self.tracker.done():
            trainer.should_stop = True

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._micro += 1
        accum = trainer.accumulate_grad_batches
        if self._micro == 1 and accum >= 2 and self.tracker.measuring():
            # the loss is divided by accum: the first micro-batch's own gradient is accum times what .grad holds
            sqr = squared_norm(pl_module.parameters()) * accum ** 2
            self.tracker.small_gradient(sqr, self.tracker.micro_batch)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self._micro = 0
        small = self.tracker.pending_small
        big = squared_norm(pl_module.parameters()) if small is not None else None
        if small is not None and trainer.world_size > 1:  # one gain on every replica: average the small norms
            import torch

            mean = trainer.strategy.reduce(torch.tensor(small[0], device=pl_module.device), reduce_op="mean")
            self.tracker.small_gradient(float(mean), small[1])
        self.tracker.before_optimizer(optimizer, big, self.tracker.local_batch * trainer.world_size)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._micro != 0:  # a micro-batch of gradient accumulation, not a step
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        for optimizer in trainer.optimizers:
            self.tracker.after_optimizer(optimizer, float(loss) if loss is not None else None)
        if self.tracker.done():
            trainer.should_stop = True

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        checkpoint[KEY] = self.tracker.state_dict()

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        if KEY in checkpoint:
            self.tracker.load_state_dict(checkpoint[KEY])

    def _save(self, trainer: pl.Trainer) -> None:
        if self.tracker.env.checkpoint is not None:
            trainer.save_checkpoint(self.tracker.env.checkpoint)  # every rank calls it: a collective under DDP

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save(trainer)
        self.tracker.finish()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if isinstance(exception, SIGTERMException):
            self._save(trainer)
            self.tracker.stop_requested = True
            self.tracker.finish()
        elif trainer.is_global_zero and self.tracker.out_of_memory(exception):
            self.tracker.write("stopped")
