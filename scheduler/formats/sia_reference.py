"""Summaries of runs of Sia's own simulator (siasosp23/artifacts ``sia-simulator/multi_simulator.py``), to
set our simulator's figures beside them.

Sia's simulator writes its ``--output`` log as JSON lines, one per round, each with ``submitted_jobs``
(``name``, ``submission_time``, ``completion_time``, ``num_restarts``, ...). The last line holds every job's
final state. ``python -m scheduler.formats.sia_reference LOG [LOG ...]`` prints one JSON summary per log.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import InputError


def summarize_sia_log(path: str | Path) -> dict[str, Any]:
    """Jobs, completed, average / p99 JCT (s and h), restarts, and mean JCT and restarts per application of one
    Sia simulator log."""
    p = Path(path)
    last = None
    try:
        with p.open() as fh:
            for line in fh:
                if line.strip():
                    last = line
        record = json.loads(last) if last is not None else None
    except (OSError, json.JSONDecodeError) as err:
        raise InputError(f"cannot read Sia simulator log ({err})", source=p, field="log",
                         valid="the JSON-lines file written by multi_simulator.py --output") from None
    if not isinstance(record, dict) or "submitted_jobs" not in record:
        raise InputError("no submitted_jobs in the last line", source=p, field="submitted_jobs",
                         valid="the JSON-lines file written by multi_simulator.py --output")
    jobs = record["submitted_jobs"]
    jct = np.array([j["completion_time"] - j["submission_time"] for j in jobs if j.get("completion_time") is not None],
                   dtype=float)
    restarts = int(sum(j.get("num_restarts") or 0 for j in jobs))
    per_app: dict[str, list[float]] = {}
    per_app_restarts: dict[str, int] = {}
    for j in jobs:  # Sia names jobs <application>-<index>
        app = str(j["name"]).rsplit("-", 1)[0]
        per_app_restarts[app] = per_app_restarts.get(app, 0) + int(j.get("num_restarts") or 0)
        if j.get("completion_time") is not None:
            per_app.setdefault(app, []).append(j["completion_time"] - j["submission_time"])
    return {
        "log": str(p), "jobs": len(jobs), "completed": len(jct), "time_s": record.get("timestamp"),
        "avg_jct_s": float(jct.mean()) if len(jct) else float("nan"),
        "avg_jct_h": float(jct.mean() / 3600) if len(jct) else float("nan"),
        "p99_jct_h": float(np.percentile(jct, 99) / 3600) if len(jct) else float("nan"),
        "restarts": restarts,
        "per_app_jct_s": {app: round(float(np.mean(v)), 1) for app, v in sorted(per_app.items())},
        "per_app_restarts": dict(sorted(per_app_restarts.items())),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m scheduler.formats.sia_reference LOG [LOG ...]", file=sys.stderr)
        return 2
    try:
        for path in args:
            print(json.dumps(summarize_sia_log(path)))
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
