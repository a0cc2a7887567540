"""Where a job stands, and the progress record it writes for the scheduler (``$COLOCATE_PROGRESS_FILE``).

The record is one JSON object, rewritten atomically (a temporary file, then a rename) about twice a second::

    {"job": "a", "step": 120, "steps": 500, "samples": 1920, "target_samples": null, "batch_size": 16,
     "local_batch": 16, "accum_steps": 1, "samples_per_s": 812.4, "iter_time_s": 0.019, "restored_step": 100,
     "loss": 2.1, "elapsed_s": 9.8, "state": "running" | "finished" | "stopped", "lr": 0.02, "lr_scaling": "adascale",
     "grad_sqr": 0.41, "grad_var": 96.0, ...}

``step`` and ``samples`` count from the job's first start (restored ones included); ``samples_per_s`` and
``iter_time_s`` are measured in this process only (``iter_time_s`` over the last progress interval, warm-up
excluded). ``grad_sqr`` (|G|², ≥ 0) and ``grad_var`` (tr Σ of the per-example gradient, ≥ 0; the gradient noise
scale is their ratio) appear once the job has measured them (:mod:`.gradients`); ``lr`` is the learning rate of
the optimizer's first parameter group at the last step, scaled by ``lr_scaling`` (the scaling in use:
:meth:`scheduler.jobkit.JobConfig.scaling`). Whatever the job adds with
:meth:`scheduler.jobkit.Run.report` (a validation loss, say) is written beside them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.files import atomic_write_text

WARMUP_STEPS = 3  # iterations excluded from the measured iteration time (allocator, autotuning)


@dataclass
class Counters:
    """Totals since the job's first start, and this process's own measurements."""

    step: int = 0
    samples: int = 0
    restored_step: int = 0
    loss: float = float("nan")
    start: float = field(default_factory=time.perf_counter)
    window: tuple[float, int] | None = None  # (time, step) at the end of warm-up
    iter_time_s: float | None = None

    def advance(self, samples: int) -> None:
        self.step += 1
        self.samples += samples
        if self.step - self.restored_step == WARMUP_STEPS:
            self.window = (time.perf_counter(), self.step)

    def measure(self) -> None:
        """Mean iteration time since the end of warm-up (this process only)."""
        if self.window is not None and self.step > self.window[1]:
            self.iter_time_s = (time.perf_counter() - self.window[0]) / (self.step - self.window[1])


def _number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None  # NaN is not JSON


def record(job: str, counters: Counters, state: str, *, batch: tuple[int, int, int], targets: tuple[int, int],
           lr: tuple[float | None, str], grad: tuple[float | None, float | None], device: str,
           extra: dict[str, Any]) -> dict[str, Any]:
    """The progress record (see the module docstring); ``batch`` = (global, local, accumulation steps),
    ``targets`` = (steps, samples), ``lr`` = (the learning rate in use, the scaling that set it),
    ``grad`` = (grad_sqr, grad_var)."""
    elapsed = time.perf_counter() - counters.start
    own_steps = counters.step - counters.restored_step
    out: dict[str, Any] = {
        **extra, "job": job, "step": counters.step, "steps": targets[0] or None, "samples": counters.samples,
        "target_samples": targets[1] or None, "batch_size": batch[0], "local_batch": batch[1],
        "accum_steps": batch[2], "samples_per_s": own_steps * batch[0] / elapsed if elapsed > 0 else 0.0,
        "iter_time_s": counters.iter_time_s, "restored_step": counters.restored_step,
        "loss": _number(counters.loss), "elapsed_s": round(elapsed, 3), "state": state, "device": device,
        "pid": os.getpid(), "lr_scaling": lr[1]}
    if lr[0] is not None and lr[0] > 0 and math.isfinite(lr[0]):
        out["lr"] = lr[0]
    if grad[0] is not None and grad[1] is not None:  # only once both have a value
        out["grad_sqr"], out["grad_var"] = grad
    return out


def write(path: Path | None, payload: dict[str, Any]) -> None:
    """Replace ``path`` atomically so readers never see half a file (a failed write is retried next time)."""
    if path is None:
        return
    with contextlib.suppress(OSError):
        atomic_write_text(path, json.dumps(payload), durable=False)  # rewritten twice a second: no fsync
