"""A real training job for serve's live goodput benchmark: a small network on scikit-learn's digits, trained on the
job library (``colocate.job``) until its validation loss reaches a target.

It keeps serve's user-command contract through the library (resume from the checkpoint at whatever batch it is
given, the learning rate scaled by AdaScale from ``--base-batch``, progress with the measured gradient statistics,
checkpoint and exit 0 on SIGTERM). Every ``--eval-every`` training samples (counted from the first start, so at
every batch alike) it computes the loss on a held-out validation split (the same 297 digits for every job),
reports it (``val_loss``) and, at or below ``--target-loss``, finishes (``Run.finish``): serve counts the job
completed. It has no other target: the job file's ``samples`` are the scheduler's estimate of its work. What
sets its gradient noise scale: ``--label-noise`` (that share of the training labels replaced by random ones:
per-example gradients that never agree), ``--train-size``, the model and the learning rate.

    python scripts/digits_job.py --model mlp --width 64 --lr 0.05 --label-noise 0.3 --target-loss 0.9
"""

from __future__ import annotations

import argparse
from typing import Any

VALIDATION = 297  # held-out digits (of 1,797), the same for every job
MODELS = ("mlp", "cnn")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=MODELS, default="mlp")
    p.add_argument("--width", type=int, default=64, help="hidden units (mlp) or channels (cnn)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD (momentum 0.9) learning rate at --base-batch")
    p.add_argument("--base-batch", type=int, default=32, help="M0: the batch the learning rate is set for")
    p.add_argument("--label-noise", type=float, default=0.0, help="share of training labels made random, in [0, 1)")
    p.add_argument("--train-size", type=int, default=1500, help="training examples, at most 1500")
    p.add_argument("--target-loss", type=float, required=True, help="finish at this validation loss (cross-entropy)")
    p.add_argument("--eval-every", type=int, default=2048, help="training samples between validations")
    p.add_argument("--seed", type=int, default=0)
    return p


def check(args: argparse.Namespace) -> None:
    """A bad argument is a one-line error naming it (argparse's exit 2)."""
    bad = [(name, valid) for name, ok, valid in (
        ("--width", args.width >= 1, "an integer ≥ 1"), ("--lr", args.lr > 0, "a number > 0"),
        ("--base-batch", args.base_batch >= 1, "an integer ≥ 1"),
        ("--label-noise", 0 <= args.label_noise < 1, "a share in [0, 1)"),
        ("--train-size", 10 <= args.train_size <= 1797 - VALIDATION, f"an integer in [10, {1797 - VALIDATION}]"),
        ("--target-loss", args.target_loss > 0, "a number > 0"), ("--eval-every", args.eval_every >= 1,
                                                                  "an integer ≥ 1")) if not ok]
    if bad:
        parser().error(f"{bad[0][0]}: {getattr(args, bad[0][0][2:].replace('-', '_'))!r} is not {bad[0][1]}")


def data(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """(x_train, y_train, x_val, y_val): one fixed split; the training labels noised by ``--seed``."""
    import torch
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    val, train = order[:VALIDATION], order[VALIDATION:VALIDATION + args.train_size]
    labels = y[train].clone()
    gen = torch.Generator().manual_seed(args.seed)
    flip = torch.rand(len(train), generator=gen) < args.label_noise
    labels[flip] = torch.randint(0, 10, (int(flip.sum()),), generator=gen)
    return x[train], labels, x[val], y[val]


def network(args: argparse.Namespace) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(args.seed)
    if args.model == "mlp":
        return nn.Sequential(nn.Linear(64, args.width), nn.ReLU(), nn.Linear(args.width, 10))
    w = args.width
    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, w, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(w, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * w, 10))


def main() -> None:
    args = parser().parse_args()
    check(args)
    import torch

    from colocate import job

    torch.set_num_threads(1)  # one core's worth per job: the queue shares the CPU
    x, y, x_val, y_val = data(args)
    model = network(args)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    config = job.JobConfig(base_batch=args.base_batch, log_every=0)
    # the target is the validation loss: serve's samples (COLOCATE_TARGET_SAMPLES) are its estimate, not a stop
    with job.attach(model, optimizer, batch_size=args.base_batch, config=config, target_samples=0) as run:
        evaluated = -1
        while run.running():
            if run.samples // args.eval_every > evaluated:  # at the start too: a resumed run may be there
                evaluated = run.samples // args.eval_every
                with torch.no_grad():
                    val_loss = float(loss_fn(model(x_val), y_val))
                run.report(val_loss=round(val_loss, 5))
                if val_loss <= args.target_loss:
                    run.finish()
                    break
            idx = run.batch_indices(len(x), seed=args.seed)
            run.backward(lambda xb, yb: loss_fn(run.model(xb), yb), x[idx], y[idx])
            run.step()


if __name__ == "__main__":
    main()
