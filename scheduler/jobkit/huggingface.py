"""A Hugging Face ``Trainer`` callback that keeps the job contract (needs ``transformers``: the ``integrations``
extra).

::

    from colocate.job import HuggingFaceCallback

    callback = HuggingFaceCallback()
    args = TrainingArguments(output_dir=callback.output_dir, per_device_train_batch_size=callback.tracker.micro_batch,
                             gradient_accumulation_steps=callback.tracker.accum_steps, max_grad_norm=0, ...)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train(
        resume_from_checkpoint=callback.resume_from)

The Trainer's checkpoints are directories: they go to ``output_dir`` (``$COLOCATE_CHECKPOINT`` with ``.hf``
appended), each with the job's counters beside it (``colocate.json``), and the run resumes from the newest. The
callback stops at the target, saves and stops on SIGTERM (at the end of the current step; the script then exits
0), writes progress, scales the learning rate to the batch and measures the gradient noise with gradient
accumulation ≥ 2 (the first micro-batch against the step). Gradient clipping (``max_grad_norm`` > 0) changes
the step's gradient before the callback sees it: set ``max_grad_norm=0`` for true statistics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from scheduler.jobkit.gradients import squared_norm
from scheduler.jobkit.tracker import Tracker

STATE_FILE = "colocate.json"


class HuggingFaceCallback(TrainerCallback):
    """See the module docstring; ``config``: a :class:`scheduler.jobkit.JobConfig`."""

    def __init__(self, config: Any = None, env: Any = None, batch_size: int | None = None) -> None:
        self.tracker = Tracker(config, env, batch_size)
        self._first_micro = True

    @property
    def output_dir(self) -> str:
        """Where the Trainer's checkpoints go: beside the job's checkpoint file (``./hf-output`` without one)."""
        path = self.tracker.env.checkpoint
        return str(path.with_name(path.name + ".hf")) if path is not None else "hf-output"

    @property
    def resume_from(self) -> str | None:
        """The newest checkpoint in :attr:`output_dir`, for ``Trainer.train(resume_from_checkpoint=...)``."""
        directory = Path(self.output_dir)
        last = get_last_checkpoint(str(directory)) if directory.is_dir() else None
        if last is not None and (Path(last) / STATE_FILE).is_file():
            self.tracker.load_state_dict(json.loads((Path(last) / STATE_FILE).read_text()))
        return last

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.tracker.start(next(model.parameters()).device)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._first_micro = True

    def on_substep_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        accum = args.gradient_accumulation_steps
        if self._first_micro and accum >= 2 and self.tracker.measuring():
            # the loss is divided over the step's micro-batches: the first one's own gradient is accum times it
            self.tracker.small_gradient(squared_norm(model.parameters()) * accum ** 2, self.tracker.micro_batch)
        self._first_micro = False

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                              **kwargs: Any) -> None:
        small = self.tracker.pending_small
        big = squared_norm(model.parameters()) if small is not None else None
        if small is not None and args.world_size > 1:  # one gain on every replica: average the small norms
            import torch
            import torch.distributed as dist

            mean = torch.tensor(small[0], device=next(model.parameters()).device)
            dist.all_reduce(mean)
            self.tracker.small_gradient(float(mean) / args.world_size, small[1])
        self.tracker.before_optimizer(optimizer, big, self.tracker.local_batch * args.world_size)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, optimizer: Any = None, **kwargs: Any) -> None:
        self.tracker.after_optimizer(optimizer)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.tracker.done() or self.tracker.stop_requested:
            control.should_training_stop = True
            control.should_save = True

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs and isinstance(logs.get("loss"), (int, float)):
            self.tracker.loss = float(logs["loss"])

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            directory = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if directory.is_dir():
                (directory / STATE_FILE).write_text(json.dumps(self.tracker.state_dict()))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.tracker.finish()
