"""A CPU stand-in for a training job with a known gradient noise scale (serve's live goodput benchmark and test).

It follows the user-command contract of ``colocate serve`` (docs/serve.md): resume from ``$COLOCATE_CHECKPOINT``,
train at ``$COLOCATE_BATCH_SIZE`` until ``$COLOCATE_TARGET_SAMPLES`` (or ``..._STEPS``), write
``$COLOCATE_PROGRESS_FILE`` atomically, checkpoint and exit 0 on SIGTERM. A step at global batch M takes
``step_s + per_sample_s · M`` seconds (sleeping: no CPU used), so raw throughput grows with M, and it makes
``M · E(M)`` samples of progress, E(M) = (B + M0) / (B + M) (capped at 1) for its noise scale B = ``--noise``:
the samples a target loss needs are *statistically useful* ones (Pollux's model of training). It reports
``grad_sqr`` = 1, ``grad_var`` = B (tr Σ per example) and ``lr`` = base_lr · M / M0 from its third step on.

    python scripts/noise_job.py --noise 64 --base-batch 32
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time


def efficiency(batch: int, base: int, noise: float) -> float:
    return min((noise + base) / (noise + batch), 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=float, required=True, help="the gradient noise scale B (tr Σ / |G|²)")
    parser.add_argument("--base-batch", type=int, default=32, help="M0: the batch its learning rate is set for")
    parser.add_argument("--step-s", type=float, default=0.02, help="fixed seconds per step")
    parser.add_argument("--per-sample-s", type=float, default=0.0001, help="seconds per sample of a step")
    parser.add_argument("--base-lr", type=float, default=0.1)
    args = parser.parse_args()
    checkpoint, progress = os.environ["COLOCATE_CHECKPOINT"], os.environ["COLOCATE_PROGRESS_FILE"]
    batch = int(os.environ["COLOCATE_BATCH_SIZE"])
    target_samples = int(os.environ.get("COLOCATE_TARGET_SAMPLES") or 0)
    target_steps = int(os.environ.get("COLOCATE_TARGET_STEPS") or 0)
    state = {"step": 0, "useful": 0.0}
    if os.path.exists(checkpoint):
        with open(checkpoint) as fh:
            state = json.load(fh)
    restored = int(state["step"])
    stop: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    t0 = time.time()
    gain = batch * efficiency(batch, args.base_batch, args.noise)

    def done() -> bool:
        return (target_samples > 0 and state["useful"] >= target_samples) or (
            target_steps > 0 and state["step"] >= target_steps)

    def report(phase: str) -> None:
        record = {"step": state["step"], "samples": int(state["useful"]), "restored_step": restored, "state": phase,
                  "elapsed_s": time.time() - t0}
        if state["step"] - restored >= 3:  # an estimate needs a few steps: absent until then
            record.update(grad_sqr=1.0, grad_var=args.noise, lr=args.base_lr * batch / args.base_batch)
        with open(progress + ".tmp", "w") as fh:
            json.dump(record, fh)
        os.replace(progress + ".tmp", progress)

    def save() -> None:
        with open(checkpoint + ".tmp", "w") as fh:
            json.dump(state, fh)
        os.replace(checkpoint + ".tmp", checkpoint)

    print(f"batch {batch}, noise scale {args.noise:g}, efficiency {gain / batch:.3f}, resumed at step {restored}",
          flush=True)
    while not done() and not stop:
        time.sleep(args.step_s + args.per_sample_s * batch)
        state["step"] += 1
        state["useful"] += gain
        report("running")
        if state["step"] % 50 == 0:
            save()
    save()
    report("finished" if done() else "stopped")


if __name__ == "__main__":
    main()
