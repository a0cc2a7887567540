"""The training process of a built-in job: ``python -m scheduler.executor.train --model resnet18 ...``.

Trains a model of the zoo on a fixed synthetic batch (as the profiler does: the point is the GPU load, not
the data) until ``--steps`` iterations (or ``--target-samples`` samples) are done, or until SIGTERM/SIGINT
when neither is set. It is a job like any user's, written on the job library (:mod:`scheduler.jobkit`), which
keeps the contract: the checkpoint restored at any batch size or GPU count and written on a stop signal, at the
end and every ``--checkpoint-every-s`` seconds; progress written atomically (``--progress-file`` or
``$COLOCATE_PROGRESS_FILE``, rank 0); data-parallel with DDP under ``torchrun`` (``WORLD_SIZE`` > 1), every rank
stopping at the same step; the gradient noise measured and the learning rate (``--lr`` at the first run's
batch) scaled to the batch (``--lr-scaling``, else the job file's ``lr_scaling``); the memory limit held and an
allocation past it recorded (``COLOCATE_OOM_FILE``) with exit status 3. A stop signal ends the current step,
writes the checkpoint and the final progress and exits 0 with state "stopped": being stopped by the scheduler is
not a failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from common.signals import die_with_parent
from scheduler.jobkit import LR_SCALINGS, JobConfig, attach, read_env


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
    parser.add_argument("--lr", type=float, default=0.01, help="SGD's learning rate at the first run's batch")
    parser.add_argument("--lr-scaling", choices=LR_SCALINGS, default=None,
                        help="the learning rate at another batch size (default: the job file's lr_scaling, "
                             "$COLOCATE_LR_SCALING, else AdaScale's gain)")
    parser.add_argument("--progress-file", type=Path, default=None, help="default: $COLOCATE_PROGRESS_FILE")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="checkpoint file to restore from and save to (default: $COLOCATE_CHECKPOINT)")
    parser.add_argument("--checkpoint-every-s", type=float, default=JobConfig.checkpoint_every_s)
    parser.add_argument("--log-every", type=int, default=JobConfig.log_every)
    return parser.parse_args(argv)


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
    import torch

    from models import build_model, synthetic_inputs

    env = read_env()
    overrides = {k: v for k, v in (("job", args.job), ("progress_file", args.progress_file),
                                   ("checkpoint", args.checkpoint)) if v is not None}
    env = dataclasses.replace(env, **overrides)
    device = _device(args.device, env.local_rank)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    num_classes = args.num_classes or (10 if args.image_size < 96 else 1000)
    model = build_model(args.model, num_classes=num_classes, image_size=args.image_size).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    config = JobConfig(lr_scaling=args.lr_scaling, checkpoint_every_s=args.checkpoint_every_s,
                       log_every=args.log_every)
    loss_fn = torch.nn.CrossEntropyLoss()

    def loss_of(inputs: Any, labels: Any) -> Any:
        outputs = run.model(inputs)  # (B, C) for classifiers, (B, T, V) for a language model
        return loss_fn(outputs.reshape(-1, outputs.shape[-1]), labels.reshape(-1))

    with attach(model, optimizer, config=config, env=env, batch_size=args.batch_size, target_steps=args.steps or None,
                target_samples=args.target_samples or None, device_name=args.device) as run:
        inputs, labels = synthetic_inputs(args.model, run.local_batch, image_size=args.image_size,
                                          num_classes=num_classes, seq_len=128, device=device, seed=args.seed + env.rank)
        run.model.train()
        while run.running():
            run.backward(loss_of, inputs, labels)
            run.step()
    if env.distributed:
        # A rank can hang for ever in the interpreter's shutdown after this (gloo's threads, seen on a loaded
        # CPU machine: the other rank gone, this one in a futex wait at exit), holding its GPUs and its job:
        # the work is saved and reported, so leave without the finalizers.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
