"""A live run of `colocate serve`'s learning with no colocation table: 8 jobs of 3 model types on 4 logical GPUs.

    python scripts/live_explore.py [--policy colocate|sia] [--steps 150] [--scale-steps] [--round-s 3] [--p 1.0]

The local backend on the CPU (real training processes of the built-in models, logical GPUs), no
``--colocation``: the prior and the exploration rule decide which pairs to try. Prints the mean JCT, the
restarts, the pairs formed and the learned ratios (``colocate learned``'s rows); ``--policy sia`` is the
same run with packing off.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("tiny_cnn", "resnet18", "vgg11")
# Steps per model relative to --steps, so the three types run for similar times on a CPU (alone, batch 8:
# tiny_cnn ≈ 0.025 s/step, vgg11 ≈ 0.5 s, resnet18 ≈ 1.1 s): a pair is then measured on both members
# before either ends, which a 60-step tiny_cnn job (done within a round) never is.
STEP_SCALE = {"tiny_cnn": 20.0, "resnet18": 1.0, "vgg11": 2.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="colocate")
    parser.add_argument("--steps", type=int, default=150, help="Steps per job (resnet18's with --scale-steps).")
    parser.add_argument("--scale-steps", action="store_true", help="Scale steps per model (STEP_SCALE).")
    parser.add_argument("--round-s", type=float, default=3.0)
    parser.add_argument("--p", type=float, default=None, help="The ILP's goodput power (default: the policy's).")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    args = parser.parse_args(argv)

    from dataclasses import replace

    from scheduler.executor.registry import make_executor
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.service.config import LIVE_ILP, ServeConfig
    from scheduler.service.front.views import learned_view
    from scheduler.service.jobs.jobspec import job_from_dict
    from scheduler.service.server import Server
    from scheduler.service.state.store import StateStore

    root = Path(tempfile.mkdtemp(prefix="live-explore-"))
    state = StateStore(root / "state")
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 4, "memory_gb": 16}}})
    ilp = replace(LIVE_ILP, p=args.p) if args.p is not None else LIVE_ILP  # serve's own ILP options (λ, restarts)
    server = Server(state, cluster, make_executor("local"), ServeConfig(
        round_s=args.round_s, device="cpu", policy=args.policy, ilp=ilp, stop_grace_s=10))
    server.acquire()
    for i in range(8):
        model = MODELS[i % 3]
        steps = max(1, round(args.steps * STEP_SCALE[model] if args.scale_steps else args.steps))
        state.submit(job_from_dict({"name": f"j{i}", "model": model, "steps": steps, "batch_size": 8}))
    began = time.monotonic()
    try:
        while time.monotonic() - began < args.timeout_s:
            server.round()
            rows = state.jobs()
            if all(r.state in ("completed", "failed", "cancelled") for r in rows):
                break
            time.sleep(args.round_s)
    finally:
        server.stop_groups(tuple(g for g in {r.group_key for r in state.jobs() if r.group_key}))
    rows = state.jobs()
    jcts = [r.finished_at - r.submitted_at for r in rows if r.state == "completed" and r.finished_at is not None]
    done = jcts
    jct = sum(jcts) / max(len(jcts), 1)
    pairs = sum(1 for r in rows for e in state.events(r.name) if " with " in e["detail"])
    print(f"policy {args.policy} (p={args.p}): {len(done)}/8 completed, mean JCT {jct:.1f} s, "
          f"restarts {sum(r.restarts for r in rows)}, pair starts {pairs}, wall {time.monotonic() - began:.0f} s")
    for e in state.events():
        if " with " in e["detail"]:
            print(f"  {e['kind']} {e['job']}: {e['detail']}")
    view = learned_view(state)
    for m in view["throughput"]:
        print(f"  solo {m['application']}@{m['batch_size']} on {m['num_gpus']}×{m['gpu_type']}: "
              f"{m['iter_time_s']:.4f} s/step (n {m['count']})")
    for r in view["colocation"]:  # a pending row waits for its solo time: no ratio yet
        ratios = (f"{r['ratio_a']:.3f} / {r['ratio_b']:.3f}" if r["solo_source"] == "measured" else "– / –")
        print(f"  learned {r['gpu_type']} {r['type_a']} + {r['type_b']}: {ratios} "
              f"(n {r['n_a']}/{r['n_b']}, solo {r['solo_source']})")
    print(f"  state: {state.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
