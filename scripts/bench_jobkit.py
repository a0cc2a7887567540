"""Evidence for the job library (scheduler.jobkit) on the CPU, with data that ships with scikit-learn.

    python scripts/bench_jobkit.py resize [--seeds 5] [--samples 24000]
        An MLP on scikit-learn's digits (1,797 8x8 images; 1,437 to train, 360 to validate) trained to the same
        number of samples: unresized at batch 32 (one run per seed: the spread), and resized twice mid-run
        (32 -> 128 at 1/3 of the samples, 128 -> 64 at 2/3; each a checkpoint and a fresh start at the new batch,
        learning rate scaled), per scaling. Prints the validation loss and accuracy of each.
    python scripts/bench_jobkit.py overhead [--steps 1000] [--repeats 5]
        CPU time per step of the built-in small models trained by a bare PyTorch loop and by the library
        (its defaults: gradient statistics within 1 % of the time, learning-rate scaling, progress twice a second,
        checkpoints every 30 s), interleaved; prints the fastest and the median repeat and the overhead, and the
        library's added time per step measured absolutely on a one-weight model, as a share of each model's step.

Needs scikit-learn for ``resize`` (the ``integrations`` extra). Figures: results/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.jobkit import JobConfig, JobEnv, attach  # noqa: E402


def digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
    x, y = x[order], y[order]
    return x[:1437], y[:1437], x[1437:], y[1437:]


def train_digits(seed: int, samples: int, schedule: list[tuple[float, int]], scaling: str, workdir: Path,
                 lr: float = 0.02) -> tuple[float, float]:
    """Train to ``samples`` through the batch ``schedule`` [(fraction of samples where a run starts, batch)], each
    run a fresh process state restored from the checkpoint; the final validation (loss, accuracy)."""
    xt, yt, xv, yv = digits()
    ckpt = workdir / f"digits-{seed}-{scaling}-{len(schedule)}.pt"
    ckpt.unlink(missing_ok=True)
    loss_fn = torch.nn.CrossEntropyLoss()
    bounds = [int(f * samples) for f, _ in schedule[1:]] + [samples]
    for (_, batch), until in zip(schedule, bounds):
        torch.manual_seed(seed)  # the model's first initialisation; a restart loads the checkpoint over it
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        env = JobEnv(job="digits", checkpoint=ckpt, target_samples=until)
        with attach(model, optimizer, env=env, batch_size=batch,
                    config=JobConfig(lr_scaling=scaling, base_batch=32, stats_every=1, stats_budget=1.0,
                                     log_every=0)) as run:
            while run.running():
                idx = run.batch_indices(len(xt), seed=seed)
                run.backward(lambda xb, yb: loss_fn(run.model(xb), yb), xt[idx], yt[idx])
                run.step()
    with torch.no_grad():
        out = model(xv)
        return float(loss_fn(out, yv)), float((out.argmax(1) == yv).float().mean())


def resize(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = [train_digits(s, args.samples, [(0.0, 32)], "adascale", work) for s in range(args.seeds)]
        losses, accs = [b[0] for b in base], [b[1] for b in base]
        print(f"unresized, batch 32, {args.seeds} seeds: val loss {statistics.mean(losses):.4f} "
              f"± {statistics.stdev(losses):.4f} (min {min(losses):.4f}, max {max(losses):.4f}); "
              f"accuracy {statistics.mean(accs):.4f} ± {statistics.stdev(accs):.4f}")
        schedule = [(0.0, 32), (1 / 3, 128), (2 / 3, 64)]
        for scaling in args.scalings.split(","):
            for seed in range(args.resized_seeds):
                loss, acc = train_digits(seed, args.samples, schedule, scaling, work)
                print(f"resized 32 -> 128 -> 64, {scaling:8s} seed {seed}: val loss {loss:.4f} "
                      f"(unresized same seed {losses[seed]:.4f}), accuracy {acc:.4f} ({accs[seed]:.4f})")


def overhead(args: argparse.Namespace) -> None:
    from models import synthetic_inputs

    torch.set_num_threads(1)
    # the library's own time per step, absolute: on a model of one weight (the step is nearly all bookkeeping),
    # bare and library steps differ by what the library adds; neighbours' noise is small at this scale
    inputs, labels = torch.randn(2, 1), torch.zeros(2, dtype=torch.long)
    loss_fn = torch.nn.CrossEntropyLoss()
    bare_t, lib_t = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            bare_t.append(_bare("one", inputs, labels, loss_fn, 2000))
            lib_t.append(_library("one", inputs, labels, loss_fn, 2000, Path(tmp)))
    added = min(lib_t) - min(bare_t)
    print(f"one-weight model: bare {min(bare_t) * 1e6:.1f} us/step, library {min(lib_t) * 1e6:.1f} us/step "
          f"(fastest of {args.repeats} x 2000 steps): the library adds {added * 1e6:.1f} us a step")
    for name, batch in (("tiny_cnn", 32), ("resnet18", 8)):
        steps = args.steps if name == "tiny_cnn" else max(args.steps // 30, 10)
        inputs, labels = synthetic_inputs(name, batch, image_size=32, num_classes=10, seq_len=128,
                                          device=torch.device("cpu"), seed=0)
        loss_fn = torch.nn.CrossEntropyLoss()
        bare_t, lib_t = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.repeats):
                bare_t.append(_bare(name, inputs, labels, loss_fn, steps))
                lib_t.append(_library(name, inputs, labels, loss_fn, steps, Path(tmp)))
        # on a shared machine the neighbours only ever add time: the fastest repeat is the cost of the code
        for label, pick in (("fastest", min), ("median", statistics.median)):
            bare, lib = pick(bare_t), pick(lib_t)
            print(f"{name} batch {batch}, {label} of {args.repeats} x {steps} steps (CPU time): bare "
                  f"{bare * 1e3:.2f} ms/step, library {lib * 1e3:.2f} ms/step: overhead {100 * (lib / bare - 1):+.2f} %")
        print(f"{name}: the library's added time per step is {100 * added / min(bare_t):.2f} % of its fastest bare "
              "step, plus at most the 1 % budget of the gradient statistics")


def _model(name: str) -> tuple[Any, Any]:
    from models import build_model

    torch.manual_seed(0)
    model = torch.nn.Linear(1, 2) if name == "one" else build_model(name, num_classes=10, image_size=32)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def _bare(name: str, inputs: Any, labels: Any, loss_fn: Any, steps: int) -> float:
    model, optimizer = _model(name)
    start = time.process_time()
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(inputs), labels).backward()
        optimizer.step()
    return (time.process_time() - start) / steps


def _library(name: str, inputs: Any, labels: Any, loss_fn: Any, steps: int, tmp: Path) -> float:
    model, optimizer = _model(name)
    (tmp / "c.pt").unlink(missing_ok=True)  # each repeat from step 0
    env = JobEnv(job="bench", checkpoint=tmp / "c.pt", progress_file=tmp / "p.json", target_steps=steps)
    start = time.process_time()
    with attach(model, optimizer, env=env, batch_size=inputs.shape[0], config=JobConfig(log_every=0)) as run:
        while run.running():
            run.backward(lambda x, y: loss_fn(run.model(x), y), inputs, labels)
            run.step()
    assert run.step_count == steps
    return (time.process_time() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    r = sub.add_parser("resize")
    r.add_argument("--seeds", type=int, default=5)
    r.add_argument("--resized-seeds", type=int, default=3)
    r.add_argument("--samples", type=int, default=24000)
    r.add_argument("--scalings", default="adascale,sqrt,linear,none")
    o = sub.add_parser("overhead")
    o.add_argument("--steps", type=int, default=1000)
    o.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    resize(args) if args.what == "resize" else overhead(args)


if __name__ == "__main__":
    main()
