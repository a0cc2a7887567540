"""A short live run of ``colocate serve`` (local backend, 8 logical GPUs) per policy: JCTs, restarts, pairs.

    PYTHONPATH=$PWD python scripts/live_run.py [--policies colocate sia] [--jobs 24] [--round-s 2]

The jobs are a sleep-based trainer that follows the checkpoint-restore contract (so the CPU of a shared
machine is not what is measured): three applications of different lengths, rigid on 1 or 2 GPUs or adaptive
(1–4 GPUs), a step taking ``base / num_gpus`` seconds, 1.6× longer when it shares its GPUs (an interference
that packing still pays for: each member keeps 0.625 of its speed). Jobs arrive one every ``--gap`` seconds.
Prints one row per policy: mean and max JCT, makespan, restarts, jobs that ran in a pair, learned pairs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAINER = textwrap.dedent("""
    import json, os, signal, time
    checkpoint, progress = os.environ["COLOCATE_CHECKPOINT"], os.environ["COLOCATE_PROGRESS_FILE"]
    target = int(os.environ["COLOCATE_TARGET_STEPS"])
    step = int(open(checkpoint).read()) if os.path.exists(checkpoint) else 0
    restored, stop, t0 = step, [], time.time()
    signal.signal(signal.SIGTERM, lambda *args: stop.append(True))
    base = float(os.environ["BASE_S"]) * (1.6 if os.environ.get("COLOCATE_PARTNERS") else 1.0)
    time.sleep(1.0)  # start-up
    while step < target and not stop:
        step += 1
        time.sleep(base / int(os.environ["COLOCATE_NUM_GPUS"]))
        with open(progress + ".tmp", "w") as fh:
            json.dump({"step": step, "samples": step * 16, "state": "running", "elapsed_s": time.time() - t0,
                       "restored_step": restored}, fh)
        os.replace(progress + ".tmp", progress)
    open(checkpoint, "w").write(str(step))
""")
APPS = {"short": (0.05, 100), "medium": (0.05, 200), "long": (0.05, 300)}  # step seconds on 1 GPU, steps


def _specs(count: int, script: Path) -> list[dict[str, object]]:
    shapes = ({"min_gpus": 1}, {"min_gpus": 2, "max_gpus": 2},
              {"adaptive": True, "min_gpus": 1, "max_gpus": 4, "min_batch_size": 8, "max_batch_size": 64})
    specs = []
    for i in range(count):
        app = list(APPS)[i % 3]
        base, steps = APPS[app]
        specs.append({"name": f"{app}-{i}", "command": f"BASE_S={base} exec {sys.executable} {script}",
                      "application": app, "steps": steps, "batch_size": 16, **shapes[(i // 3) % 3]})
    return specs


def run_policy(policy: str, args: argparse.Namespace, root: Path) -> dict[str, float]:
    from scheduler.service.jobspec import job_from_dict
    from scheduler.service.state import StateStore

    script = root / "trainer.py"
    script.write_text(TRAINER)
    cluster = root / "cluster.yaml"
    cluster.write_text("gpu_types:\n  t4: {nodes: 2, gpus_per_node: 4, memory_gb: 16}\n")
    state_dir = root / policy
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    server = subprocess.Popen([sys.executable, "-m", "colocate.cli", "serve", "--cluster", str(cluster), "--state",
                               str(state_dir), "--backend", "local", "--device", "cpu", "--policy", policy,
                               "--round-s", str(args.round_s), "--grace", "10"], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=(root / f"{policy}.log").open("wb"))
    time.sleep(2.0)
    state = StateStore(state_dir)
    began = time.time()
    try:
        for spec in _specs(args.jobs, script):
            state.submit(job_from_dict(spec))
            time.sleep(args.gap)
        deadline = time.time() + args.timeout
        while time.time() < deadline and any(r.state in ("queued", "running") for r in state.jobs()):
            time.sleep(2.0)
    finally:
        server.terminate()
        server.wait(timeout=120)
        _kill_groups(state_dir)
    rows = state.jobs()
    done = [r for r in rows if r.state == "completed" and r.finished_at]
    jcts = [r.finished_at - r.submitted_at for r in done]  # type: ignore[operator]
    paired = {e["job"] for e in state.events() if e["kind"] in ("started", "restarted", "repacked", "resized", "moved")
              and " with " in e["detail"]}
    return {"completed": len(done), "jobs": len(rows), "mean_jct": statistics.mean(jcts) if jcts else float("nan"),
            "max_jct": max(jcts, default=float("nan")),
            "makespan": max((r.finished_at or began) for r in done) - began if done else float("nan"),
            "restarts": sum(r.restarts for r in rows), "paired": len(paired),
            "learned_pairs": sum(1 for m in state.measurements() if m["partner_type"])}


def _kill_groups(state: Path) -> None:
    """Kill what a run that timed out left running (detached group supervisors; their jobs die with them)."""
    import signal

    from scheduler.executor.supervise import process_alive, read_json

    for pid_file in (state / "runs").glob("*.pid"):
        recorded = read_json(pid_file)
        if recorded and process_alive(recorded["pid"], recorded["start_time"]):
            os.kill(recorded["pid"], signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", nargs="+", default=["colocate", "sia"])
    parser.add_argument("--jobs", type=int, default=24)
    parser.add_argument("--round-s", type=float, default=2.0)
    parser.add_argument("--gap", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    print("| policy | completed | mean JCT s | max JCT s | makespan s | restarts | jobs run in a pair | learned pairs |")
    print("|---|---|---|---|---|---|---|---|")
    for policy in args.policies:
        with tempfile.TemporaryDirectory(prefix=f"colocate-live-{policy}-") as tmp:
            r = run_policy(policy, args, Path(tmp))
        print(f"| {policy} | {r['completed']}/{r['jobs']} | {r['mean_jct']:.1f} | {r['max_jct']:.1f} | "
              f"{r['makespan']:.1f} | {r['restarts']} | {r['paired']} | {r['learned_pairs']} |", flush=True)


if __name__ == "__main__":
    main()
