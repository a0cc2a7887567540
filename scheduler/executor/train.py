"""The training process of a built-in job: ``python -m scheduler.executor.train --model resnet18 ...``.

Trains a model of the zoo on a fixed synthetic batch (as the profiler does: the point is the GPU load, not
the data) until ``--steps`` iterations are done, or until SIGTERM/SIGINT when ``--steps 0``. Under
``torchrun`` (``WORLD_SIZE`` > 1) it trains data-parallel with DDP, the global batch split across ranks.

Progress is a JSON object rewritten atomically (``--progress-file``, rank 0 only) about twice a second::

    {"job": "a", "step": 120, "steps": 500, "samples_per_s": 812.4, "loss": 2.1, "elapsed_s": 9.8,
     "state": "running" | "finished" | "stopped"}

and a line per ``--log-every`` steps on stdout (the job's log). A stop signal ends the current step, writes
the final progress and exits 0 with state "stopped": being stopped by the launcher is not a failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from profiler.files import atomic_write_text
from profiler.signals import die_with_parent

PROGRESS_INTERVAL_S = 0.5


def write_progress(path: Path, payload: dict[str, Any]) -> None:
    """Replace ``path`` atomically so readers never see half a file."""
    atomic_write_text(path, json.dumps(payload), durable=False)  # rewritten twice a second: no fsync


def read_progress(path: Path) -> dict[str, Any] | None:
    """The last progress a job wrote, or None when it has written none (yet)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scheduler.executor.train", description=__doc__.split("\n")[0])
    parser.add_argument("--job", required=True, help="job name (for progress and logs)")
    parser.add_argument("--model", required=True, help="a model of the zoo, e.g. resnet18 or tiny_cnn")
    parser.add_argument("--batch-size", type=int, required=True, help="global batch size")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--num-classes", type=int, default=None, help="default: 10 below 96 px, else 1000")
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda")
    parser.add_argument("--steps", type=int, default=0, help="iterations to run; 0 = until stopped")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (CPU device)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress-file", type=Path, default=None)
    parser.add_argument("--log-every", type=int, default=50)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    die_with_parent()  # a killed launcher leaves no training behind
    stop = {"requested": False}

    def request_stop(signum: int, frame: Any) -> None:
        stop["requested"] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    import torch

    from models import build_model, synthetic_batch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    wanted = args.device
    if wanted == "auto":
        wanted = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(f"cuda:{local_rank}" if wanted == "cuda" else wanted)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    num_classes = args.num_classes or (10 if args.image_size < 96 else 1000)
    model = build_model(args.model, num_classes=num_classes, image_size=args.image_size).to(device)
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        device_ids = [local_rank] if device.type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    local_batch = max(args.batch_size // world, 1)
    inputs, labels = synthetic_batch(local_batch, image_size=args.image_size, num_classes=num_classes,
                                     device=device, seed=args.seed + rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()

    start = time.perf_counter()
    last_report = start
    step = 0
    loss_value = float("nan")
    reporter = rank == 0

    def report(state: str) -> None:
        elapsed = time.perf_counter() - start
        payload = {"job": args.job, "step": step, "steps": args.steps or None,
                   "loss": loss_value if loss_value == loss_value else None,  # NaN is not JSON
                   "samples_per_s": step * local_batch * world / elapsed if elapsed > 0 else 0.0,
                   "elapsed_s": round(elapsed, 3), "state": state, "device": str(device), "pid": os.getpid()}
        if args.progress_file is not None:
            write_progress(args.progress_file, payload)

    if reporter:
        report("running")
    while not stop["requested"] and (args.steps == 0 or step < args.steps):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        step += 1
        now = time.perf_counter()
        if reporter and now - last_report >= PROGRESS_INTERVAL_S:
            loss_value = float(loss.detach())
            report("running")
            last_report = now
        if reporter and args.log_every and step % args.log_every == 0:
            rate = step * local_batch * world / (now - start)
            print(f"[{args.job}] step {step} loss {float(loss.detach()):.4f} {rate:.1f} samples/s", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if reporter:
        with contextlib.suppress(Exception):
            loss_value = float(loss.detach())  # loss is bound once a step has run; suppressed otherwise
        report("stopped" if stop["requested"] and (args.steps == 0 or step < args.steps) else "finished")
        print(f"[{args.job}] {'stopped' if stop['requested'] else 'finished'} after {step} steps", flush=True)
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
