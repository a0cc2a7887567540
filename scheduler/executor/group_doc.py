"""The group document: what ``colocate serve`` hands the supervisor of one GPU group, as one typed value.

The server writes it (:func:`scheduler.service.groups.group_document`; a probe, :mod:`scheduler.service.probes`),
keeps it in its state database, and each backend writes it beside the group's pid file as ``runs/KEY.json``
(:meth:`GroupDoc.write`) for :mod:`scheduler.executor.supervise` to run; the supervisor, the backends and the
server's views read it back through :meth:`GroupDoc.read` / :meth:`GroupDoc.from_dict`, and nothing else reads
its JSON. A damaged document (a missing or unknown key, a value of the wrong type or out of range) is refused
with one :class:`~common.errors.InputError` naming the file and the field.

On disk (JSON, the keys every server since the first one wrote; the optional ones only when set)::

    {"key", "sharing", "gpu", "grace_s", "pid_file", "placement"?, "sharing_why"?, "cuda_visible_devices"?,
     "sharing_ready"?, "pid_record"?,
     "jobs": [{"name", "dir", "env", "argv", "memory_limit_bytes", "owner"?}]}

Standard library and :mod:`common` only: the supervisor (``python -m scheduler.executor.supervise``) and the light
commands (``colocate jobs``) import it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from common.bounds import MAX_GPUS, MAX_SECONDS, in_range
from common.errors import InputError
from common.names import NAME_RULE, is_safe_name, shown
from common.owners import Owner
from common.safe_load import load_json, parse_json

MAX_MEMBERS = 64  # a group runs one job, a pair or three; a probe one
MAX_LIMIT_BYTES = 10**15  # a GPU-memory limit per GPU (a petabyte: no GPU has one)
MAX_TEXT = 100_000  # a path, an argument, an environment value, a reason
MAX_ID = 2**32 - 1  # a uid or gid


class _Fields:
    """The keys of one JSON object of the document, taken one at a time and checked; an error names the file and
    the field by its path in the document (``jobs[1].argv``)."""

    def __init__(self, data: Any, source: str | Path | None, where: str, known: tuple[str, ...]) -> None:
        self.source, self.where = source, where
        if not isinstance(data, dict):
            self.fail("", f"{shown(data)} is not a JSON object", "{...}")
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            self.fail(unknown[0], "is not a key of a group document", ", ".join(known))
        self.data: dict[str, Any] = data

    def fail(self, key: str, problem: str, valid: str) -> NoReturn:
        name = f"{self.where}.{key}" if self.where and key else self.where or key
        raise InputError(problem, source=self.source, field=name or None, valid=valid)

    def get(self, key: str, required: bool) -> Any:
        if key not in self.data and required:
            self.fail(key, "missing", "every group document has it")
        return self.data.get(key)

    def text(self, key: str, *, required: bool = True, default: str = "", safe: bool = False) -> str:
        value = self.get(key, required)
        if value is None and not required:
            return default
        if safe and not is_safe_name(value):
            self.fail(key, f"{shown(value)} is not a safe name", NAME_RULE)
        if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
            self.fail(key, f"{shown(value)} is not a text", f"a text of 1 to {MAX_TEXT} characters")
        return str(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(key, f"{shown(value)} is not true or false", "true or false")
        return bool(value)

    def number(self, key: str, low: float, high: float, *, integer: bool = False, default: Any = None,
               required: bool = True) -> Any:
        value = self.get(key, required)
        if value is None and not required:
            return default
        if not in_range(value, low, high, integer=integer):
            kind = "an integer" if integer else "a number"
            self.fail(key, f"{shown(value)} is out of range", f"{kind} in [{low:g}, {high:g}]")
        return int(value) if integer else float(value)

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.get(key, True)
        if (not isinstance(value, list) or not value or len(value) > 10_000
                or not all(isinstance(v, str) and len(v) <= MAX_TEXT for v in value)):
            self.fail(key, f"{shown(value)} is not a list of texts", "a non-empty JSON list of texts")
        return tuple(value)

    def indices(self, key: str) -> tuple[int, ...]:
        value = self.get(key, True)
        if (not isinstance(value, list) or not 1 <= len(value) <= MAX_GPUS
                or not all(in_range(v, 0, MAX_GPUS - 1, integer=True) for v in value)):
            self.fail(key, f"{shown(value)} is not a list of indices", f"1 to {MAX_GPUS} integers in [0, {MAX_GPUS})")
        return tuple(int(v) for v in value)


@dataclass(frozen=True)
class Placement:
    """The GPUs ``colocate serve`` gave the group: its server's record of what the group holds (not read by the
    supervisor); absent in documents written before groups recorded it."""

    gpu_type: str
    """The GPU type (a safe name, a type of the cluster file)."""
    nodes: tuple[int, ...]
    """The nodes of that type the group runs on (indices)."""
    gpus: tuple[int, ...]
    """The GPUs it holds on each of those nodes (indices)."""

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_type": self.gpu_type, "nodes": list(self.nodes), "gpus": list(self.gpus)}

    @classmethod
    def from_dict(cls, data: Any, source: str | Path | None = None) -> "Placement":
        fields = _Fields(data, source, "placement", ("gpu_type", "nodes", "gpus"))
        return cls(fields.text("gpu_type", safe=True), fields.indices("nodes"), fields.indices("gpus"))


@dataclass(frozen=True)
class GroupMember:
    """One job of the group, as its supervisor starts it."""

    name: str
    """The job's name (a safe name; a probe's: ``probe-KEY``)."""
    dir: str
    """The job's directory (absolute): its log, progress, checkpoint, exit and out-of-memory records."""
    argv: tuple[str, ...]
    """The command line the supervisor runs (under the job's reaper, :mod:`common.contain`)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """What the job's environment adds to the supervisor's (``COLOCATE_*``: the checkpoint-restore contract)."""
    memory_limit_bytes: int | None = None
    """Its hard GPU-memory limit per GPU, in bytes (a member of a group); None: a job alone, or a probe."""
    owner: Owner | None = None
    """The user it runs as (``serve --users multi`` as root); None: the supervisor's own."""

    @property
    def path(self) -> Path:
        return Path(self.dir)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dir": self.dir, "env": dict(self.env), "memory_limit_bytes": self.memory_limit_bytes,
                "argv": list(self.argv), **({"owner": self.owner.to_dict()} if self.owner is not None else {})}

    @classmethod
    def from_dict(cls, data: Any, source: str | Path | None = None, where: str = "jobs[0]") -> "GroupMember":
        fields = _Fields(data, source, where, ("name", "dir", "env", "argv", "memory_limit_bytes", "owner"))
        env = fields.get("env", True)
        if (not isinstance(env, dict) or len(env) > 10_000
                or not all(isinstance(v, str) and len(v) <= MAX_TEXT for v in env.values())):
            fields.fail("env", f"{shown(env)} is not an environment", "a JSON object of texts")
        owner = fields.get("owner", False)
        return cls(fields.text("name", safe=True), fields.text("dir"), fields.texts("argv"), dict(env),
                   fields.number("memory_limit_bytes", 1, MAX_LIMIT_BYTES, integer=True, required=False),
                   _owner(owner, source, f"{where}.owner") if owner is not None else None)


def _owner(data: Any, source: str | Path | None, where: str) -> Owner:
    fields = _Fields(data, source, where, ("uid", "gid", "name", "groups", "home"))
    groups = fields.get("groups", True)
    if not isinstance(groups, list) or len(groups) > 65_536 or not all(in_range(g, 0, MAX_ID, integer=True)
                                                                      for g in groups):
        fields.fail("groups", f"{shown(groups)} is not a list of group ids", f"integers in [0, {MAX_ID}]")
    return Owner(fields.number("uid", 0, MAX_ID, integer=True), fields.number("gid", 0, MAX_ID, integer=True),
                 fields.text("name"), tuple(int(g) for g in groups), fields.text("home", required=False, default="/"))


@dataclass(frozen=True)
class GroupDoc:
    """One GPU group as its supervisor runs it (:func:`scheduler.executor.supervise.supervise`)."""

    key: str
    """The group's key (``g00001``; a probe's ``p0001``): unique per start, the jobs' generation."""
    sharing: str
    """How its jobs share the GPUs (a registered sharing mode: ``timeslice``, ``mps``, ``none``)."""
    pid_file: str
    """Where the supervisor records its pid and its jobs' (absolute; ``runs/KEY.pid``); the document lies beside
    it as ``KEY.json`` (:attr:`group_file`)."""
    jobs: tuple[GroupMember, ...]
    """Its jobs, in start order (1 to :data:`MAX_MEMBERS`)."""
    gpu: bool = False
    """Whether its jobs run on GPUs (False: on CPU, no ``CUDA_VISIBLE_DEVICES``)."""
    grace_s: float = 30.0
    """Seconds a stopped job has after SIGTERM (to checkpoint) before it is killed."""
    placement: Placement | None = None
    """The GPUs the server gave it (None in documents older than this record)."""
    sharing_why: str = ""
    """Why it does not share as ``serve --sharing`` says (jobs of several owners); shown by ``colocate jobs``."""
    cuda_visible_devices: str | None = None
    """The GPUs its jobs see, set by the backend that starts it (None: the supervisor's own, or CPU)."""
    sharing_ready: bool = False
    """True when whoever started the supervisor set the sharing mode up already (a Slurm batch script)."""
    pid_record: bool = True
    """False: no pid file (a Slurm job run as its owner, who cannot write the server's ``runs/``)."""

    @property
    def group_file(self) -> Path:
        """Where the backends write this document for the supervisor: ``runs/KEY.json``."""
        return Path(self.pid_file).with_suffix(".json")

    @property
    def names(self) -> list[str]:
        return [job.name for job in self.jobs]

    def member(self, name: str) -> GroupMember:
        return next(job for job in self.jobs if job.name == name)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"key": self.key, "sharing": self.sharing, "gpu": self.gpu, "grace_s": self.grace_s,
                                "pid_file": self.pid_file}
        if self.placement is not None:
            data["placement"] = self.placement.to_dict()
        data["jobs"] = [job.to_dict() for job in self.jobs]
        if self.sharing_why:
            data["sharing_why"] = self.sharing_why
        if self.cuda_visible_devices is not None:
            data["cuda_visible_devices"] = self.cuda_visible_devices
        if self.sharing_ready:
            data["sharing_ready"] = True
        if not self.pid_record:
            data["pid_record"] = False
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any, source: str | Path | None = None) -> "GroupDoc":
        """The document of ``data`` (a parsed JSON object), checked; ``source`` names it in an error."""
        fields = _Fields(data, source, "", ("key", "sharing", "gpu", "grace_s", "pid_file", "placement", "jobs",
                                            "sharing_why", "cuda_visible_devices", "sharing_ready", "pid_record"))
        jobs = fields.get("jobs", True)
        if not isinstance(jobs, list) or not 1 <= len(jobs) <= MAX_MEMBERS:
            fields.fail("jobs", f"{shown(jobs)} is not a list of jobs", f"a JSON list of 1 to {MAX_MEMBERS} jobs")
        members = tuple(GroupMember.from_dict(job, source, f"jobs[{i}]") for i, job in enumerate(jobs))
        if len({m.name for m in members}) != len(members):
            fields.fail("jobs", "names a job twice", "each job once")
        placement = fields.get("placement", False)
        devices = fields.get("cuda_visible_devices", False)
        if devices is not None and (not isinstance(devices, str) or len(devices) > MAX_TEXT):
            fields.fail("cuda_visible_devices", f"{shown(devices)} is not a text", "GPU indices joined by ',', or null")
        return cls(fields.text("key", safe=True), fields.text("sharing", safe=True), fields.text("pid_file"), members,
                   fields.flag("gpu", False), fields.number("grace_s", 0, MAX_SECONDS, required=False, default=30.0),
                   Placement.from_dict(placement, source) if placement is not None else None,
                   fields.text("sharing_why", required=False), devices, fields.flag("sharing_ready", False),
                   fields.flag("pid_record", True))

    @classmethod
    def from_json(cls, text: str, source: str | Path | None = None) -> "GroupDoc":
        return cls.from_dict(parse_json(text, source=source or "group document"), source)

    @classmethod
    def read(cls, path: str | Path) -> "GroupDoc":
        """The document in ``path`` (``runs/KEY.json``), checked; one :class:`InputError` naming the file when it
        is unreadable or damaged."""
        return cls.from_dict(load_json(path, what="group document"), path)

    def write(self, path: str | Path | None = None) -> Path:
        """Write the document to ``path`` (default :attr:`group_file`) atomically, 0600 (its jobs' commands and
        environments are theirs): a fresh temporary file (``O_EXCL``: nothing left there is followed), renamed
        over whatever is there."""
        target = Path(path) if path is not None else self.group_file
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(self.to_json())
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        return target
