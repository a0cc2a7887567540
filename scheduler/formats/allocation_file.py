"""The allocation JSON: what ``colocate schedule --json`` writes and ``colocate launch`` reads.

Both sides live here so the format has one home (schema in the README, section "colocate schedule")::

    {"allocations": [{"job": "a", "gpu_type": "h100", "num_gpus": 1, "batch_size": 64, "partner": "b",
                      "node": 0, "nodes": [0], "gpus": [1], "expected_goodput": 123.4}, ...],
     "unallocated": ["c"], "unplaced": [], "objective": ..., "solver": {...}}

The reader only parses the file; :func:`scheduler.executor.plan.build_plan` checks every entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.errors import InputError
from common.safe_load import load_json

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.model.policy import Placement, RoundDecision

PRODUCER = "the output of colocate schedule --json"


def allocation_document(decision: RoundDecision, placement: Placement) -> dict[str, Any]:
    """A round's decision and its placement as the allocation JSON document."""
    rows = []
    for a in decision.allocations:
        where = placement.of(a.job)
        rows.append({
            "job": a.job, "gpu_type": a.gpu_type, "num_gpus": a.num_gpus, "batch_size": a.batch_size,
            "partner": a.partner, "partners": list(a.others), "node": where.node if where else None,
            "nodes": list(where.nodes) if where else [], "gpus": list(where.gpus) if where else [],
            "expected_goodput": round(a.expected_goodput, 6),
        })
    info = decision.solver
    return {
        "allocations": rows,
        "unallocated": list(decision.unallocated),
        "unplaced": list(placement.unplaced),
        "objective": info.objective,
        "solver": {"name": info.name, "status": info.status, "time_s": round(info.time_s, 4), "gap": info.gap,
                   "bound": info.bound, "fallback": info.fallback, "variables": info.num_variables,
                   "constraints": info.num_constraints},
    }


def read_allocation_file(path: str | Path) -> Any:
    """The parsed JSON of an allocation file (one-line errors for a missing, malformed or oversized file)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("allocation file not found", source=path, valid=PRODUCER)
    return load_json(path, what="allocation file", valid=PRODUCER)
