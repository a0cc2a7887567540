"""What one automatic probe of ``colocate serve`` costs: wall seconds (= GPU-seconds: a probe holds one GPU for
its whole life), CPU seconds, and how much of it is measuring windows.

Runs the probe process exactly as the server starts it (``python -m scheduler.service.probes.run PROBE.json``) with
the windows of :class:`scheduler.service.probes.manager.ProbeConfig` (defaults, or the test lane's short ones), for a
job type alone and for a type with a partner (solo, partner solo, pair)::

    PYTHONPATH=$PWD nice -n 10 python scripts/bench_probe.py --device cpu --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

from scheduler.service.probes.manager import ProbeConfig

SHORT = ProbeConfig(warmup_iters=2, min_window_iters=3, min_window_s=0.5)


def _tree_cpu_s(root: int, seen: dict[tuple[int, str], float]) -> None:
    """Fold the CPU seconds of ``root`` and every descendant now alive into ``seen`` (by pid and start time):
    the profiler's workers are the forkserver's children, which ``RUSAGE_CHILDREN`` never sees."""
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2:].split()
            parents[int(entry.name)], stats[int(entry.name)] = int(fields[1]), fields
    tick = os.sysconf("SC_CLK_TCK")
    for pid, fields in stats.items():
        ancestor = pid
        while ancestor not in (root, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root:
            seen[(pid, fields[19])] = (int(fields[11]) + int(fields[12])) / tick


def one_probe(config: ProbeConfig, device: str, jobs: list[list[object]], directory: Path) -> dict[str, float]:
    out = directory / "result.json"
    doc = {"device": device, "sharing": "timeslice", "image_size": 32, "threads": 1,
           "warmup_iters": config.warmup_iters, "min_window_iters": config.min_window_iters,
           "min_window_s": config.min_window_s, "run_timeout_s": config.timeout_s / 3, "jobs": jobs, "out": str(out)}
    spec = directory / "probe.json"
    spec.write_text(json.dumps(doc))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "scheduler.service.probes.run", str(spec)],
                             stdout=subprocess.DEVNULL)
    seen: dict[tuple[int, str], float] = {}
    while child.poll() is None:  # sampled: a descendant's last 0.2 s may be missed (a lower bound)
        _tree_cpu_s(child.pid, seen)
        time.sleep(0.2)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert child.returncode == 0, child.returncode
    result = json.loads(out.read_text())
    assert all(r["status"] == "ok" for r in result["runs"]), result
    own = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)  # the probe process, exact
    return {"wall_s": wall, "cpu_s": max(own, sum(seen.values())), "window_s": sum(r["window_s"] for r in result["runs"]),
            "runs": len(result["runs"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="tiny_cnn")
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    cases = {"solo": [[args.model, args.batch]],
             "with a partner": [[args.model, args.batch], [args.model, max(args.batch // 2, 1)]]}
    print("| windows | probe | runs | wall s = GPU-s (mean, min–max) | CPU s (mean, ≥) | in windows s (mean) |")
    print("|---|---|---|---|---|---|")
    for label, config in (("default", ProbeConfig()), ("short (tests)", SHORT)):
        for case, jobs in cases.items():
            rows = []
            for _ in range(args.repeats):
                with tempfile.TemporaryDirectory(prefix="colocate-probe-") as temp:
                    rows.append(one_probe(config, args.device, jobs, Path(temp)))
            walls = [r["wall_s"] for r in rows]
            mean = {k: sum(r[k] for r in rows) / len(rows) for k in ("wall_s", "cpu_s", "window_s")}
            print(f"| {label} | {case} | {rows[0]['runs']:.0f} | {mean['wall_s']:.1f} ({min(walls):.1f}–{max(walls):.1f}) "
                  f"| {mean['cpu_s']:.1f} | {mean['window_s']:.1f} |", flush=True)
    print(json.dumps({"default": asdict(ProbeConfig()), "short": asdict(replace(SHORT))}))


if __name__ == "__main__":
    main()
