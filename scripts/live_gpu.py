"""The live loop on one GPU: a fixed queue of zoo jobs through ``colocate serve``, once per policy, then a report.

    python scripts/live_gpu.py plan   --device cuda|cpu [--policy both|sia|colocate] [--job-s S] [--budget S]
    python scripts/live_gpu.py run    --device cuda|cpu --out DIR [...the same]

``scripts/live-gpu.sh`` drives it (``OUT=``, a budget, at most 8 files back, ``--dry-run`` = ``plan``). The queue on a
GPU: two ResNet-18, an SE-ResNet-18, a VGG-19 and a ResNet-50 at 224 px, each sized from the bundled H100 solo times
(``scheduler/data/solo-h100.csv``) to run ``--job-s`` seconds alone, and ``hog``, a ResNet-50 at batch 256 that
declares 6 GB but needs ~25 GB: paired, it runs past its memory limit and must fail alone while its partner runs on.
On ``--device cpu`` (the CI smoke test) the same six jobs are tiny_cnn at 32 px on one logical GPU, ``hog`` declaring
2 MB for a step that needs ~17 MiB. The cluster is one GPU named ``h100`` (so ``colocate`` starts from the bundled
H100 pairs; the device's own name is in the report). Each policy runs in its own state directory: ``sia`` (no
packing), then ``colocate`` under MPS on a GPU (time-sliced on the CPU: MPS needs a GPU).

The report (``report.json`` and ``summary.txt``): per run, every job's JCT, the makespan, the GPU-busy time (the
union of the jobs' running intervals), restarts, every group formed with each member's measured ratio against the
bundled table's, the memory limits in force and every out-of-memory failure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GPU_QUEUE = (  # name, model, batch, declared memory_gb (None: measured/estimated)
    ("r18-a", "resnet18", 128, None), ("r18-b", "resnet18", 128, None), ("se-r18", "se_resnet18", 128, None),
    ("vgg19", "vgg19", 64, None), ("r50", "resnet50", 128, None), ("hog", "resnet50", 256, 6.0))
CPU_QUEUE = (("r18-a", "tiny_cnn", 16, None), ("r18-b", "tiny_cnn", 16, None), ("se-r18", "tiny_cnn", 32, None),
             ("vgg19", "tiny_cnn", 64, None), ("r50", "tiny_cnn", 32, None), ("hog", "tiny_cnn", 256, 0.002))
CPU_STEPS = 60  # steps of each CPU job (a few seconds of a loaded core)
START_S = {"cuda": 10.0, "cpu": 6.0}  # a job's start: interpreter, torch, CUDA context, model, cuDNN autotune
SERVER_S = 15.0  # a server's start, its first rounds and its stop
ROUND_S = {"cuda": 5.0, "cpu": 1.0}
STATES = ("completed", "failed", "cancelled")


def solo_seconds(model: str, batch: int) -> float | None:
    """Seconds per step alone on the H100 (bundled), by model and batch."""
    from scheduler.formats.solo_times import solo_table

    hit = solo_table("h100").get((model, batch))
    return hit.iter_time_s if hit else None


def queue(device: str, job_s: float) -> list[dict[str, Any]]:
    """The six job files: on a GPU each sized to ``job_s`` seconds alone from the bundled H100 solo times."""
    jobs = []
    for name, model, batch, memory in (GPU_QUEUE if device == "cuda" else CPU_QUEUE):
        step_s = solo_seconds(model, batch) if device == "cuda" else None
        steps = max(int(round(job_s / step_s)), 50) if step_s else CPU_STEPS
        spec: dict[str, Any] = {"name": name, "model": model, "batch_size": batch, "steps": steps,
                                "image_size": 224 if device == "cuda" else 32, "max_retries": 1}
        if memory is not None:
            spec["memory_gb"] = memory
        jobs.append({"spec": spec, "alone_s": steps * step_s if step_s else None})
    return jobs


def estimate(device: str, job_s: float, policies: list[str]) -> dict[str, Any]:
    """GPU time of the plan from the bundled H100 solo times: each run at most its jobs one after another (packing
    that pays only shortens the colocate run: counted as no gain) plus a start per job and per expected restart."""
    jobs = queue(device, job_s)
    alone = sum(j["alone_s"] or 0.0 for j in jobs)
    starts = len(jobs) * START_S[device]
    runs = {p: alone + starts + SERVER_S + (3 * START_S[device] if p == "colocate" else 0.0) for p in policies}
    return {"jobs": jobs, "alone_s": alone, "runs_s": runs, "total_s": sum(runs.values()) + 20.0}


def fitting_job_s(device: str, policies: list[str], budget: float) -> float:
    """The longest job length in [20, 90] s whose plan fits ``budget`` (20 when none does)."""
    for job_s in range(90, 19, -5):
        if estimate(device, float(job_s), policies)["total_s"] <= budget:
            return float(job_s)
    return 20.0


def _cli(*args: str, state: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "colocate.cli", *args]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=check, timeout=120)


def run_policy(policy: str, args: argparse.Namespace, jobs: list[dict[str, Any]], deadline: float) -> dict[str, Any]:
    """One serve run of the whole queue; stops at ``deadline`` (what finished is reported, the rest says so)."""
    root = Path(args.out) / "work" / policy
    state, files = root / "state", root / "jobs"
    files.mkdir(parents=True, exist_ok=True)
    cluster = root / "cluster.yaml"
    cluster.write_text(f"gpu_types:\n  h100: {{nodes: 1, gpus_per_node: 1, memory_gb: {args.memory_gb:g}}}\n")
    paths = []
    for job in jobs:
        path = files / f"{job['spec']['name']}.yaml"
        path.write_text(json.dumps(job["spec"]))  # JSON is YAML
        paths.append(str(path))
    _cli("submit", "--state", str(state), *paths)
    sharing = "mps" if args.device == "cuda" and policy == "colocate" else "timeslice"
    prior: list[str] = []
    if args.device == "cpu":  # a logical GPU has no measured pairs: a stand-in prior in which two tiny jobs pay,
        table = root / "cpu-prior.csv"  # and hog's pairs most (it is packed first, so its limit is tested every run)
        table.write_text("gpu_type,type_a,type_b,ratio_a,ratio_b\nh100,tiny_cnn,tiny_cnn,0.6,0.6\n"
                         "h100,tiny_cnn@256,tiny_cnn,0.8,0.8\n")
        prior = ["--colocation", str(table)]
    log = Path(args.out) / f"serve-{policy}.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-m", "colocate.cli", "serve", "--cluster", str(cluster), "--state",
                                   str(state), "--backend", "local", "--policy", policy, "--sharing", sharing,
                                   "--device", args.device, "--round-s", str(ROUND_S[args.device]), "--no-probe",
                                   *(prior if policy == "colocate" else [])],
                                  cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    began = time.time()
    try:
        while time.time() < deadline and server.poll() is None:
            views = json.loads(_cli("jobs", "--state", str(state), "--json").stdout)["jobs"]
            if views and all(v["state"] in STATES for v in views):
                break
            time.sleep(2.0)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        _stop_groups(state)
    return summarize(policy, state, began, sharing)


def _stop_groups(state: Path) -> None:
    """The server leaves its groups running when it stops: stop what is left of this run (supervisors and jobs)."""
    from common.errors import InputError
    from scheduler.executor.group_doc import GroupDoc
    from scheduler.executor.supervise import signal_supervisor

    for doc_file in (state / "runs").glob("g*.json"):
        try:
            doc = GroupDoc.read(doc_file)
        except InputError:
            continue  # not a group this run started
        if doc_file.with_suffix(".pid").exists():
            signal_supervisor(doc, {}, signal.SIGKILL)


def _intervals(events: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Each job's running intervals from its events (a start-kind event to the next end-kind one)."""
    starts = {"started", "restarted", "repacked", "resized", "moved"}
    ends = {"stopped", "completed", "crashed", "failed", "cancelled", "oom"}
    out: dict[str, list[tuple[float, float]]] = {}
    open_at: dict[str, float] = {}
    for e in events:
        job = e["job"]
        if job is None:
            continue
        if e["kind"] in starts and job not in open_at:
            open_at[job] = e["time"]
        elif e["kind"] in ends and job in open_at:
            out.setdefault(job, []).append((open_at.pop(job), e["time"]))
    return out


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -1e18
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _bundled(type_a: str, type_b: str) -> tuple[float, float] | None:
    from scheduler.formats.bundled import measured_table

    table = measured_table(["h100"], "mps")
    hit = table.ratios.get(("h100", type_a, type_b)) if table is not None else None
    return tuple(round(r, 3) for r in hit) if hit else None  # type: ignore[return-value]


def summarize(policy: str, state: Path, began: float, sharing: str) -> dict[str, Any]:
    """What one run did, from its state directory (events, jobs, learned ratios, group documents)."""
    from scheduler.executor.group_doc import GroupDoc
    from scheduler.service.front.views import job_views, learned_view
    from scheduler.service.state.store import StateStore

    store = StateStore(state, create=False, readonly=True)
    events, views = store.events(), job_views(store)
    submitted = {v["name"]: v["submitted_at"] for v in views}
    jobs = {v["name"]: {"state": v["state"], "jct_s": round(v["finished_at"] - submitted[v["name"]], 1)
                        if v["finished_at"] and v["state"] == "completed" else None, "restarts": v["restarts"],
                        "ooms": v["ooms"], "error": v["error"][:200]} for v in views}
    done = [v["finished_at"] for v in views if v["finished_at"]]
    intervals = _intervals(events)
    groups, limits = [], []
    for doc_file in sorted((state / "runs").glob("g*.json")):
        doc = GroupDoc.read(doc_file)
        if len(doc.jobs) > 1:
            groups.append({"group": doc.key, "members": doc.names})
            limits += [{"group": doc.key, "job": j.name, "limit_gib": round(j.memory_limit_bytes / 2**30, 3)}
                       for j in doc.jobs if j.memory_limit_bytes]
    pairs = [{"gpu_type": r["gpu_type"], "pair": f"{r['type_a']} + {r['type_b']}", "measured": [r["ratio_a"], r["ratio_b"]],
              "bundled": _bundled(r["type_a"], r["type_b"]), "samples": [r["n_a"], r["n_b"]]}
             for r in learned_view(store)["colocation"] if r["solo_source"] == "measured"]
    return {"policy": policy, "sharing": sharing, "jobs": jobs,
            "makespan_s": round(max(done) - began, 1) if done else None,
            "gpu_busy_s": round(_union([i for v in intervals.values() for i in v]), 1),
            "restarts": sum(v["restarts"] for v in views), "groups": groups, "pairs": pairs, "memory_limits": limits,
            "ooms": [{"job": e["job"], "detail": e["detail"]} for e in events if e["kind"] == "oom"],
            "splits": [{"job": e["job"], "detail": e["detail"]} for e in events if e["kind"] == "split"]}


def text_report(report: dict[str, Any]) -> str:
    sized = (f"jobs {report['job_s']:g} s alone each (bundled H100 solo times)" if report["device"] == "cuda"
             else f"tiny jobs of {CPU_STEPS} steps (the CPU smoke test)")
    lines = [f"device {report['device']} ({report['device_name']}); cluster: one GPU as h100, {report['memory_gb']:g} GB;"
             f" {sized}; estimated {report['estimate_s']:g} s"]
    for run in report["runs"]:
        lines.append(f"\n== {run['policy']} ({run['sharing']}): makespan {run['makespan_s']} s, GPU busy "
                     f"{run['gpu_busy_s']} s, restarts {run['restarts']}")
        for name, job in run["jobs"].items():
            lines.append(f"  {name:8} {job['state']:9} JCT {job['jct_s']} s, restarts {job['restarts']}, ooms {job['ooms']}"
                         + (f" ({job['error']})" if job["error"] else ""))
        for g in run["groups"]:
            lines.append(f"  group {g['group']}: {' + '.join(g['members'])}")
        for p in run["pairs"]:
            lines.append(f"  pair {p['pair']}: measured {p['measured']} (samples {p['samples']}), bundled {p['bundled']}")
        for m in run["memory_limits"]:
            lines.append(f"  limit {m['group']} {m['job']}: {m['limit_gib']} GiB")
        lines += [f"  oom {o['job']}: {o['detail']}" for o in run["ooms"]]
        lines += [f"  split {s['job']}: {s['detail']}" for s in run["splits"]]
    return "\n".join(lines) + "\n"


def _device(args: argparse.Namespace) -> tuple[str, float]:
    """The device's name and memory (GB) for the one-GPU cluster."""
    if args.device == "cpu":
        return "cpu (logical GPU)", 16.0
    from profiler.gpu.devices import resolve_device

    target = resolve_device("cuda")
    return target.name, round((target.memory_total_mib or 81559) / 1024, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/live_gpu.py", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("plan", "run"))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--policy", choices=("both", "sia", "colocate"), default="both")
    parser.add_argument("--job-s", type=float, default=None, help="seconds each job runs alone (default: fit the budget)")
    parser.add_argument("--budget", type=float, default=540.0, help="the window the jobs are sized for, seconds")
    parser.add_argument("--deadline-s", type=float, default=None, help="stop the runs this long after the start "
                                                                      "(default: the budget)")
    parser.add_argument("--out", default="out")
    args = parser.parse_args(argv)
    policies = ["sia", "colocate"] if args.policy == "both" else [args.policy]
    job_s = args.job_s or fitting_job_s(args.device, policies, args.budget)
    plan = estimate(args.device, job_s, policies)
    if args.action == "plan":
        print(f"queue ({args.device}), {job_s:g} s alone each, from the bundled H100 solo times:" if args.device == "cuda"
              else f"queue (cpu smoke test: one logical GPU), {CPU_STEPS} steps each:")
        for job in plan["jobs"]:
            s = job["spec"]
            alone = f"{job['alone_s']:.0f} s" if job["alone_s"] else "-"
            print(f"  {s['name']:7} {s['model']:12} batch {s['batch_size']:4} {s['steps']:6} steps  alone {alone}"
                  + (f"  declares {s['memory_gb']} GB" if "memory_gb" in s else ""))
        runs = ", ".join(f"{p} ≤ {t:.0f} s" for p, t in plan["runs_s"].items())
        print(f"estimated GPU time: {runs}; total ≤ {plan['total_s']:.0f} s of a {args.budget:g} s budget"
              + ("" if plan["total_s"] <= args.budget else "  (over: give --job-s less, or one --policy per call)"))
        return 0
    args.device_name, args.memory_gb = _device(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    report: dict[str, Any] = {"device": args.device, "device_name": args.device_name, "memory_gb": args.memory_gb,
                              "job_s": job_s, "estimate_s": round(plan["total_s"], 1), "runs": []}
    deadline = start + (args.deadline_s if args.deadline_s is not None else args.budget) - 15.0
    for n, policy in enumerate(policies):
        share = (deadline - time.time()) / (len(policies) - n)
        report["runs"].append(run_policy(policy, args, plan["jobs"], time.time() + share))
    report["wall_s"] = round(time.time() - start, 1)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "summary.txt").write_text(text_report(report) + f"wall {report['wall_s']} s\n")
    print((out / "summary.txt").read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
