"""The simulator's job list: :class:`Workload`, an arrival-ordered sequence of :class:`WorkloadJob`, and its
CSV form (Sia's workload format). The readers that build one from public traces are in
:mod:`scheduler.formats.workloads`."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path

from common.bounds import check_number
from common.errors import InputError
from scheduler.model.jobs import JobRequirements

SIA_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
OPTIONAL_COLUMNS = ("work", "duration", "max_slowdown", "exclusive")


@dataclass(frozen=True)
class WorkloadJob:
    """One submitted job.

    ``num_gpus`` and ``batch_size`` are the user's request (rigid policies run the job exactly so; adaptive
    ones treat ``batch_size`` as the largest batch allowed, as Sia does). ``work`` is the number of useful
    (statistically efficient) samples to finish; ``duration_s`` is the time the job would take alone at its
    request on the reference GPU type. With neither, the simulator uses the application's GNS curve.
    """

    name: str
    application: str
    arrival: float
    num_gpus: int = 1
    batch_size: int | None = None
    work: float | None = None
    duration_s: float | None = None
    # its own slowdown bound in a group (None: the cluster-wide one), never sharing its GPUs; no memory (the
    # simulator's memory model knows each application's)
    requirements: JobRequirements = JobRequirements()


@dataclass(frozen=True)
class Workload:
    """A named, arrival-ordered sequence of jobs and the file it came from."""

    name: str
    jobs: tuple[WorkloadJob, ...]
    source: str = "<workload>"

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def applications(self) -> tuple[str, ...]:
        return tuple(sorted({j.application for j in self.jobs}))

    def head(self, n: int) -> "Workload":
        """The first ``n`` jobs (for quick runs)."""
        return replace(self, jobs=self.jobs[:n], name=f"{self.name}[:{n}]")

    def at_load(self, load: float) -> "Workload":
        """The same jobs arriving ``load`` times as fast (arrival times divided by ``load``): Sia's nominal
        rate is 1; 2 doubles the arrival rate over the same job mix."""
        check_number(load, field="load", low=0, high=math.inf, low_open=True, source=self.source,
                     valid="a number > 0, e.g. 0.5 or 2")
        if load == 1:
            return self
        jobs = tuple(replace(j, arrival=j.arrival / load) for j in self.jobs)
        return replace(self, jobs=jobs, name=f"{self.name}@{load:g}x")

    def jittered(self, seed: int, spread_s: float = 60.0) -> "Workload":
        """A replicate of the workload: every arrival moved later by a uniform draw in ``[0, spread_s)`` (seed 0:
        the workload itself). A shift inside one scheduling round leaves the job mix and the load as they are;
        the spread of results across replicates is how much one run's outcome depends on when, within a round,
        its jobs happen to arrive (a simulated cluster is sensitive to that)."""
        if not (isinstance(seed, int) and seed >= 0):
            raise InputError(f"seed {seed!r}", source=self.source, field="seed", valid="an integer >= 0")
        check_number(spread_s, field="spread_s", low=0, high=math.inf, source=self.source, valid="seconds >= 0")
        if seed == 0 or spread_s == 0:
            return self
        import numpy as np

        shifts = np.random.default_rng(seed).uniform(0.0, spread_s, len(self.jobs))
        jobs = sorted((replace(j, arrival=j.arrival + float(d)) for j, d in zip(self.jobs, shifts)),
                      key=lambda j: (j.arrival, j.name))
        return replace(self, jobs=tuple(jobs), name=f"{self.name}~r{seed}")

    def to_rows(self) -> list[dict[str, object]]:
        rows = []
        for j in self.jobs:
            row: dict[str, object] = {"name": j.name, "time": j.arrival, "application": j.application,
                                      "num_replicas": j.num_gpus, "batch_size": j.batch_size or ""}
            if any(x.work is not None for x in self.jobs):
                row["work"] = "" if j.work is None else j.work
            if any(x.duration_s is not None for x in self.jobs):
                row["duration"] = "" if j.duration_s is None else j.duration_s
            needs = j.requirements
            if any(x.requirements.max_slowdown is not None for x in self.jobs):
                row["max_slowdown"] = "" if needs.max_slowdown is None else needs.max_slowdown
            if any(x.requirements.exclusive for x in self.jobs):
                row["exclusive"] = "true" if needs.exclusive else "false"
            rows.append(row)
        return rows

    def write_csv(self, path: str | Path) -> Path:
        """Write in the Sia workload format (plus ``work``/``duration`` when some job has them)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        rows = self.to_rows()
        header = list(SIA_COLUMNS) + [c for c in OPTIONAL_COLUMNS if rows and c in rows[0]]
        with p.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=header)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: _fmt(row.get(k, "")) for k in header})
        return p


def _fmt(value: object) -> object:
    if isinstance(value, float):
        return f"{value:.6g}" if not value.is_integer() else str(int(value))
    return value
