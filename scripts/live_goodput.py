"""Live goodput on CPU: ``colocate serve`` with six jobs of known gradient noise scales, this checkout against another.

    PYTHONPATH=$PWD python scripts/live_goodput.py [--baseline REV] [--round-s 1] [--gpus 3] [--samples 30000]

Each job is ``scripts/noise_job.py`` (the user-command contract, sleeping, so the shared CPU is not what is
measured): adaptive between batch 16 and 1024 (M0 = 32) on one GPU, a step at batch M taking 0.02 + 0.0001·M s
(raw samples/s grow with M), and making M · E(M) samples of progress, E(M) = (B + M0) / (B + M) for its noise
scale B — its target is statistically useful samples, as a target loss is. The six B are 8 … 8192. From its third
step it reports ``grad_sqr`` = 1 and ``grad_var`` = B. ``--baseline REV`` runs the same queue on that commit's code
(``git archive``; e.g. the commit before live goodput, whose serve gives an unprofiled job efficiency 1: batch
by throughput alone). Prints per run the mean and max time to target, the makespan, restarts, and each job's
batches in order (from the ``started``/``resized`` events); ``--restart-cost`` is the ILP's S for both runs (a
restart of these jobs takes about a second).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOISE = (8, 32, 128, 512, 2048, 8192)


def run(code: Path, label: str, args: argparse.Namespace, root: Path) -> dict[str, object]:
    from scheduler.service.jobs.jobspec import job_from_dict
    from scheduler.service.state.store import StateStore

    cluster = root / "cluster.yaml"
    cluster.write_text(f"gpu_types:\n  t4: {{nodes: 1, gpus_per_node: {args.gpus}, memory_gb: 16}}\n")
    state_dir = root / label
    env = {**os.environ, "PYTHONPATH": str(code)}
    server = subprocess.Popen([sys.executable, "-m", "colocate.cli", "serve", "--cluster", str(cluster), "--state",
                               str(state_dir), "--backend", "local", "--device", "cpu", "--round-s", str(args.round_s),
                               "--grace", "10", "--restart-cost", str(args.restart_cost)],
                              env=env, cwd=code, stdout=subprocess.DEVNULL, stderr=(root / f"{label}.log").open("wb"))
    time.sleep(3.0)
    state = StateStore(state_dir, lock_wait_s=60.0)
    began = time.time()
    job = REPO / "scripts" / "noise_job.py"
    try:
        for b in NOISE:
            state.submit(job_from_dict({
                "name": f"noise-{b}", "command": f"exec {sys.executable} {job} --noise {b} --base-batch 32",
                "application": f"noise{b}", "samples": args.samples, "batch_size": 32, "min_batch_size": 16,
                "max_batch_size": 1024, "adaptive": True, "max_gpus": 1}))
        deadline = time.time() + args.timeout
        while time.time() < deadline and any(r.state in ("queued", "running") for r in state.jobs()):
            time.sleep(1.0)
    finally:
        server.terminate()
        server.wait(timeout=120)
        from scheduler.executor.supervise import process_alive, read_json

        for pid_file in (state_dir / "runs").glob("*.pid"):  # what a timed-out run left running
            recorded = read_json(pid_file)
            if recorded and process_alive(recorded["pid"], recorded["start_time"]):
                os.kill(recorded["pid"], 9)
    rows = state.jobs()
    done = [r for r in rows if r.state == "completed" and r.finished_at]
    jcts = {r.name: r.finished_at - r.submitted_at for r in done}  # type: ignore[operator]
    batches: dict[str, list[int]] = {}
    for e in state.events():
        found = re.search(r"batch (\d+)", e["detail"]) if e["kind"] in ("started", "restarted", "resized",
                                                                         "repacked", "moved") else None
        if found:
            batches.setdefault(e["job"], []).append(int(found.group(1)))
    return {"label": label, "completed": f"{len(done)}/{len(rows)}",
            "mean": statistics.mean(jcts.values()) if jcts else float("nan"), "max": max(jcts.values(), default=float("nan")),
            "makespan": max((r.finished_at or began) for r in done) - began if done else float("nan"),
            "restarts": sum(r.restarts for r in rows), "jcts": jcts, "batches": batches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=None, help="a git revision to run the same queue on (throughput only)")
    parser.add_argument("--round-s", type=float, default=1.0)
    parser.add_argument("--gpus", type=int, default=3)
    parser.add_argument("--samples", type=int, default=30000, help="each job's target: useful samples")
    parser.add_argument("--restart-cost", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
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
    print("| job (noise scale B) | " + " | ".join(f"{r['label']}: batches, time to target s" for r in results) + " |")
    print("|---|" + "---|" * len(results))
    for b in NOISE:
        name = f"noise-{b}"
        cells = [f"{' → '.join(map(str, r['batches'].get(name, [])))}, {r['jcts'].get(name, float('nan')):.1f}"  # type: ignore[union-attr]
                 for r in results]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
