"""A short live run of ``colocate serve`` (8 logical GPUs by default) per policy: JCTs, restarts, pairs.

    PYTHONPATH=$PWD python scripts/live_run.py [--policies colocate sia] [--jobs 24] [--round-s 2]
        [--backend local|ray] [--nodes 2] [--gpus-per-node 4] [--batch-scaling free|flat]

The jobs are a sleep-based trainer that follows the checkpoint-restore contract (so the CPU of a shared
machine is not what is measured): three applications of different lengths, rigid on 1 or 2 GPUs or adaptive
(1–4 GPUs), a step taking ``base / num_gpus`` seconds, 1.6× longer when it shares its GPUs (an interference
that packing still pays for: each member keeps 0.625 of its speed). With ``--batch-scaling flat`` a step takes
``batch / 16`` times longer, ±3 % at random, and targets are samples: samples/s are flat in the batch, as on a
GPU that one job already fills, so the measured rates of neighbouring batches are within noise of each other.
Jobs arrive one every ``--gap`` seconds. Prints one row per policy: mean and max JCT, makespan, restarts, jobs
that ran in a pair, distinct pairs formed, and the pair rows of ``colocate learned`` (measured against measured
solo times; pending ones in brackets); the learned rows and the restarts by kind and by event go to stderr.
``--backend ray`` starts a Ray cluster here (``--nodes`` nodes of ``--gpus-per-node`` logical GPUs with ``accelerator_type:T4``)
and runs the server on it.
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRAINER = textwrap.dedent("""
    import json, os, random, signal, time
    checkpoint, progress = os.environ["COLOCATE_CHECKPOINT"], os.environ["COLOCATE_PROGRESS_FILE"]
    batch, flat = int(os.environ["COLOCATE_BATCH_SIZE"]), bool(os.environ.get("FLAT"))
    # free: a target in steps, 16 samples a step; flat: a target in samples, a batch of them a step
    target = int(os.environ["COLOCATE_TARGET_SAMPLES" if flat else "COLOCATE_TARGET_STEPS"])
    step, samples = map(int, open(checkpoint).read().split()) if os.path.exists(checkpoint) else (0, 0)
    restored, stop, t0 = step, [], time.time()
    signal.signal(signal.SIGTERM, lambda *args: stop.append(True))
    base = float(os.environ["BASE_S"]) * (1.6 if os.environ.get("COLOCATE_PARTNERS") else 1.0)
    time.sleep(1.0)  # start-up
    while (samples if flat else step) < target and not stop:
        step += 1
        samples += batch if flat else 16
        # flat: a step takes batch / 16 times longer, ±3 %: samples/s flat in the batch, as on a GPU one job
        # already fills (the measured rate at one batch is within noise of the rate at the next)
        scale = batch / 16 * random.uniform(0.97, 1.03) if flat else 1.0
        time.sleep(base * scale / int(os.environ["COLOCATE_NUM_GPUS"]))
        with open(progress + ".tmp", "w") as fh:
            json.dump({"step": step, "samples": samples, "state": "running", "elapsed_s": time.time() - t0,
                       "restored_step": restored}, fh)
        os.replace(progress + ".tmp", progress)
    open(checkpoint, "w").write(f"{step} {samples}")
""")
APPS = {"short": (0.05, 100), "medium": (0.05, 200), "long": (0.05, 300)}  # step seconds on 1 GPU, steps


def _specs(count: int, script: Path, batch_scaling: str = "free") -> list[dict[str, object]]:
    shapes = ({"min_gpus": 1}, {"min_gpus": 2, "max_gpus": 2},
              {"adaptive": True, "min_gpus": 1, "max_gpus": 4, "min_batch_size": 8, "max_batch_size": 64})
    specs = []
    for i in range(count):
        app = list(APPS)[i % 3]
        base, steps = APPS[app]
        flat = batch_scaling == "flat"
        target = {"samples": steps * 16} if flat else {"steps": steps}
        specs.append({"name": f"{app}-{i}", "command": f"{'FLAT=1 ' if flat else ''}BASE_S={base} exec {sys.executable} {script}",
                      "application": app, "batch_size": 16, **target, **shapes[(i // 3) % 3]})
    return specs


def run_policy(policy: str, args: argparse.Namespace, root: Path) -> dict[str, float]:
    from scheduler.service.front.views import learned_view
    from scheduler.service.jobs.jobspec import job_from_dict
    from scheduler.service.state.store import StateStore

    script = root / "trainer.py"
    script.write_text(TRAINER)
    cluster = root / "cluster.yaml"
    cluster.write_text(f"gpu_types:\n  t4: {{nodes: {args.nodes}, gpus_per_node: {args.gpus_per_node}, "
                       "memory_gb: 16}\n")
    state_dir = root / policy
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    backend = ["--backend", "ray", "--address", args.address] if args.backend == "ray" else ["--backend", "local"]
    server = subprocess.Popen([sys.executable, "-m", "colocate.cli", "serve", "--cluster", str(cluster), "--state",
                               str(state_dir), *backend, "--device", "cpu", "--policy", policy,
                               "--round-s", str(args.round_s), "--grace", "10"], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=(root / f"{policy}.log").open("wb"))
    time.sleep(2.0)
    state = StateStore(state_dir, lock_wait_s=60.0)  # a loaded machine can hold a round's transaction for seconds
    began = time.time()
    try:
        for spec in _specs(args.jobs, script, args.batch_scaling):
            state.submit(job_from_dict(spec))
            time.sleep(args.gap)
        deadline = time.time() + args.timeout
        while time.time() < deadline and any(r.state in ("queued", "running") for r in state.jobs()):
            time.sleep(2.0)
    finally:
        server.terminate()
        server.wait(timeout=120)
        _kill_groups(state_dir)
        if args.backend == "ray":
            _kill_actors()
    rows = state.jobs()
    done = [r for r in rows if r.state == "completed" and r.finished_at]
    jcts = [r.finished_at - r.submitted_at for r in done]  # type: ignore[operator]
    starts = [e for e in state.events() if e["kind"] in ("started", "restarted", "repacked", "resized", "moved")
              and " with " in e["detail"]]
    paired = {e["job"] for e in starts}
    pairs = {frozenset((e["job"], e["detail"].split(" with ")[1].split(",")[0])) for e in starts}
    stops: dict[str, int] = {}  # why jobs were stopped: leaving a pair, joining one, resized or moved alone
    last: dict[str, str] = {}
    for e in state.events():
        if e["kind"] in ("started", "restarted", "repacked", "resized", "moved"):
            if e["kind"] != "started":
                was, now = " with " in last.get(e["job"], ""), " with " in e["detail"]
                why = "split" if was and not now else "joined" if now and not was else "re-paired" if now else "alone"
                stops[why] = stops.get(why, 0) + 1
            last[e["job"]] = e["detail"]
    events: dict[str, int] = {}  # what the server said of each restart: resized (GPUs or batch), moved, ...
    for e in state.events():
        if e["kind"] in ("restarted", "repacked", "resized", "moved"):
            events[e["kind"]] = events.get(e["kind"], 0) + 1
    print(f"  {policy} restarts by kind: {stops}; by event: {events}", file=sys.stderr)
    learned = learned_view(state)["colocation"]
    measured = [r for r in learned if r["solo_source"] == "measured"]
    for r in measured:
        print(f"  {policy} learned {r['type_a']} + {r['type_b']}: {r['ratio_a']:.3f} / {r['ratio_b']:.3f} "
              f"(n {r['n_a']}/{r['n_b']})", file=sys.stderr)
    return {"completed": len(done), "jobs": len(rows), "mean_jct": statistics.mean(jcts) if jcts else float("nan"),
            "max_jct": max(jcts, default=float("nan")),
            "makespan": max((r.finished_at or began) for r in done) - began if done else float("nan"),
            "restarts": sum(r.restarts for r in rows), "paired": len(paired), "pairs": len(pairs),
            "learned_pairs": len(measured), "pending_pairs": len(learned) - len(measured)}


def _kill_groups(state: Path) -> None:
    """Kill what a run that timed out left running (detached group supervisors; their jobs die with them)."""
    import signal

    from scheduler.executor.supervise import process_alive, read_json

    for pid_file in (state / "runs").glob("*.pid"):
        recorded = read_json(pid_file)
        if recorded and process_alive(recorded["pid"], recorded["start_time"]):
            os.kill(recorded["pid"], signal.SIGKILL)


def _kill_actors() -> None:
    """The server's group actors are detached: they outlive it."""
    import ray

    from scheduler.executor.ray.backend import NAMESPACE

    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["namespace"] == NAMESPACE:
            ray.kill(ray.get_actor(actor["name"], namespace=NAMESPACE))


def _ray_cluster(args: argparse.Namespace) -> Any:
    """A Ray cluster on this machine: ``--nodes`` nodes of ``--gpus-per-node`` logical GPUs of type t4."""
    import ray
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "num_gpus": args.gpus_per_node, "resources": {"accelerator_type:T4": 1}}
    nodes = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    for _ in range(args.nodes - 1):
        nodes.add_node(**node)
    ray.init(address=nodes.address, log_to_driver=False)
    args.address = nodes.address
    return nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", nargs="+", default=["colocate", "sia"])
    parser.add_argument("--jobs", type=int, default=24)
    parser.add_argument("--round-s", type=float, default=2.0)
    parser.add_argument("--gap", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--batch-scaling", choices=("free", "flat"), default="free",
                        help="free: a step takes as long at any batch; flat: batch / 16 times longer, ±3 %%")
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="ray: a Ray cluster started here with logical GPUs (accelerator_type:T4)")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=4)
    args = parser.parse_args()
    nodes = _ray_cluster(args) if args.backend == "ray" else None
    print("| policy | completed | mean JCT s | max JCT s | makespan s | restarts | jobs run in a pair | pairs formed "
          "| learned pair rows (pending) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for policy in args.policies:
        with tempfile.TemporaryDirectory(prefix=f"colocate-live-{policy}-") as tmp:
            r = run_policy(policy, args, Path(tmp))
        print(f"| {policy} | {r['completed']}/{r['jobs']} | {r['mean_jct']:.1f} | {r['max_jct']:.1f} | "
              f"{r['makespan']:.1f} | {r['restarts']} | {r['paired']} | {r['pairs']} | {r['learned_pairs']} "
              f"({r['pending_pairs']}) |", flush=True)
    if nodes is not None:
        import ray

        ray.shutdown()
        nodes.shutdown()


if __name__ == "__main__":
    main()
