"""Jobs as the scheduler sees them in one round: frozen values, read from a CSV or built by the simulator.

Jobs CSV columns (``name`` and ``application`` required, the rest optional)::

    name,application,arrival,num_gpus,max_gpus,batch_size,min_batch_size,max_batch_size,adaptive,
    memory_gb,age_s,restarts,current_gpu_type,current_num_gpus,current_partner,pinned,max_slowdown,exclusive,owner

* **Rigid** jobs (``adaptive`` false, the default) keep ``num_gpus`` (default 1) and ``batch_size`` (the
  global batch; default: the goodput model's choice at ``num_gpus``).
* **Adaptive** jobs get GPU count (``1..max_gpus``) and global batch size (``min_batch_size..
  max_batch_size``) chosen by goodput, as in Sia/Pollux.
* ``age_s``, ``restarts`` and ``current_*`` describe the job's present state (for Sia's restart factor and
  for keeping placements stable); ``pinned`` marks a job in checkpoint-restore that must keep its config.
* ``max_slowdown``: this job never runs slower than ``1 / max_slowdown`` of its solo speed in a group (default:
  the policy's cluster-wide ``IlpConfig.max_slowdown``); ``exclusive`` true: it never shares its GPUs.
* ``owner``: the user the job belongs to (default empty: every job one owner's); a group of several owners shares
  as :mod:`scheduler.model.owners` allows (not by single-user MPS).
* ``progress`` is the statistical progress made so far (the unit of the ``progress`` column of Sia's
  ``validation-*.csv`` curves); the goodput model reads the gradient noise there.

The Sia/Pollux workload header ``name,time,application,num_replicas,batch_size`` is accepted too
(``time`` -> ``arrival``, ``num_replicas`` -> ``num_gpus``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common.bounds import MAX_BATCH, MAX_GPUS, MAX_SECONDS, check_number
from common.errors import InputError
from common.names import NAME_RULE, check_name, shown
from scheduler.model.cluster import MAX_MEMORY_GB

MAX_SLOWDOWN = 1000.0
# What each requirement may be, as every job record's errors say it.
REQUIREMENT_RULES: dict[str, str] = {
    "memory_gb": f"GPU memory per GPU in GB, a number in (0, {MAX_MEMORY_GB:g}]",
    "max_slowdown": f"a slowdown in [1, {MAX_SLOWDOWN:g}]: in a group, never slower than 1/this of its solo speed",
    "exclusive": "true (never shares its GPUs) or false",
}


@dataclass(frozen=True)
class JobRequirements:
    """What a job asks of its GPUs beside their count, one value carried as ``requirements`` by every job record
    (``serve``'s :class:`~scheduler.service.jobs.jobspec.JobSpec`, a workload's
    :class:`~scheduler.formats.workload_jobs.WorkloadJob`, a round's :class:`Job`): GPU memory per GPU (None:
    measured or estimated; a round's job: the footprint it is planned with), its own slowdown bound in a group
    (None: the cluster-wide one), and whether it never shares its GPUs.

    What a user wrote becomes one only through :meth:`checked` (or :meth:`from_fields`), the one validator; the
    plain constructor takes values already checked or made by the code. Files keep the three as separate fields
    (:meth:`as_fields`)."""

    memory_gb: float | None = None
    max_slowdown: float | None = None
    exclusive: bool = False

    @classmethod
    def checked(cls, memory_gb: Any = None, max_slowdown: Any = None, exclusive: Any = False, *,
                source: str | Path, row: int | None = None) -> "JobRequirements":
        """The one validator of the three: a one-line :class:`InputError` naming ``source`` (and ``row`` of a
        table) and the field, else the value."""
        if not isinstance(exclusive, bool):
            at = "" if row is None else f"row {row}: "
            raise InputError(f"{at}{shown(exclusive)} is not valid", source=source, field="exclusive",
                             valid=REQUIREMENT_RULES["exclusive"])
        memory = None if memory_gb is None else float(check_number(
            memory_gb, field="memory_gb", low=0, high=MAX_MEMORY_GB, low_open=True, source=source, row=row,
            valid=REQUIREMENT_RULES["memory_gb"]))
        bound = None if max_slowdown is None else float(check_number(
            max_slowdown, field="max_slowdown", low=1, high=MAX_SLOWDOWN, source=source, row=row,
            valid=REQUIREMENT_RULES["max_slowdown"]))
        return cls(memory, bound, exclusive)

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], *, source: str | Path, row: int | None = None
                    ) -> "JobRequirements":
        """The requirements among a record's fields (``memory_gb``, ``max_slowdown``, ``exclusive``; absent:
        the defaults), checked by :meth:`checked`."""
        return cls.checked(data.get("memory_gb"), data.get("max_slowdown"), data.get("exclusive", False),
                           source=source, row=row)

    def as_fields(self) -> dict[str, Any]:
        """The requirements as a record's fields, under the names job files and CSVs give them."""
        return {"memory_gb": self.memory_gb, "max_slowdown": self.max_slowdown, "exclusive": self.exclusive}


@dataclass(frozen=True)
class Job:
    """One job in one scheduling round. ``batch_size`` is the global batch (all GPUs together)."""

    name: str
    application: str
    arrival: float = 0.0
    num_gpus: int = 1
    max_gpus: int | None = None
    batch_size: int | None = None
    min_batch_size: int | None = None
    max_batch_size: int | None = None
    adaptive: bool = False
    age_s: float = 0.0
    restarts: int = 0
    current_gpu_type: str | None = None
    current_num_gpus: int = 0
    current_partner: str | None = None
    pinned: bool = False
    progress: float = 0.0
    restart_cost_s: float | None = None  # this job's restart penalty for the ILP (None: the policy's default)
    # memory per GPU as planned (declared, measured or estimated), its own slowdown bound, never sharing its GPUs
    requirements: JobRequirements = JobRequirements()
    owner: str = ""  # whose job (the user name); "" everywhere: one owner (scheduler.model.owners)

    @property
    def job_type(self) -> str:
        """Key used in colocation tables: ``model@batch`` when the batch is known, else the application."""
        return f"{self.application}@{self.batch_size}" if self.batch_size else self.application

    @property
    def is_running(self) -> bool:
        return self.current_gpu_type is not None and self.current_num_gpus > 0

    def slowdown_bound(self, default: float | None) -> float | None:
        """The slowdown this job accepts in a group: its own, else the cluster-wide ``default`` (None: any)."""
        return slowdown_bound(self.requirements.max_slowdown, default)

    def with_state(self, **changes: Any) -> "Job":
        """A copy with some fields changed (the simulator uses this each round)."""
        return replace(self, **changes)


def slowdown_bound(own: float | None, default: float | None) -> float | None:
    """The slowdown a job accepts in a group: its own ``max_slowdown``, else the cluster-wide ``default`` (the
    policy's, :func:`scheduler.sim.job_state.cluster_bound`; None: any). The one place a job's bound is resolved,
    for every job record (a round's :class:`Job`, a workload's row, a served job's spec)."""
    return own if own is not None else default


FINISHING_ROUNDS = 2.0  # a running job expected to end within this many rounds keeps its placement


def finishing(remaining_s: float | None, round_s: float, group_size: int = 1, rounds: float = FINISHING_ROUNDS
              ) -> bool:
    """Whether a running job is expected to end within ``rounds`` rounds of ``round_s``: it keeps its placement
    (the policy sees it ``pinned``; the simulator and ``serve`` alike), since moving, resizing or repacking it would
    pay a restart for a gain it would barely live to see. ``remaining_s``: its remaining work over the rate it ran
    at last (None: not measured yet). A member of a group of three (``group_size``) is not held this way: the round
    ILP has no column that keeps a group of three with a pinned member (:mod:`scheduler.ilp.triples`), so pinning
    one would split the group it is meant to keep."""
    return group_size <= 2 and remaining_s is not None and 0 <= remaining_s < rounds * round_s


# column -> (parser, default); parsers raise ValueError on bad text
def _parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "y", "t"):
        return True
    if t in ("0", "false", "no", "n", "f", ""):
        return False
    raise ValueError(text)


def _parse_int(text: str) -> int:
    value = float(text)
    if not math.isfinite(value) or value != int(value):
        raise ValueError(text)
    return int(value)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _parse_str(text: str) -> str:
    return text.strip()


_COLUMNS: dict[str, tuple[Any, str]] = {
    "name": (_parse_str, f"a unique name: {NAME_RULE}"),
    "application": (_parse_str, "an application name with throughput profiles, e.g. cifar10"),
    "arrival": (_parse_float, f"seconds, a number in [0, {MAX_SECONDS:g}]"),
    "num_gpus": (_parse_int, f"an integer in [1, {MAX_GPUS}]"),
    "max_gpus": (_parse_int, f"an integer in [num_gpus, {MAX_GPUS}]"),
    "batch_size": (_parse_int, f"an integer in [1, {MAX_BATCH}]"),
    "min_batch_size": (_parse_int, f"an integer in [1, {MAX_BATCH}]"),
    "max_batch_size": (_parse_int, f"an integer in [min_batch_size, {MAX_BATCH}]"),
    "adaptive": (_parse_bool, "true/false"),
    "memory_gb": (_parse_float, REQUIREMENT_RULES["memory_gb"]),
    "age_s": (_parse_float, f"seconds, a number in [0, {MAX_SECONDS:g}]"),
    "restarts": (_parse_int, "an integer in [0, 1000000]"),
    "current_gpu_type": (_parse_str, "a GPU type name or empty"),
    "current_num_gpus": (_parse_int, f"an integer in [0, {MAX_GPUS}]"),
    "current_partner": (_parse_str, "another job's name or empty"),
    "pinned": (_parse_bool, "true/false"),
    "progress": (_parse_float, "a number in [0, 1e15]"),
    "max_slowdown": (_parse_float, REQUIREMENT_RULES["max_slowdown"]),
    "exclusive": (_parse_bool, REQUIREMENT_RULES["exclusive"]),
    "owner": (_parse_str, f"the user the job belongs to: {NAME_RULE}, or empty"),
}
_ALIASES = {"time": "arrival", "num_replicas": "num_gpus"}


# (low, high) of each numeric column (the requirements are JobRequirements'); ints where the column is one
_LIMITS: dict[str, tuple[float, float]] = {
    "arrival": (0, MAX_SECONDS), "num_gpus": (1, MAX_GPUS), "max_gpus": (1, MAX_GPUS), "batch_size": (1, MAX_BATCH),
    "min_batch_size": (1, MAX_BATCH), "max_batch_size": (1, MAX_BATCH), "age_s": (0, MAX_SECONDS),
    "restarts": (0, 1_000_000), "current_num_gpus": (0, MAX_GPUS), "progress": (0, 1e15),
}


def _check_job(job: Job, needs: Mapping[str, Any], *, source: str, row: int) -> Job:
    """``job`` checked, with its requirements (``needs``: the row's requirement fields) checked in their turn."""
    def bad(field: str, message: str) -> InputError:
        return InputError(f"row {row}: {message}", source=source, field=field, valid=_COLUMNS[field][1])

    if not job.name:
        raise bad("name", "empty name")
    if not job.application:
        raise bad("application", "empty application")
    for f, (low, high) in _LIMITS.items():
        if getattr(job, f) is not None:
            check_number(getattr(job, f), field=f, low=low, high=high, source=source, row=row, valid=_COLUMNS[f][1])
    if job.max_gpus is not None and job.max_gpus < job.num_gpus:
        raise bad("max_gpus", f"max_gpus {job.max_gpus} < num_gpus {job.num_gpus}")
    if job.min_batch_size and job.max_batch_size and job.max_batch_size < job.min_batch_size:
        raise bad("max_batch_size", f"max_batch_size {job.max_batch_size} < min_batch_size {job.min_batch_size}")
    job = replace(job, requirements=JobRequirements.from_fields(needs, source=source, row=row))
    if job.current_num_gpus > 0 and not job.current_gpu_type:
        raise bad("current_gpu_type", "current_num_gpus > 0 needs current_gpu_type")
    check_name(job.name, source=source, field="name", what=f"job name (row {row})")
    check_name(job.application, source=source, field="application", what=f"application (row {row})")
    if job.owner:
        check_name(job.owner, source=source, field="owner", what=f"owner (row {row})")
    return job


def jobs_from_rows(rows: Sequence[dict[str, str]], *, source: str = "<jobs>") -> list[Job]:
    """Build and validate jobs from CSV rows (dicts of text). Row numbers in errors count the header as 1."""
    jobs: list[Job] = []
    seen: set[str] = set()
    for i, raw in enumerate(rows):
        row = i + 2
        values: dict[str, Any] = {}
        for column, text in raw.items():
            if column is None:
                raise InputError(f"row {row}: more values than header columns", source=source, field="name",
                                 valid="one value per header column")
            key = _ALIASES.get(column.strip(), column.strip())
            if key not in _COLUMNS:
                raise InputError(f"unknown column {shown(column)}", source=source, field=column[:40],
                                 valid=", ".join(_COLUMNS))
            text = "" if text is None else str(text).strip()
            if text == "" and key not in ("adaptive", "pinned", "exclusive"):
                continue
            parser, valid = _COLUMNS[key]
            try:
                values[key] = parser(text)
            except ValueError:
                raise InputError(f"row {row}: cannot read {shown(text)}", source=source, field=key,
                                 valid=valid) from None
        for required in ("name", "application"):
            if not values.get(required):
                raise InputError(f"row {row}: missing {required}", source=source, field=required,
                                 valid=_COLUMNS[required][1])
        needs = {key: values.pop(key) for key in JobRequirements().as_fields() if key in values}
        job = _check_job(Job(**values), needs, source=source, row=row)
        if job.name in seen:
            raise InputError(f"row {row}: duplicate job name {job.name!r}", source=source, field="name",
                             valid="unique names")
        seen.add(job.name)
        jobs.append(job)
    names = {j.name for j in jobs}
    for i, job in enumerate(jobs):
        if job.current_partner and job.current_partner not in names:
            raise InputError(f"row {i + 2}: current_partner {job.current_partner!r} is not a job in the file",
                             source=source, field="current_partner", valid="another job's name or empty")
    return jobs


def load_jobs(path: str | Path) -> list[Job]:
    """Read and validate a jobs CSV (see the module docstring for the columns)."""
    import csv

    p = Path(path)
    if not p.is_file():
        raise InputError("jobs file not found", source=p, field="jobs", valid="a CSV file path")
    import io

    from common.safe_load import read_text

    with io.StringIO(read_text(p, field="jobs", what="jobs file"), newline="") as fh:
        reader = csv.DictReader(fh)
        try:
            header = reader.fieldnames or []
        except csv.Error as err:
            raise InputError(f"not a readable CSV ({err})", source=p, field="name",
                             valid="a CSV header with name,application") from None
        if not header:
            raise InputError("empty file", source=p, field="name", valid="a CSV header with name,application")
        normalized = {_ALIASES.get(h.strip(), h.strip()) for h in header}
        for required in ("name", "application"):
            if required not in normalized:
                raise InputError(f"header lacks '{required}'", source=p, field=required,
                                 valid="a CSV header with name,application")
        try:
            rows = list(reader)
        except csv.Error as err:
            raise InputError(f"not a readable CSV ({err})", source=p, field="name",
                             valid="one job per line") from None
    if not rows:
        raise InputError("no jobs (a header only)", source=p, field="name", valid="one job per line after the header")
    return jobs_from_rows(rows, source=str(p))


# Applications of public traces (Sia/Pollux names) and the model of our zoo that stands in for each, read by the
# executors (a trace's ``cifar10`` job trains ``resnet18`` on 32-pixel images) and by scheduler.formats.transfer
# (our measured ``resnet18`` pairs replace transferred ``cifar10`` ratios): application → (model, image size)
APPLICATION_MODELS: Mapping[str, tuple[str, int]] = {
    "cifar10": ("resnet18", 32),
    "imagenet": ("resnet50", 224),
}
