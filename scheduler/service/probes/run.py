"""One probe of ``colocate serve``: ``python -m scheduler.service.probes.run PROBE.json``.

The server (:mod:`scheduler.service.probes.manager`) starts this as the one "job" of a GPU group on a spare GPU, through
its executor (so it lands on the right node, with ``CUDA_VISIBLE_DEVICES`` set, on the local and Ray back ends
alike). It measures with the profiler's runner (:func:`profiler.campaign.runner.execute_run`, warm workers of
:class:`profiler.campaign.pool.WorkerPool`): each distinct job type alone, then the pair together when a partner
is given (the runner needs both solo baselines for that), each over one short window. It writes what it measured
to ``out`` (``{"runs": [{"jobs", "status", "error", "iter_time_s", "window_s", "wall_s"}], "wall_s"}``) and exits
0; a run that failed is a row with its status and error, and the server records the probe as failed.

``PROBE.json``: ``{"device": "cpu"|"cuda", "sharing", "image_size", "threads", "warmup_iters",
"min_window_iters", "min_window_s", "run_timeout_s", "jobs": [[model, batch]] (one or two), "out"}``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from common.files import atomic_write_text


def measure(doc: dict[str, Any]) -> dict[str, Any]:
    """Solo runs of each distinct job type, then the pair (when two jobs are given and both solos succeeded)."""
    from profiler.campaign.cells import Cell, JobType, Run
    from profiler.campaign.pool import WorkerPool
    from profiler.campaign.runner import SoloBaseline, execute_run
    from profiler.campaign.spec import spec_from_dict
    from profiler.gpu.devices import resolve_device
    from profiler.gpu.sharing import SHARING_SOLO

    began = time.perf_counter()
    jobs = [JobType(str(model), int(batch)) for model, batch in doc["jobs"]]
    spec = spec_from_dict({
        "name": "probe", "device": doc["device"], "models": sorted({j.model for j in jobs}),
        "batch_sizes": sorted({j.batch_size for j in jobs}), "group_sizes": [1, 2], "repetition": True,
        "image_size": int(doc["image_size"]), "warmup_iters": int(doc["warmup_iters"]),
        "min_window_iters": int(doc["min_window_iters"]), "min_window_seconds": float(doc["min_window_s"]),
        "threads_per_job": int(doc["threads"]), "run_timeout_s": float(doc["run_timeout_s"]), "repeats": 1,
        "sharing": [doc["sharing"]]})
    target = resolve_device(spec.device)
    runs: list[dict[str, Any]] = []
    baselines: dict[JobType, SoloBaseline] = {}
    with WorkerPool(spec, target) as pool:  # warm workers: the pair reuses the solo runs' processes
        for job in dict.fromkeys(jobs):
            record = execute_run(Run(Cell((job,), SHARING_SOLO), 0), spec, target, baselines, pool=pool)
            runs.append(_row(record, [job.label]))
            ok = record.status == "ok"
            baselines[job] = SoloBaseline(float(record.jobs[0]["iter_time_s"]) if ok else None,
                                          float(record.jobs[0]["peak_memory_mib"]) if ok else None, record.status)
        if len(jobs) == 2 and all(baselines[j].iter_time_s is not None for j in jobs):
            record = execute_run(Run(Cell(tuple(jobs), doc["sharing"]), 0), spec, target, baselines, pool=pool)
            runs.append(_row(record, [j.label for j in jobs]))
    return {"runs": runs, "wall_s": time.perf_counter() - began, "device": target.name}


def _row(record: Any, labels: list[str]) -> dict[str, Any]:
    times = [float(j["iter_time_s"]) for j in record.jobs]
    return {"jobs": labels, "status": record.status, "error": str(record.run.get("error") or ""),
            "iter_time_s": times if record.status == "ok" else None,
            "window_s": float(record.run.get("window_s") or 0.0), "wall_s": float(record.run.get("wall_s") or 0.0)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m scheduler.service.probes.run PROBE.json", file=sys.stderr)
        return 2
    doc = json.loads(Path(args[0]).read_text())
    result = measure(doc)
    atomic_write_text(Path(doc["out"]), json.dumps(result))
    for run in result["runs"]:  # the log's last line is what the server records when the probe fails
        print(f"probe {'+'.join(run['jobs'])}: {run['status']} {run['iter_time_s'] or run['error']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
