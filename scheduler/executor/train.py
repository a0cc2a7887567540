"""The training process of a built-in job: ``python -m scheduler.executor.train --model resnet18 ...``.

Trains a model of the zoo on a fixed synthetic batch (as the profiler does: the point is the GPU load, not
the data) until ``--steps`` iterations (or ``--target-samples`` samples) are done, or until SIGTERM/SIGINT
when neither is set. Under ``torchrun`` (``WORLD_SIZE`` > 1) it trains data-parallel with DDP, the global
batch split across ranks; every rank agrees on the step to stop at (an all-reduce of the stop flag), so a
stop signal never leaves a rank waiting in a collective.

Checkpoint-restore (``--checkpoint PATH`` or ``$COLOCATE_CHECKPOINT``): at start, a checkpoint there is
loaded — model, optimizer, step and samples — whatever the batch size or GPU count it was written with (the
model is saved without its DDP wrapper); on a stop signal, at the end and every ``--checkpoint-every-s``
seconds it is written again atomically, so a job that is moved or resized loses nothing and a job that
crashes loses at most that interval.

Progress is a JSON object rewritten atomically (``--progress-file``, rank 0 only) about twice a second::

    {"job": "a", "step": 120, "steps": 500, "samples": 1920, "target_samples": null, "samples_per_s": 812.4,
     "iter_time_s": 0.019, "restored_step": 100, "loss": 2.1, "elapsed_s": 9.8,
     "state": "running" | "finished" | "stopped"}

``step`` and ``samples`` count from the job's first start (restored ones included); ``samples_per_s`` and
``iter_time_s`` are measured in this process only (``iter_time_s`` over the last progress interval, warm-up
excluded). A line per ``--log-every`` steps goes to stdout (the job's log). A stop signal ends the current
step, writes the checkpoint and the final progress and exits 0 with state "stopped": being stopped by the
scheduler is not a failure.

A member of a group runs under its memory limit (``COLOCATE_MEMORY_LIMIT_BYTES``, :mod:`.memory_cap`): an
allocation past it writes an out-of-memory record (``COLOCATE_OOM_FILE``), checkpoints what it trained and exits
with status 3; its partner runs on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.files import atomic_write_text
from common.signals import die_with_parent
from scheduler.executor.memory_cap import OOM_EXIT, MemoryCap, is_out_of_memory, limit_from_env, write_oom_record

PROGRESS_INTERVAL_S = 0.5
WARMUP_STEPS = 3  # iterations excluded from the measured iteration time (allocator, autotuning)


def write_progress(path: Path, payload: dict[str, Any]) -> None:
    """Replace ``path`` atomically so readers never see half a file."""
    atomic_write_text(path, json.dumps(payload), durable=False)  # rewritten twice a second: no fsync


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scheduler.executor.train", description=__doc__.split("\n")[0])
    parser.add_argument("--job", required=True, help="job name (for progress and logs)")
    parser.add_argument("--model", required=True, help="a model of the zoo, e.g. resnet18 or tiny_cnn")
    parser.add_argument("--batch-size", type=int, required=True, help="global batch size")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--num-classes", type=int, default=None, help="default: 10 below 96 px, else 1000")
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda")
    parser.add_argument("--steps", type=int, default=0, help="iterations to run in all; 0 = no step target")
    parser.add_argument("--target-samples", type=int, default=0,
                        help="samples to train in all; 0 = no target (default: $COLOCATE_TARGET_SAMPLES)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (CPU device)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress-file", type=Path, default=None)
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="checkpoint file to restore from and save to (default: $COLOCATE_CHECKPOINT)")
    parser.add_argument("--checkpoint-every-s", type=float, default=30.0)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args(argv)
    if args.checkpoint is None and os.environ.get("COLOCATE_CHECKPOINT"):
        args.checkpoint = Path(os.environ["COLOCATE_CHECKPOINT"])
    if not args.target_samples and os.environ.get("COLOCATE_TARGET_SAMPLES"):
        args.target_samples = int(os.environ["COLOCATE_TARGET_SAMPLES"])
    return args


@dataclass
class _Counters:
    """Where training stands: totals since the job's first start, and this process's own measurements."""

    step: int = 0
    samples: int = 0
    restored_step: int = 0
    loss: float = float("nan")
    start: float = field(default_factory=time.perf_counter)
    window: tuple[float, int] | None = None  # (time, step) at the start of the current measuring window
    iter_time_s: float | None = None

    def done(self, args: argparse.Namespace) -> bool:
        return bool((args.steps and self.step >= args.steps)
                    or (args.target_samples and self.samples >= args.target_samples))


def save_checkpoint(path: Path, model: Any, optimizer: Any, counters: _Counters) -> None:
    """Write model, optimizer, step and samples atomically (the unwrapped model, loadable at any GPU count)."""
    import torch

    inner = getattr(model, "module", model)
    temp = path.with_name(f".{path.name}.tmp")
    torch.save({"model": inner.state_dict(), "optimizer": optimizer.state_dict(), "step": counters.step,
                "samples": counters.samples}, temp)
    os.replace(temp, path)


def load_checkpoint(path: Path, model: Any, optimizer: Any, counters: _Counters) -> bool:
    """Restore from ``path`` if it exists; True when something was restored."""
    import torch

    if not path.is_file():
        return False
    state = torch.load(path, map_location="cpu", weights_only=True)
    getattr(model, "module", model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    counters.step = counters.restored_step = int(state["step"])
    counters.samples = int(state["samples"])
    return True


def _device(wanted: str, local_rank: int) -> Any:
    import torch

    if wanted == "auto":
        wanted = "cuda" if torch.cuda.is_available() else "cpu"
    if wanted == "cuda" and not torch.cuda.is_available():  # one line in the job's log, not a traceback
        raise SystemExit(f"--device cuda, but this node's torch {torch.__version__} cannot use CUDA "
                         f"({'a CPU-only build' if torch.version.cuda is None else 'no GPU visible'})")
    device = torch.device(f"cuda:{local_rank}" if wanted == "cuda" else wanted)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    return device


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    die_with_parent()  # a killed launcher (or job supervisor) leaves no training behind
    stop = {"requested": False}

    def request_stop(signum: int, frame: Any) -> None:
        stop["requested"] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    import torch

    from models import build_model, synthetic_inputs

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = _device(args.device, int(os.environ.get("LOCAL_RANK", "0")))
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    num_classes = args.num_classes or (10 if args.image_size < 96 else 1000)
    model = build_model(args.model, num_classes=num_classes, image_size=args.image_size).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    counters = _Counters()
    if args.checkpoint is not None and load_checkpoint(args.checkpoint, model, optimizer, counters) and rank == 0:
        print(f"[{args.job}] restored step {counters.step} ({counters.samples} samples) from {args.checkpoint}",
              flush=True)
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        device_ids = [device.index] if device.type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    local_batch = max(args.batch_size // world, 1)
    cap = MemoryCap(limit_from_env(), device)  # a member of a group: its memory limit (memory_cap)
    try:
        inputs, labels = synthetic_inputs(args.model, local_batch, image_size=args.image_size,
                                          num_classes=num_classes, seq_len=128, device=device, seed=args.seed + rank)
        _train(args, model, optimizer, (inputs, labels), counters, stop, world=world, rank=rank, device=device,
               cap=cap)
    except Exception as err:  # an allocation past the limit fails this job alone, with a record of it
        if not is_out_of_memory(err):
            raise
        return _out_of_memory(args, cap, err, local_batch, (model, optimizer, counters), rank)
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
        # A rank can hang for ever in the interpreter's shutdown after this (gloo's threads, seen on a loaded
        # CPU machine: the other rank gone, this one in a futex wait at exit), holding its GPUs and its job:
        # the work is saved and reported, so leave without the finalizers.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _out_of_memory(args: argparse.Namespace, cap: MemoryCap, err: BaseException, local_batch: int,
                   state: tuple[Any, Any, _Counters], rank: int) -> int:
    """Record what the job reached (``COLOCATE_OOM_FILE``), keep what it trained (a checkpoint, best effort: the
    failed step never reached the optimizer) and exit with :data:`OOM_EXIT`."""
    write_oom_record(cap, err, local_batch)
    limit = f" (limit {cap.limit / 2**30:.2f} GiB)" if cap.limit else " (no limit: alone on its GPUs)"
    print(f"[{args.job}] out of memory at step {state[2].step}{limit}: {str(err).splitlines()[0][:200]}", flush=True)
    if rank == 0 and args.checkpoint is not None:
        with contextlib.suppress(Exception):
            import torch

            if cap.device.type == "cuda":
                torch.cuda.empty_cache()
            save_checkpoint(args.checkpoint, *state)
    return OOM_EXIT


def _stop_agreed(requested: bool, world: int, device: Any) -> bool:
    """Every rank stops at the same step: the stop flag is all-reduced (max) across ranks."""
    if world == 1:
        return requested
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1.0 if requested else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)


def _train(args: argparse.Namespace, model: Any, optimizer: Any, batch: tuple[Any, Any], counters: _Counters,
           stop: dict[str, bool], *, world: int, rank: int, device: Any, cap: MemoryCap | None = None) -> None:
    import torch

    inputs, labels = batch
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    reporter = rank == 0
    global_batch = inputs.shape[0] * world
    last_report = last_checkpoint = counters.start
    if reporter:
        _report(args, counters, "running", global_batch)
    loss = None
    while not counters.done(args) and not _stop_agreed(stop["requested"], world, device):
        optimizer.zero_grad(set_to_none=True)
        with cap.first_step() if cap is not None else contextlib.nullcontext():
            outputs = model(inputs)  # (B, C) for classifiers, (B, T, V) for a language model
            loss = loss_fn(outputs.reshape(-1, outputs.shape[-1]), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        if cap is not None:
            cap.check(model, optimizer)  # on the CPU: the first step's memory against the limit
        counters.step += 1
        counters.samples += global_batch
        now = time.perf_counter()
        if counters.step - counters.restored_step == WARMUP_STEPS:
            counters.window = (now, counters.step)
        if reporter and now - last_report >= PROGRESS_INTERVAL_S:
            counters.loss = float(loss.detach())
            _measure(counters, now)
            _report(args, counters, "running", global_batch)
            last_report = now
        if reporter and args.checkpoint is not None and now - last_checkpoint >= args.checkpoint_every_s:
            save_checkpoint(args.checkpoint, model, optimizer, counters)
            last_checkpoint = now
        if reporter and args.log_every and counters.step % args.log_every == 0:
            print(f"[{args.job}] step {counters.step} loss {float(loss.detach()):.4f}", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if reporter:
        if loss is not None:
            counters.loss = float(loss.detach())
        _measure(counters, time.perf_counter())
        if args.checkpoint is not None:
            save_checkpoint(args.checkpoint, model, optimizer, counters)
        state = "finished" if counters.done(args) else "stopped"
        _report(args, counters, state, global_batch)
        print(f"[{args.job}] {state} after {counters.step} steps", flush=True)


def _measure(counters: _Counters, now: float) -> None:
    """Mean iteration time since the end of warm-up (this process only)."""
    if counters.window is not None and counters.step > counters.window[1]:
        counters.iter_time_s = (now - counters.window[0]) / (counters.step - counters.window[1])


def _report(args: argparse.Namespace, counters: _Counters, state: str, global_batch: int) -> None:
    if args.progress_file is None:
        return
    elapsed = time.perf_counter() - counters.start
    own_steps = counters.step - counters.restored_step
    with contextlib.suppress(OSError):
        write_progress(args.progress_file, {
            "job": args.job, "step": counters.step, "steps": args.steps or None, "samples": counters.samples,
            "target_samples": args.target_samples or None, "batch_size": global_batch,
            "samples_per_s": own_steps * global_batch / elapsed if elapsed > 0 else 0.0,
            "iter_time_s": counters.iter_time_s, "restored_step": counters.restored_step,
            "loss": counters.loss if counters.loss == counters.loss else None,  # NaN is not JSON
            "elapsed_s": round(elapsed, 3), "state": state, "device": args.device, "pid": os.getpid()})


if __name__ == "__main__":
    sys.exit(main())
