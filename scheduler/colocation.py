"""Co-location ratios as the scheduler looks them up: (GPU type, job a, job b) -> (ratio_a, ratio_b).

``ratio = co-located throughput / solo throughput = t / t'`` for each job of the pair on one GPU (the file
format and its reader live in :mod:`scheduler.colocation_table`). A ratio of 0 marks an infeasible pair
(OOM, crash). Job types are ``model@batch`` or plain application names; a lookup tries the exact
``model@batch`` keys first, then the application names, so a table measured per application applies to
every batch size. A multi-GPU single-node pair (both jobs data-parallel over the same GPUs) uses the same
ratio as on one GPU: each GPU hosts one replica of each job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from scheduler.jobs import Job


@dataclass(frozen=True)
class ColocationTable:
    """Lookup of pair ratios; keys are stored in both orders so lookups need no sorting."""

    ratios: Mapping[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)

    def __hash__(self) -> int:
        return id(self)

    def __len__(self) -> int:
        return len(self.ratios)

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, str, str, float, float]]) -> "ColocationTable":
        """Build from ``(gpu_type, type_a, type_b, ratio_a, ratio_b)`` tuples."""
        table: dict[tuple[str, str, str], tuple[float, float]] = {}
        for gpu_type, a, b, ra, rb in rows:
            table[(gpu_type, a, b)] = (float(ra), float(rb))
            table[(gpu_type, b, a)] = (float(rb), float(ra))
        return cls(table)

    @classmethod
    def from_frame(cls, frame: "pd.DataFrame") -> "ColocationTable":
        """Build from the validated DataFrame returned by :func:`scheduler.colocation_table.read_colocation_table`."""
        cols = ["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b"]
        return cls.from_rows(frame[cols].itertuples(index=False, name=None))

    @classmethod
    def load(cls, path: str | Path) -> "ColocationTable":
        """Read and validate a colocation CSV."""
        from scheduler.colocation_table import read_colocation_table

        return cls.from_frame(read_colocation_table(path))

    @property
    def gpu_types(self) -> frozenset[str]:
        return frozenset(k[0] for k in self.ratios)

    def lookup(self, gpu_type: str, job_a: "Job", job_b: "Job") -> tuple[float, float] | None:
        """Ratios ``(r_a, r_b)`` for two jobs sharing a GPU of ``gpu_type``; None when unknown.

        Tries ``model@batch`` keys, then mixed, then application names.
        """
        keys_a = (job_a.job_type, job_a.application) if job_a.batch_size else (job_a.application,)
        keys_b = (job_b.job_type, job_b.application) if job_b.batch_size else (job_b.application,)
        for ka in keys_a:
            for kb in keys_b:
                hit = self.ratios.get((gpu_type, ka, kb))
                if hit is not None:
                    return hit
        return None
