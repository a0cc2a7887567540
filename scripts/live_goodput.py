"""Live goodput on CPU: ``colocate serve`` with six jobs of known gradient noise scales, this checkout against another.

    PYTHONPATH=$PWD python scripts/live_goodput.py [--jobs known|real] [--baseline REV] [--round-s 1] [--gpus 3]

Each job is ``scripts/noise_job.py`` (the user-command contract, sleeping, so the shared CPU is not what is
measured): adaptive between batch 16 and 1024 (M0 = 32) on one GPU, a step at batch M taking 0.02 + 0.0001·M s
(raw samples/s grow with M), and making M · E(M) samples of progress, E(M) = (B + M0) / (B + M) for its noise
scale B — its target is statistically useful samples, as a target loss is. The six B are 8 … 8192. From its third
step it reports ``grad_sqr`` = 1 and ``grad_var`` = B. ``--baseline REV`` runs the same queue on that commit's code
(``git archive``; e.g. the commit before live goodput, whose serve gives an unprofiled job efficiency 1: batch
by throughput alone). Prints per run the mean and max time to target, the makespan, restarts, and each job's
batches in order (from the ``started``/``resized`` events) and its noise scale as this checkout's serve measured;
``--restart-cost`` is the ILP's S for both runs (a restart of these jobs takes about a second; of the real ones below
about 5–10 s on a loaded 2-core machine, torch and scikit-learn starting).

``--jobs real`` runs six jobs that train instead (``scripts/digits_job.py``: small MLPs and CNNs on scikit-learn's
digits on the job library, adaptive between batch 16 and 512, M0 = 32), each until its own target *validation
loss*; label noise, training-set size, model and learning rate set their gradient noise scales apart, which they
measure and report themselves. The time to target is then the wall time to that validation loss; the job file's
``samples`` (``--samples``) is only the scheduler's estimate of each job's work, generous so that serve never
holds a job as about to finish (stability rule 5) on a guess. Both trees' servers run the same jobs on this
checkout's job library. ``--dry-run`` prints the job files and starts nothing. Each tree submits with its own
``colocate submit``, and the outcome is read from its state database in SQL.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NOISE = (8, 32, 128, 512, 2048, 8192)
# name: scripts/digits_job.py's arguments. Clean labels and a full training set: a small noise scale; labels made
# random (a share of them) and fewer examples: per-example gradients that disagree, a large one.
REAL = {
    "cnn-clean": "--model cnn --width 64 --lr 0.0015 --target-loss 0.12",
    "mlp-clean": "--model mlp --width 1024 --lr 0.001 --target-loss 0.15",
    "cnn-noise20": "--model cnn --width 48 --lr 0.0015 --label-noise 0.2 --target-loss 0.35",
    "mlp-noise40": "--model mlp --width 1024 --lr 0.0005 --label-noise 0.4 --target-loss 0.7",
    "cnn-noise60": "--model cnn --width 48 --lr 0.0015 --label-noise 0.6 --train-size 600 --target-loss 1.1",
    "mlp-noise60": "--model mlp --width 1024 --lr 0.003 --label-noise 0.6 --train-size 600 --target-loss 1.2",
}


def queue(args: argparse.Namespace) -> list[dict[str, object]]:
    """The six job files of ``--jobs``: known noise scales (sleeping stand-ins) or real training on digits."""
    if args.jobs == "known":
        job = REPO / "scripts" / "noise_job.py"
        return [{"name": f"noise-{b}", "command": f"exec {sys.executable} {job} --noise {b} --base-batch 32",
                 "application": f"noise{b}", "samples": args.samples or 30000, "batch_size": 32, "min_batch_size": 16,
                 "max_batch_size": 1024, "adaptive": True, "max_gpus": 1} for b in NOISE]
    job = REPO / "scripts" / "digits_job.py"
    # this checkout's job library for both trees' servers: the same training, only the scheduling differs
    return [{"name": name, "command": f"exec env PYTHONPATH={REPO} {sys.executable} {job} {extra}",
             "application": name, "samples": args.samples or 1_000_000, "batch_size": 32, "min_batch_size": 16,
             "max_batch_size": 512, "adaptive": True, "max_gpus": 1} for name, extra in REAL.items()]


def run(code: Path, label: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One queue on ``code``'s serve. The jobs are submitted by that tree's own ``colocate submit`` and the outcome
    read from its state database in SQL (columns both trees share), so another commit's schema is no concern."""
    cluster = root / "cluster.yaml"
    cluster.write_text(f"gpu_types:\n  t4: {{nodes: 1, gpus_per_node: {args.gpus}, memory_gb: 16}}\n")
    state_dir, files = root / label, root / f"{label}-jobs"
    files.mkdir()
    for spec in queue(args):
        (files / f"{spec['name']}.yaml").write_text(json.dumps(spec))  # JSON is YAML
    env = {**os.environ, "PYTHONPATH": str(code)}
    server = subprocess.Popen([sys.executable, "-m", "colocate.cli", "serve", "--cluster", str(cluster), "--state",
                               str(state_dir), "--backend", "local", "--device", "cpu", "--round-s", str(args.round_s),
                               "--grace", "10", "--restart-cost", str(args.restart_cost)],
                              env=env, cwd=code, stdout=subprocess.DEVNULL, stderr=(root / f"{label}.log").open("wb"))
    time.sleep(3.0)
    began = time.time()
    try:
        subprocess.run([sys.executable, "-m", "colocate.cli", "submit", "--state", str(state_dir),
                        *map(str, sorted(files.iterdir()))], env=env, cwd=code, check=True, stdout=subprocess.DEVNULL)
        deadline = time.time() + args.timeout
        while time.time() < deadline and query(state_dir, "SELECT 1 FROM jobs WHERE state IN ('queued', 'running')"):
            time.sleep(1.0)
    finally:
        server.terminate()
        server.wait(timeout=120)
        from scheduler.executor.supervise import process_alive, read_json

        for pid_file in (state_dir / "runs").glob("*.pid"):  # what a timed-out run left running
            recorded = read_json(pid_file)
            if recorded and process_alive(recorded["pid"], recorded["start_time"]):
                os.kill(recorded["pid"], 9)
    rows = query(state_dir, "SELECT name, state, submitted_at, finished_at, restarts FROM jobs")
    done = [r for r in rows if r[1] == "completed" and r[3]]
    jcts = {r[0]: r[3] - r[2] for r in done}
    batches: dict[str, list[int]] = {}
    for job, kind, detail in query(state_dir, "SELECT job, kind, detail FROM events ORDER BY id"):
        found = re.search(r"batch (\d+)", detail) if kind in ("started", "restarted", "resized", "repacked",
                                                               "moved") else None
        if found:
            batches.setdefault(job, []).append(int(found.group(1)))
    gradients = query(state_dir, "SELECT job, grad_sqr, grad_var FROM gradients") if query(
        state_dir, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'gradients'") else []
    return {"label": label, "completed": f"{len(done)}/{len(rows)}",
            "mean": statistics.mean(jcts.values()) if jcts else float("nan"), "max": max(jcts.values(), default=float("nan")),
            "makespan": max(r[3] for r in done) - began if done else float("nan"),
            "restarts": sum(r[4] for r in rows), "jcts": jcts, "batches": batches,
            "noise": {job: var / sqr for job, sqr, var in gradients if sqr > 0}}


def query(state_dir: Path, sql: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(state_dir / "state.db", timeout=60.0)) as db:
        return db.execute(sql).fetchall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=None, help="a git revision to run the same queue on (throughput only)")
    parser.add_argument("--round-s", type=float, default=1.0)
    parser.add_argument("--gpus", type=int, default=3)
    parser.add_argument("--jobs", choices=("known", "real"), default="known",
                        help="known: stand-ins reporting given noise scales; real: training on digits to a target loss")
    parser.add_argument("--samples", type=int, default=None,
                        help="each job file's samples (known: the target in useful samples, 30000; real: the "
                             "scheduler's estimate of the work, 1,000,000)")
    parser.add_argument("--dry-run", action="store_true", help="print the job files (JSON lines) and start nothing")
    parser.add_argument("--restart-cost", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    if args.samples is not None and args.samples < 1:
        parser.error(f"--samples: {args.samples} is not an integer ≥ 1")
    if args.dry_run:
        from scheduler.service.jobs.jobspec import job_from_dict

        for spec in queue(args):
            job_from_dict(spec)  # a bad one is serve's own one-line error
            print(json.dumps(spec))
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="colocate-live-goodput-") as tmp:
        root = Path(tmp)
        runs = [(REPO, "measured efficiency")]
        if args.baseline:
            base = root / "baseline"
            base.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline], check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
            runs.append((base, f"baseline {args.baseline}"))
        for code, label in runs:
            results.append(run(code, label.split()[0], args, root))
            results[-1]["label"] = label
    print("| run | completed | mean time to target s | max s | makespan s | restarts |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['label']} | {r['completed']} | {r['mean']:.1f} | {r['max']:.1f} | {r['makespan']:.1f} | "
              f"{r['restarts']} |")
    print()
    print("| job (measured noise scale B) | " + " | ".join(f"{r['label']}: batches, time to target s" for r in results) + " |")
    print("|---|" + "---|" * len(results))
    for name in [str(spec["name"]) for spec in queue(args)]:
        cells = [f"{' → '.join(map(str, r['batches'].get(name, [])))}, {r['jcts'].get(name, float('nan')):.1f}"
                 for r in results]
        measured = results[0]["noise"].get(name)
        print(f"| {name} (measured B {'—' if measured is None else f'{measured:.0f}'}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
