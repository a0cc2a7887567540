"""Expand a campaign spec into cells (configurations) and an ordered list of runs (cell × repeat).

Order matters for a campaign that may be cut off (a 10-minute GPU lease): runs come in blocks of (batch
size, group size) — solos@64, pairs@64, triples@64, solos@128, … — so a cut-off leaves whole batch sizes
with δ (a block's solos give its groups their baselines and solo memory). Inside a block the runs of one
sharing mode stay together (warm workers of that mode serve them; an MPS daemon is started once), the
order of the modes and of the runs inside each mode shuffled (seeded), so no systematic drift lines up
with one mode across blocks.

With ``gpu_types`` in the spec every cell is planned once per type, the type prefixed to its id
(``h100:pair|mps|...``); each type's group runs use that type's solo baselines.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass, replace

from profiler.campaign.spec import CampaignSpec, parse_job_type, parse_job_type_full
from profiler.gpu.sharing import SHARING_SOLO, sharing_label, sharing_mode
from profiler.measure.training import DEFAULT_PRECISION

KIND_BY_SIZE = {1: "solo", 2: "pair", 3: "triple"}


@dataclass(frozen=True, order=True)
class JobType:
    model: str
    batch_size: int
    precision: str = DEFAULT_PRECISION

    @property
    def label(self) -> str:
        """``model@batch`` in fp32 (the default), ``model@batch:bf16`` in another precision."""
        suffix = "" if self.precision == DEFAULT_PRECISION else f":{self.precision}"
        return f"{self.model}@{self.batch_size}{suffix}"

    @classmethod
    def parse(cls, text: str) -> JobType:
        model, batch, precision = parse_job_type_full(text)
        if batch is None:
            raise ValueError(f"job type '{text}' needs a batch size: 'model@batch'")
        return cls(model, batch, precision or DEFAULT_PRECISION)


@dataclass(frozen=True)
class Cell:
    """One configuration to measure: a group of job types sharing one device in one mode."""

    jobs: tuple[JobType, ...]
    sharing: str  # "none" for solo, else timeslice | mps
    mps_thread_percentage: int | None = None
    gpu_type: str | None = None  # set when the spec lists gpu_types: the cell is measured on that type

    @property
    def kind(self) -> str:
        return KIND_BY_SIZE[len(self.jobs)]

    @property
    def precision(self) -> str:
        return self.jobs[0].precision  # every member of a group runs in the same precision

    @property
    def mode_label(self) -> str:
        return sharing_label(self.sharing, self.mps_thread_percentage)

    @property
    def cell_id(self) -> str:
        # Typed cells carry their GPU type as a prefix ("h100:pair|mps|..."), as Gavel-converted rows do.
        prefix = f"{self.gpu_type}:" if self.gpu_type else ""
        return f"{prefix}{self.kind}|{self.mode_label}|" + "+".join(job.label for job in self.jobs)

    @property
    def batch_key(self) -> int:
        return max(job.batch_size for job in self.jobs)


@dataclass(frozen=True)
class Run:
    cell: Cell
    repeat: int

    @property
    def run_id(self) -> str:
        return f"{self.cell.cell_id}#r{self.repeat}"


def _groups(spec: CampaignSpec) -> list[tuple[JobType, ...]]:
    """Job-type groups of size ≥ 2 (solo groups are derived from their members)."""
    groups: list[tuple[JobType, ...]] = []
    if spec.combinations is not None:
        for combo in spec.combinations:
            if len(combo) < 2:
                continue
            parsed = [parse_job_type(text) for text in combo]
            if all(batch is not None for _, batch in parsed):
                groups.append(tuple(JobType(m, b) for m, b in parsed))  # type: ignore[arg-type]
            else:
                for batch in spec.batch_sizes:
                    groups.append(tuple(JobType(m, b if b is not None else batch) for m, b in parsed))
        return groups
    combine = itertools.combinations_with_replacement if spec.repetition else itertools.combinations
    for size in spec.group_sizes:
        if size < 2:
            continue
        for batch in spec.batch_sizes:
            for models in combine(spec.models, size):
                groups.append(tuple(JobType(m, batch) for m in models))
    return groups


def _dedupe(items: Iterable[Cell]) -> list[Cell]:
    seen: dict[str, Cell] = {}
    for cell in items:
        seen.setdefault(cell.cell_id, cell)
    return list(seen.values())


def _in_precision(cell: Cell, precision: str) -> Cell:
    return replace(cell, jobs=tuple(replace(job, precision=precision) for job in cell.jobs))


def expand_cells(spec: CampaignSpec) -> list[Cell]:
    """All cells of a campaign: solos for every job type any group (or group size 1) needs, then groups."""
    groups = _groups(spec)
    solo_types: set[JobType] = {job for group in groups for job in group}
    if 1 in spec.group_sizes or spec.combinations is not None:
        if spec.combinations is None:
            solo_types.update(JobType(m, b) for m in spec.models for b in spec.batch_sizes)
        else:
            for combo in spec.combinations:
                if len(combo) == 1:
                    model, batch = parse_job_type(combo[0])
                    batches = [batch] if batch is not None else list(spec.batch_sizes)
                    solo_types.update(JobType(model, b) for b in batches)
    cells = [Cell((job,), SHARING_SOLO) for job in sorted(solo_types)]
    modes: list[tuple[str, int | None]] = []
    for mode in spec.sharing:
        if sharing_mode(mode).thread_partitions and spec.mps_thread_percentages:
            modes.extend((mode, pct) for pct in spec.mps_thread_percentages)
        else:
            modes.append((mode, None))
    for group in groups:
        ordered = tuple(sorted(group))  # a pair is unordered: one canonical cell id
        cells.extend(Cell(ordered, mode, pct) for mode, pct in modes)
    cells = _dedupe([_in_precision(cell, precision) for precision in spec.precision for cell in cells])
    if spec.gpu_types:
        cells = [replace(cell, gpu_type=gpu_type) for gpu_type in spec.gpu_types for cell in cells]
    return cells


def runs_for_gpu_type(runs: Iterable[Run], gpu_type: str) -> list[Run]:
    """The runs one device of ``gpu_type`` measures: untyped runs and runs of that type."""
    return [run for run in runs if run.cell.gpu_type in (None, gpu_type)]


def plan_runs(spec: CampaignSpec) -> list[Run]:
    """Runs in execution order (see module docstring)."""
    rng = random.Random(spec.seed)
    blocks: dict[tuple[int, int], dict[str, list[Run]]] = {}
    for cell in expand_cells(spec):
        modes = blocks.setdefault((cell.batch_key, len(cell.jobs)), {})
        modes.setdefault(cell.mode_label, []).extend(Run(cell, r) for r in range(spec.repeats))
    ordered: list[Run] = []
    for key in sorted(blocks):
        labels = sorted(blocks[key])
        rng.shuffle(labels)
        for label in labels:
            runs = blocks[key][label]
            rng.shuffle(runs)
            ordered.extend(runs)
    return ordered
