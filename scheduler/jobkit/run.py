"""One run of a job: the contract of ``colocate serve`` kept for a PyTorch training loop.

::

    with job.attach(model, optimizer, lr_scheduler=sched) as run:   # restores the checkpoint, if any
        while run.running():                                       # until the target or a stop signal
            x, y = data[run.batch_indices(len(data))]              # this replica's share of the step
            run.backward(lambda xb, yb: loss_fn(run.model(xb), yb), x, y)
            run.step()                                             # LR scaled, optimizer, progress, checkpoint

:meth:`Run.backward` splits the replica's batch into micro-batches (gradient accumulation, under ``no_sync``
with DDP but for the last one), measures the gradient statistics on the way (:mod:`.gradients`) and leaves the
mean gradient of the global batch; :meth:`Run.step` applies the learning rate scaled to the batch size, steps
the optimizer (and the LR scheduler), counts steps and samples, writes progress, checkpoints now and then.
Leaving the ``with`` block writes the final checkpoint and progress (``finished`` or ``stopped``); an allocation
past the memory limit there writes the out-of-memory record, checkpoints and exits with status 3.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.lr_scaling import DEFAULT_LR_SCALING, check_lr_scaling
from scheduler.jobkit import checkpoint, progress
from scheduler.jobkit.environment import JobEnv, read_env
from scheduler.jobkit.gradients import GradientNoise, lr_factor
from scheduler.jobkit.memory import OOM_EXIT, MemoryCap, is_out_of_memory, write_oom_record


@dataclass(frozen=True)
class JobConfig:
    """How the library trains a job (the environment says where and with what batch: :class:`JobEnv`)."""

    # adascale | linear | sqrt | none: the learning rate at another batch size. None: the job file's
    # (COLOCATE_LR_SCALING), else adascale; a value set here wins over the job file
    lr_scaling: str | None = None
    base_batch: int | None = None  # the batch the learning rate is tuned for; default: the first run's batch
    max_micro_batch: int | None = None  # larger local batches are accumulated in micro-batches of at most this
    stats_every: int = 10  # measure the gradient statistics at most every this many steps (0: never)
    stats_budget: float = 0.01  # and no more often than keeps their cost within this share of the time (1: any)
    stats_smoothing: float = 0.9  # weight of the past in their moving averages
    checkpoint_every_s: float = 30.0  # a crash loses at most this much training
    progress_every_s: float = 0.5
    log_every: int = 50  # a log line every this many steps (0: none)

    def scaling(self, env: JobEnv) -> str:
        """The scaling a run trains with: this config's, else the job file's (``env``), else the default."""
        return self.lr_scaling or env.lr_scaling or DEFAULT_LR_SCALING

    def __post_init__(self) -> None:
        from common.errors import InputError

        if self.lr_scaling is not None:
            check_lr_scaling(self.lr_scaling, source="JobConfig", field="lr_scaling")
        for name in ("base_batch", "max_micro_batch"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise InputError(f"{value!r} is not a positive integer", source="JobConfig", field=name,
                                 valid="an integer ≥ 1, or None")
        if not 0 < self.stats_budget <= 1:
            raise InputError(f"{self.stats_budget!r} is not in (0, 1]", source="JobConfig", field="stats_budget",
                             valid="a share of the training time in (0, 1]")
        if not 0 <= self.stats_smoothing < 1:
            raise InputError(f"{self.stats_smoothing!r} is not in [0, 1)", source="JobConfig",
                             field="stats_smoothing", valid="a number in [0, 1)")


class Run:
    """A job attached to its environment: see the module docstring. Use :func:`attach` to make one."""

    def __init__(self, model: Any, optimizer: Any, *, lr_scheduler: Any = None, config: JobConfig | None = None,
                 env: JobEnv | None = None, batch_size: int | None = None, target_steps: int | None = None,
                 target_samples: int | None = None, device_name: str | None = None) -> None:
        import torch

        self.config = config or JobConfig()
        self.env = env or read_env()
        self.optimizer, self.lr_scheduler = optimizer, lr_scheduler
        self.batch_size = self.env.batch_size or batch_size or 0  # the scheduler's batch, else the default
        if self.batch_size < 1:
            from common.errors import InputError

            raise InputError("no batch size: pass batch_size= or run under colocate (COLOCATE_BATCH_SIZE)",
                             source="environment", field="COLOCATE_BATCH_SIZE", valid="an integer ≥ 1")
        self.world_size, self.rank = self.env.world_size, self.env.rank
        self.local_batch = max(self.batch_size // self.world_size, 1)
        limit = self.config.max_micro_batch
        self.accum_steps = math.ceil(self.local_batch / limit) if limit else 1
        self.target_steps = self.env.target_steps if target_steps is None else target_steps
        self.target_samples = self.env.target_samples if target_samples is None else target_samples
        self.device = next(iter(model.parameters())).device
        self.device_name = device_name or self.device.type
        self.counters = progress.Counters()
        self.noise = GradientNoise(smoothing=self.config.stats_smoothing)
        self.extra: dict[str, Any] = {}  # the job's own state, saved in the checkpoint
        self.metrics: dict[str, Any] = {}  # the job's own progress fields (report)
        self.base_batch = self.config.base_batch or self.batch_size
        self.lr_scaling = self.config.scaling(self.env)
        self.lr: float | None = None
        self._stop = {"requested": False, "agreed": False}
        self._finished = False  # the job's own target (a validation loss, say) is reached: finish()
        self._handlers = {s: signal.signal(s, self._request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
        self._restore(model)
        self._owns_group = False
        self.model = self._distribute(model, torch)
        self.cap = MemoryCap(self.env.memory_limit_bytes, self.device)
        self._pending: tuple[Any, int] | None = None  # (|g_small|² tensor, b_small) of this step
        self._loss: Any = None
        self._last = {"progress": self.counters.start, "checkpoint": self.counters.start}
        self._perms: dict[tuple[int, int, int], Any] = {}
        self._measured = False
        # the step that last measured (-1: none yet in this process), when the last step ended, the moving
        # averages of a plain and of a measuring step's wall time
        self._timing: dict[str, float] = {"last": -1, "since": time.perf_counter(), "plain": 0.0, "measured": 0.0}
        self.closed = False
        if self.reporter:
            self._write("running")

    # -- where the run is ------------------------------------------------------------------------------------
    @property
    def reporter(self) -> bool:
        """Rank 0 writes progress and checkpoints."""
        return self.rank == 0

    @property
    def step_count(self) -> int:
        return self.counters.step

    @property
    def samples(self) -> int:
        return self.counters.samples

    @property
    def micro_batch(self) -> int:
        return math.ceil(self.local_batch / self.accum_steps)

    def done(self) -> bool:
        """Whether the target (steps or samples since the first start, or the job's own: :meth:`finish`) is
        reached."""
        return bool(self._finished or (self.target_steps and self.counters.step >= self.target_steps)
                    or (self.target_samples and self.counters.samples >= self.target_samples))

    def finish(self) -> None:
        """The job reached a target of its own (a validation loss, say): done from now on, so the loop ends and
        the run closes ``"finished"`` — serve counts the job completed however far it is from its sample target."""
        self._finished = True

    def stopped(self) -> bool:
        """Whether a stop (SIGTERM, SIGINT) was agreed by every replica, at the last step."""
        return self._stop["agreed"] or (self.world_size == 1 and self._stop["requested"])

    def running(self) -> bool:
        """Whether to train another step: neither the target reached nor a stop agreed."""
        return not self.done() and not self.stopped()

    def _request_stop(self, signum: int, frame: Any) -> None:
        self._stop["requested"] = True

    # -- start -------------------------------------------------------------------------------------------------
    def _restore(self, model: Any) -> None:
        path = self.env.checkpoint
        state = checkpoint.load(path, model, self.optimizer, self.lr_scheduler) if path is not None else None
        if state is None:
            return
        self.counters.step = self.counters.restored_step = int(state["step"])
        self.counters.samples = int(state["samples"])
        if state.get("noise"):
            self.noise.load_state_dict(state["noise"])
        self.base_batch = self.config.base_batch or int(state.get("base_batch") or self.batch_size)
        self.extra = dict(state.get("extra") or {})
        if self.reporter:
            print(f"[{self.env.job}] restored step {self.counters.step} ({self.counters.samples} samples) from "
                  f"{path} at batch {self.batch_size}", flush=True)

    def _distribute(self, model: Any, torch: Any) -> Any:
        if self.world_size == 1 or isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return model
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
            self._owns_group = True
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)

    # -- one step ----------------------------------------------------------------------------------------------
    def batch_indices(self, num_examples: int, seed: int = 0) -> Any:
        """This replica's example indices for the next step: the global batch is the next ``batch_size``
        positions of a stream of epochs (each a permutation of ``range(num_examples)`` seeded by ``seed`` and
        the epoch), counted in samples — so a run resumed at another batch size or replica count reads on
        exactly where the last one stopped."""
        import torch

        start = self.counters.samples + self.rank * self.local_batch
        positions = torch.arange(start, start + self.local_batch)
        epochs = positions // num_examples
        out = torch.empty_like(positions)
        for epoch in epochs.unique().tolist():
            key = (num_examples, seed, epoch)
            if key not in self._perms:
                self._perms = {k: v for k, v in self._perms.items() if k[2] >= epoch - 1}  # two epochs at most
                self._perms[key] = torch.randperm(num_examples,
                                                  generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
            mask = epochs == epoch
            out[mask] = self._perms[key][positions[mask] % num_examples]
        return out

    def _params(self) -> list[Any]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _measuring(self) -> bool:
        """Whether this step measures the gradient statistics: the first step does; then at least
        ``stats_every`` steps apart, and as far apart as keeps their extra time (a split batch costs a small
        model nearly a second step) within ``stats_budget`` of the training time, timed as the run goes (on one
        replica; data-parallel replicas measure every ``stats_every`` steps, so that they all measure together)."""
        every = self.config.stats_every
        if not every or self.local_batch < 2:
            return False
        gap = self.counters.step - self._timing["last"]
        if self._timing["last"] < 0:
            return True
        plain, measured = self._timing["plain"], self._timing["measured"]
        # replicas time differently: a cadence all of them agree on; a budget of 1 is no budget (reproducible)
        if plain <= 0 or self.world_size > 1 or self.config.stats_budget >= 1:
            return gap >= every
        return gap >= max(every, (measured - plain) / (self.config.stats_budget * plain))

    def _time_step(self, measured: bool) -> None:
        """Moving averages of a plain and a measuring step's wall time (the cadence of _measuring)."""
        now = time.perf_counter()
        spent, self._timing["since"] = now - self._timing["since"], now
        key = "measured" if measured else "plain"
        previous = self._timing[key]
        self._timing[key] = spent if previous <= 0 else 0.8 * previous + 0.2 * spent

    def backward(self, loss_fn: Callable[..., Any], *batch: Any) -> Any:
        """Forward and backward over this replica's ``batch`` (tensors split along their first dimension) in
        micro-batches: ``loss_fn(*micro_batch)`` returns the mean loss of a micro-batch. Leaves the mean gradient
        of the global batch in the parameters' ``.grad``; returns the mean loss (a detached tensor)."""
        measuring = self._measuring()
        self._measured = measuring
        if measuring:
            self._timing["last"] = self.counters.step
        chunks = max(self.accum_steps, 2 if measuring else 1)
        pieces = [x.tensor_split(chunks) if chunks > 1 and hasattr(x, "tensor_split") else [x] * chunks
                  for x in batch]
        size = batch[0].shape[0]
        self.optimizer.zero_grad(set_to_none=True)
        total = None
        with self.cap.first_step() if not self.cap.checked else contextlib.nullcontext():
            for i in range(chunks):
                chunk = [piece[i] for piece in pieces]
                n = chunk[0].shape[0]
                sync = i == chunks - 1 or not hasattr(self.model, "no_sync")
                with contextlib.nullcontext() if sync else self.model.no_sync():
                    loss = loss_fn(*chunk)
                    (loss * (n / size) if chunks > 1 else loss).backward()
                total = loss.detach() if chunks == 1 else loss.detach() * (n / size) + (0 if total is None else total)
                if i == 0 and measuring and chunks > 1:  # the small gradient: one micro-batch, this replica
                    self._pending = (_sqnorm(self._params()) * (size / n) ** 2, n)
        self._loss = total
        return total

    def step(self) -> None:
        """Scale the learning rate, step the optimizer (and LR scheduler); count, report, checkpoint."""
        small = self._agree()
        if small is not None:
            self.noise.update(small[0], small[1], float(_sqnorm(self._params())), self.local_batch * self.world_size)
        factor = lr_factor(self.lr_scaling, self.batch_size, self.base_batch, self.noise)
        groups = self.optimizer.param_groups
        unscaled = [g["lr"] for g in groups]
        if factor != 1.0:
            for g, lr in zip(groups, unscaled):
                g["lr"] = lr * factor
        self.lr = float(groups[0]["lr"])
        self.optimizer.step()
        if factor != 1.0:
            for g, lr in zip(groups, unscaled):  # the LR scheduler sees (and sets) the unscaled rate
                g["lr"] = lr
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        self.cap.check(self.model, self.optimizer)  # on the CPU: the first step's memory against the limit
        self.counters.advance(self.local_batch * self.world_size)
        if self.counters.step - self.counters.restored_step > 1:  # the first step (warm-up) times nothing
            self._time_step(self._measured)
        else:
            self._timing["since"] = time.perf_counter()
        self._after_step()

    def _agree(self) -> tuple[float, int] | None:
        """All-reduce this step's stop flag and small-gradient norm across replicas (one collective per step)."""
        pending, self._pending = self._pending, None
        if self.world_size == 1:
            return None if pending is None else (float(pending[0]), pending[1])
        import torch
        import torch.distributed as dist

        flags = torch.zeros(3, device=self.device)
        flags[0] = 1.0 if self._stop["requested"] else 0.0
        if pending is not None:
            flags[1], flags[2] = pending[0], 1.0
        dist.all_reduce(flags)
        self._stop["agreed"] = bool(flags[0].item() > 0)
        if pending is None or flags[2].item() < self.world_size:
            return None
        return float(flags[1].item()) / self.world_size, pending[1]

    def _after_step(self) -> None:
        now = time.perf_counter()
        if self.reporter and now - self._last["progress"] >= self.config.progress_every_s:
            self.counters.measure()
            self._write("running")
            self._last["progress"] = now
        if self.reporter and self.env.checkpoint is not None and \
                now - self._last["checkpoint"] >= self.config.checkpoint_every_s:
            self.save()
            self._last["checkpoint"] = now
        every = self.config.log_every
        if self.reporter and every and self.counters.step % every == 0:
            print(f"[{self.env.job}] step {self.counters.step} loss {self._loss_value():.4f} lr {self.lr:.4g}",
                  flush=True)

    def _loss_value(self) -> float:
        return float(self._loss) if self._loss is not None else float("nan")

    # -- records -----------------------------------------------------------------------------------------------
    def report(self, **fields: Any) -> None:
        """Add the job's own fields (numbers, strings) to its progress record from the next write on."""
        self.metrics.update(fields)

    def _write(self, state: str) -> None:
        self.counters.loss = self._loss_value()
        progress.write(self.env.progress_file, progress.record(
            self.env.job, self.counters, state, batch=(self.batch_size, self.local_batch, self.accum_steps),
            targets=(self.target_steps, self.target_samples), lr=(self.lr, self.lr_scaling),
            grad=(self.noise.grad_sqr, self.noise.grad_var), device=self.device_name, extra=self.metrics))

    def save(self) -> None:
        """Write the checkpoint now (rank 0; nothing without ``COLOCATE_CHECKPOINT``)."""
        if not self.reporter or self.env.checkpoint is None:
            return
        checkpoint.save(self.env.checkpoint, self.model, self.optimizer, self.lr_scheduler, {
            "step": self.counters.step, "samples": self.counters.samples, "noise": self.noise.state_dict(),
            "base_batch": self.base_batch}, self.extra)

    def close(self) -> str:
        """The end of the run: the final checkpoint and progress; "finished" or "stopped"."""
        if self.closed:
            return "finished" if self.done() else "stopped"
        self.closed = True
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
        state = "finished" if self.done() else "stopped"
        if self.reporter:
            self.counters.measure()
            self.save()
            self._write(state)
            print(f"[{self.env.job}] {state} after {self.counters.step} steps", flush=True)
        self._release()
        return state

    def _release(self) -> None:
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler)
        if self._owns_group:
            import torch.distributed as dist

            dist.destroy_process_group()
            self._owns_group = False

    def out_of_memory(self, err: BaseException) -> int:
        """Record what the job reached (``COLOCATE_OOM_FILE``), keep what it trained (a checkpoint, best effort:
        the failed step never reached the optimizer); returns the exit status, :data:`OOM_EXIT`."""
        self.closed = True
        write_oom_record(self.env.oom_file, self.cap, err, self.local_batch)
        limit = f" (limit {self.cap.limit / 2**30:.2f} GiB)" if self.cap.limit else " (no limit: alone on its GPUs)"
        print(f"[{self.env.job}] out of memory at step {self.counters.step}{limit}: "
              f"{str(err).splitlines()[0][:200] if str(err) else type(err).__name__}", flush=True)
        with contextlib.suppress(Exception):
            if self.device.type == "cuda":
                import torch

                torch.cuda.empty_cache()
            self.save()
        with contextlib.suppress(Exception):
            self._release()
        return OOM_EXIT

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: Any, err: BaseException | None, tb: Any) -> None:
        if err is None:
            self.close()
        elif is_out_of_memory(err):
            sys.exit(self.out_of_memory(err))
        else:
            self._release()


def _sqnorm(params: list[Any]) -> Any:
    """Σ |grad|² over ``params`` as a 0-d tensor (no device synchronisation)."""
    import torch

    grads = [p.grad.detach().float().pow(2).sum() for p in params if p.grad is not None]
    return torch.stack(grads).sum() if grads else torch.zeros(())


def attach(model: Any, optimizer: Any, **kwargs: Any) -> Run:
    """A :class:`Run` of ``model`` and ``optimizer`` in this process's environment (see :class:`Run`)."""
    return Run(model, optimizer, **kwargs)
