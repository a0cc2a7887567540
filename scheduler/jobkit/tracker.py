"""The contract for a framework that owns the training loop (the Lightning and Hugging Face callbacks).

A framework steps the optimizer itself, so the callbacks cannot use :class:`scheduler.jobkit.Run`; they hand a
:class:`Tracker` what they see at its hooks — the gradient after the first micro-batch and before the optimizer
step, each optimizer step — and it keeps the rest as :class:`Run` does: targets, samples, the gradient
statistics and the learning rate scaled to the batch, progress, the stop signal, the memory limit.
"""

from __future__ import annotations

import math
import signal
import time
from typing import Any

from scheduler.jobkit import progress
from scheduler.jobkit.environment import JobEnv, read_env
from scheduler.jobkit.gradients import GradientNoise, lr_factor
from scheduler.jobkit.memory import MemoryCap, is_out_of_memory, write_oom_record


class Tracker:
    """One run's counters and records for a framework's callback (``batch_size``: the global batch)."""

    def __init__(self, config: Any, env: JobEnv | None, batch_size: int | None) -> None:
        from scheduler.jobkit.run import JobConfig

        self.config = config or JobConfig()
        self.env = env or read_env()
        self.batch_size = self.env.batch_size or batch_size or 0  # the scheduler's batch, else the default
        self.counters = progress.Counters()
        self.noise = GradientNoise(smoothing=self.config.stats_smoothing)
        self.base_batch = self.config.base_batch or self.batch_size
        self.lr_scaling = self.config.scaling(self.env)
        self.lr: float | None = None
        self.loss = float("nan")
        self.stop_requested = False
        self._small: tuple[float, int] | None = None
        self._unscaled: list[float] | None = None
        self._last = time.perf_counter()
        self._handlers: dict[int, Any] = {}
        self.cap: MemoryCap | None = None

    @property
    def local_batch(self) -> int:
        return max(self.batch_size // self.env.world_size, 1)

    @property
    def accum_steps(self) -> int:
        limit = self.config.max_micro_batch
        return math.ceil(self.local_batch / limit) if limit else 1

    @property
    def micro_batch(self) -> int:
        return math.ceil(self.local_batch / self.accum_steps)

    def start(self, device: Any) -> None:
        """Catch SIGTERM/SIGINT (a stop at the next step) and hold the memory limit on ``device``."""
        def request(signum: int, frame: Any) -> None:
            self.stop_requested = True

        self._handlers = {s: signal.signal(s, request) for s in (signal.SIGTERM, signal.SIGINT)}
        self.cap = MemoryCap(self.env.memory_limit_bytes, device)
        self.write("running")

    def release(self) -> None:
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler)
        self._handlers = {}

    def done(self) -> bool:
        return bool((self.env.target_steps and self.counters.step >= self.env.target_steps)
                    or (self.env.target_samples and self.counters.samples >= self.env.target_samples))

    def measuring(self) -> bool:
        every = self.config.stats_every
        return bool(every) and self.counters.step % every == 0

    @property
    def pending_small(self) -> tuple[float, int] | None:
        """This step's small gradient (|g|², examples) when one was measured."""
        return self._small

    def small_gradient(self, sqr: float, batch: int) -> None:
        """|g|² of the first micro-batch of this step (one replica, before any all-reduce), of ``batch`` examples."""
        self._small = (sqr, batch)

    def before_optimizer(self, optimizer: Any, big_sqr: float | None, big_batch: int) -> None:
        """Fold in this step's statistics (``big_sqr``: |g|² of the global batch) and scale the learning rate."""
        if self._small is not None and big_sqr is not None:
            self.noise.update(self._small[0], self._small[1], big_sqr, big_batch)
        self._small = None
        factor = lr_factor(self.lr_scaling, self.batch_size, self.base_batch, self.noise)
        self._unscaled = [g["lr"] for g in optimizer.param_groups]
        for g, lr in zip(optimizer.param_groups, self._unscaled):
            g["lr"] = lr * factor
        self.lr = float(optimizer.param_groups[0]["lr"])

    def after_optimizer(self, optimizer: Any, loss: float | None = None) -> None:
        """The step is done: the unscaled learning rate back (the LR scheduler's), count, report now and then."""
        if self._unscaled is not None:
            for g, lr in zip(optimizer.param_groups, self._unscaled):
                g["lr"] = lr
            self._unscaled = None
        if loss is not None:
            self.loss = loss
        self.counters.advance(self.local_batch * self.env.world_size)
        now = time.perf_counter()
        if now - self._last >= self.config.progress_every_s:
            self.counters.measure()
            self.write("running")
            self._last = now

    def write(self, state: str) -> None:
        if self.env.rank != 0:
            return
        self.counters.loss = self.loss
        progress.write(self.env.progress_file, progress.record(
            self.env.job, self.counters, state, batch=(self.batch_size, self.local_batch, self.accum_steps),
            targets=(self.env.target_steps, self.env.target_samples), lr=(self.lr, self.lr_scaling),
            grad=(self.noise.grad_sqr, self.noise.grad_var), device="", extra={}))

    def finish(self) -> str:
        self.counters.measure()
        state = "finished" if self.done() or not self.stop_requested else "stopped"
        self.write(state)
        self.release()
        return state

    def out_of_memory(self, err: BaseException) -> bool:
        """Write the out-of-memory record when ``err`` is one; whether it was."""
        if not is_out_of_memory(err) or self.cap is None:
            return False
        write_oom_record(self.env.oom_file, self.cap, err, self.local_batch)
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.counters.step, "samples": self.counters.samples, "noise": self.noise.state_dict(),
                "base_batch": self.base_batch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counters.step = self.counters.restored_step = int(state["step"])
        self.counters.samples = int(state["samples"])
        self.noise.load_state_dict(state["noise"])
        self.base_batch = self.config.base_batch or int(state["base_batch"])
