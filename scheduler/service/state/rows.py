"""Every row of the state database is checked when it is read; a bad one is set aside, not used.

The server wrote these rows, but anything may have changed them since (a hand edit, a recovery with
``sqlite3 .recover``, an older version, a disk error). SQLite keeps any value in any column, so each
reader here checks the *type and range* of every column it uses and returns the row, or the reason it is
not usable. :class:`~scheduler.service.state.store.StateStore` keeps the reasons (``set_aside``: table and key →
problem); the server records each once as a ``set-aside`` event, ``colocate state check`` lists them, and no
round or read-only command fails on one.

=================  ===========================================================================================
table              what a usable row is
=================  ===========================================================================================
``jobs``           a name (a text); a known state; times finite (seconds since 1970, below 10¹⁰); counters and
                   progress integers in range (step ≤ 10¹², samples ≤ 10¹⁶: the bounds of job files);
                   ``nodes``/``gpus`` JSON lists of integers in [0, 100000); ``partner`` other jobs' safe
                   names; ``gpu_type``/``group_key`` safe names (the spec is checked by the job-file validator:
                   a job whose spec fails is *failed* with the reason, see :mod:`.admission`)
``groups``         a safe key; ``jobs`` a JSON list of 1–3 jobs that exist; ``handle`` a JSON object whose
                   group document (well-formed: :class:`~scheduler.executor.group_doc.GroupDoc`) names this
                   key and those jobs, its paths a state directory's ``jobs/NAME`` and ``runs/KEY.pid``
``measurements``   application and GPU type safe names; GPU count and batch in the job files' bounds;
                   ``partner_type`` empty or one or two job types ``APP@BATCH`` joined by ``+``; a finite
                   iteration time in [10⁻⁶, 10⁸] s; a count in [1, 2⁶²]
``events``         a time, a kind and a detail of the right types
``gradients``      a job's safe name; ``grad_sqr``/``grad_var`` in the job files' bounds ([0, 10³⁰]), ``lr`` null
                   or in (0, 10⁶]; ``reports`` in [1, 2⁶²]; ``step`` a progress step; ``updated_at`` a time
``meta``           per key (:data:`META_CHECKS`): counters are integers, times finite, JSON values of the
                   right shape
=================  ===========================================================================================
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.bounds import (
    MAX_BATCH,
    MAX_EPOCH_S,
    MAX_GPUS,
    MAX_GRADIENT_STAT,
    MAX_LR,
    MAX_PROGRESS_SAMPLES,
    MAX_PROGRESS_STEPS,
    MAX_SECONDS,
    in_range,
)
from common.errors import InputError
from common.names import is_safe_name, shown
from common.untrusted import printable
from scheduler.executor.group_doc import GroupDoc
from scheduler.service.state.health import FAILURES, IN_A_ROW, LAST_FAILURE, valid_failure
from scheduler.service.state.probe_records import valid_record

STATES = ("queued", "running", "completed", "failed", "cancelled")
MIN_ITER_TIME_S = 1e-6  # no training step takes less than a microsecond
MAX_COUNT = 2**62
MAX_TEXT = 100_000
MAX_PID = 2**22  # Linux's highest pid_max  # an error or detail column (the server writes at most a few hundred characters)


class BadRow(Exception):
    """A row that is not usable: ``str(err)`` says which column and why."""


def _number(values: Mapping[str, Any], column: str, low: float, high: float, *, integer: bool = False,
            nullable: bool = False) -> None:
    value = values.get(column)
    if value is None and nullable:
        return
    if not in_range(value, low, high, integer=integer):
        kind = "an integer" if integer else "a number"
        raise BadRow(f"column '{column}': {shown(value)} is not {kind} in [{low:g}, {high:g}]")


def _name(values: Mapping[str, Any], column: str, *, nullable: bool = False) -> None:
    value = values.get(column)
    if value is None and nullable:
        return
    if not is_safe_name(value):
        raise BadRow(f"column '{column}': {shown(value)} is not a safe name")


def _text(values: Mapping[str, Any], column: str, *, nullable: bool = False) -> None:
    value = values.get(column)
    if (value is None and nullable) or (isinstance(value, str) and len(value) <= MAX_TEXT):
        return
    raise BadRow(f"column '{column}': {shown(value)} is not a text of at most {MAX_TEXT} characters")


def int_list(text: Any, column: str, high: int = MAX_GPUS) -> tuple[int, ...]:
    """A stored JSON list of integers in [0, high) (``nodes``, ``gpus``); :class:`BadRow` otherwise."""
    if text is None or text == "":
        return ()
    try:
        data = json.loads(text) if isinstance(text, str) and len(text) <= 10 * MAX_GPUS else None
    except (ValueError, RecursionError):
        data = None
    if (not isinstance(data, list) or len(data) > MAX_GPUS
            or not all(in_range(v, 0, high - 1, integer=True) for v in data)):
        raise BadRow(f"column '{column}': {shown(text)} is not a JSON list of integers in [0, {high})")
    return tuple(int(v) for v in data)


def check_job(values: Mapping[str, Any]) -> None:
    """A ``jobs`` row's columns other than ``spec`` (see the module docstring). The name is checked with the
    spec (the job-file validator): a job whose name or spec is not one ``submit`` accepts is failed, not hidden."""
    if not isinstance(values.get("name"), str) or len(values["name"]) > 1000:
        raise BadRow(f"column 'name': {shown(values.get('name'))} is not a text")
    if values.get("state") not in STATES:
        raise BadRow(f"column 'state': {shown(values.get('state'))} is not one of {', '.join(STATES)}")
    _number(values, "submitted_at", 0, MAX_EPOCH_S)
    for column in ("started_at", "finished_at"):
        _number(values, column, 0, MAX_EPOCH_S, nullable=True)
    _number(values, "cancel_requested", 0, 1, integer=True)
    for column in ("restarts", "crashes"):
        _number(values, column, 0, MAX_COUNT, integer=True)
    _number(values, "num_gpus", 0, MAX_GPUS, integer=True)
    _number(values, "batch_size", 1, MAX_BATCH, integer=True, nullable=True)
    _number(values, "step", 0, MAX_PROGRESS_STEPS, integer=True)
    _number(values, "samples", 0, MAX_PROGRESS_SAMPLES, integer=True)
    _number(values, "samples_per_s", 0, MAX_PROGRESS_SAMPLES, nullable=True)
    _number(values, "sample_step", 0, MAX_PROGRESS_STEPS, integer=True, nullable=True)
    _number(values, "sample_elapsed", 0, MAX_SECONDS, nullable=True)
    _number(values, "seq", 0, MAX_COUNT, integer=True)
    _name(values, "gpu_type", nullable=True)
    _name(values, "group_key", nullable=True)
    _text(values, "error")
    _number(values, "owner_uid", -1, 2**32 - 1, integer=True)
    owner = values.get("owner")
    if not isinstance(owner, str) or len(owner) > 256:
        raise BadRow(f"column 'owner': {shown(owner)} is not a user name")
    partner = values.get("partner")
    if partner is not None and (not isinstance(partner, str) or not all(is_safe_name(p) for p in partner.split(","))
                                or len(partner.split(",")) > 2):
        raise BadRow(f"column 'partner': {shown(partner)} is not one or two job names joined by ','")
    int_list(values.get("nodes"), "nodes")
    int_list(values.get("gpus"), "gpus")


@dataclass(frozen=True)
class GroupRecord:
    """A ``groups`` row as the server uses it: the group's document (what its supervisor runs), the handle its
    executor returned (how to find the group again after a restart), its jobs and when it was created."""

    key: str
    executor: str
    doc: GroupDoc
    handle: dict[str, Any]
    jobs: tuple[str, ...]
    created_at: float

    @property
    def gpus(self) -> set[tuple[str, int, int]]:
        """The (GPU type, node, GPU) the group holds, from its document (checked by :func:`check_group`); none
        for a document written before groups recorded their placement."""
        placement = self.doc.placement
        if placement is None:
            return set()
        return {(placement.gpu_type, n, g) for n in placement.nodes for g in placement.gpus}


def check_group(values: Mapping[str, Any], job_names: set[str]) -> GroupRecord:
    """A ``groups`` row checked (:class:`BadRow` when it is not one the server wrote)."""
    key = values.get("key")
    _name(values, "key")
    _name(values, "executor")
    _number(values, "created_at", 0, MAX_EPOCH_S)
    jobs = _json(values, "jobs", list)
    if not 1 <= len(jobs) <= 3 or not all(is_safe_name(j) for j in jobs) or len(set(jobs)) != len(jobs):
        raise BadRow(f"column 'jobs': {shown(values.get('jobs'))} is not a list of 1 to 3 job names")
    missing = [j for j in jobs if j not in job_names]
    if missing:
        raise BadRow(f"column 'jobs': names job {missing[0]!r}, which does not exist")
    handle = _json(values, "handle", dict)
    doc, started = handle.get("doc"), handle.get("handle")
    if not isinstance(doc, dict) or not isinstance(started, dict):
        raise BadRow("column 'handle': not {\"doc\": {...}, \"handle\": {...}}")
    try:
        checked = GroupDoc.from_dict(doc)
    except InputError as err:
        raise BadRow(f"column 'handle': its group document: {err}") from None
    _check_document(checked, str(key), jobs)
    if "pid" in started and not in_range(started["pid"], 2, MAX_PID, integer=True):  # never signal init or nonsense
        raise BadRow(f"column 'handle': pid {shown(started['pid'])} is not a process id")
    return GroupRecord(str(key), str(values["executor"]), checked, started, tuple(jobs), float(values["created_at"]))


def _check_document(doc: GroupDoc, key: str, jobs: list[str]) -> None:
    """The group document (well-formed: :class:`GroupDoc`) names this group and its jobs, and its paths are a
    state directory's (the server signals the pids its pid file names and reads the files of these directories;
    a state directory copied for recovery keeps pointing at the original's, which is where its groups run)."""
    if doc.key != key:
        raise BadRow("column 'handle': its group document does not describe this group")
    if doc.names != jobs:
        raise BadRow("column 'handle': its group document names other jobs than column 'jobs'")
    pid_file = Path(doc.pid_file)
    if (not all(m.path.is_absolute() and m.path.name == m.name and m.path.parent.name == "jobs" for m in doc.jobs)
            or not pid_file.is_absolute() or pid_file.name != f"{key}.pid"):
        raise BadRow("column 'handle': its group document's paths are not a state directory's jobs/NAME and "
                     "runs/KEY.pid")


def _json(values: Mapping[str, Any], column: str, kind: type) -> Any:
    text = values.get(column)
    try:
        data = json.loads(text) if isinstance(text, str) and len(text) <= 10 * MAX_TEXT else None
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, kind):
        raise BadRow(f"column '{column}': not a JSON {'list' if kind is list else 'object'}")
    return data


def is_job_type(text: Any) -> bool:
    """``APP@BATCH``: a safe application name and a batch size in range."""
    if not isinstance(text, str):
        return False
    app, at, batch = text.rpartition("@")
    return bool(at) and is_safe_name(app) and batch.isdigit() and len(batch) <= 9 and 1 <= int(batch) <= MAX_BATCH


def check_measurement(values: Mapping[str, Any]) -> None:
    """A ``measurements`` row (see the module docstring)."""
    _name(values, "application")
    _name(values, "gpu_type")
    _number(values, "num_gpus", 1, MAX_GPUS, integer=True)
    _number(values, "batch_size", 1, MAX_BATCH, integer=True)
    _number(values, "iter_time_s", MIN_ITER_TIME_S, MAX_SECONDS)
    _number(values, "count", 1, MAX_COUNT, integer=True)
    partner = values.get("partner_type")
    if partner != "" and not (isinstance(partner, str) and 1 <= len(partner.split("+")) <= 2
                              and all(is_job_type(p) for p in partner.split("+"))):
        raise BadRow(f"column 'partner_type': {shown(partner)} is not '' or APP@BATCH (two joined by '+')")


def check_gradients(values: Mapping[str, Any]) -> None:
    """A ``gradients`` row: one job's smoothed gradient statistics (:mod:`scheduler.learning.gradient_noise`)."""
    _name(values, "job")
    for column in ("grad_sqr", "grad_var"):
        _number(values, column, 0, MAX_GRADIENT_STAT)
    _number(values, "lr", 0, MAX_LR, nullable=True)
    if values.get("lr") is not None and not values["lr"] > 0:
        raise BadRow(f"column 'lr': {shown(values['lr'])} is not a number in (0, {MAX_LR:g}]")
    _number(values, "reports", 1, MAX_COUNT, integer=True)
    _number(values, "step", 0, MAX_PROGRESS_STEPS, integer=True)
    _number(values, "updated_at", 0, MAX_EPOCH_S)


def check_event(values: Mapping[str, Any]) -> None:
    _number(values, "id", 0, MAX_COUNT, integer=True)
    _number(values, "time", 0, MAX_EPOCH_S)
    _text(values, "job", nullable=True)
    _text(values, "kind")
    _text(values, "detail")


def row_key(table: str, values: Mapping[str, Any]) -> str:
    """How a row is named in a ``set-aside`` record: its primary key, shown safely."""
    if table == "measurements":
        parts = [values.get(c) for c in ("application", "gpu_type", "num_gpus", "batch_size", "partner_type")]
        return printable("/".join(str(p) for p in parts), 120)
    column = {"jobs": "name", "groups": "key", "events": "id", "meta": "key", "gradients": "job"}[table]
    value = values.get(column)
    return value if isinstance(value, str) and is_safe_name(value) else shown(value)


# -- meta ------------------------------------------------------------------------------------------------
def _counter(text: str) -> Any:
    value = int(text) if text.strip().isdigit() and len(text.strip()) <= 18 else None
    if value is None:
        raise BadRow(f"{shown(text)} is not a counter (an integer >= 0)")
    return value


def _seconds(text: str, high: float, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= high:
        raise BadRow(f"{shown(text)} is not {what}")
    return value


def _time(text: str) -> Any:
    return _seconds(text, MAX_EPOCH_S, "a time (seconds since 1970)")


def _duration(text: str) -> Any:
    return _seconds(text, MAX_SECONDS, "a duration in seconds")


def _json_value(kind: type, item: Callable[[Any, Any], bool]) -> Callable[[str], Any]:
    def check(text: str) -> Any:
        data: Any
        try:
            data = json.loads(text) if len(text) <= 10 * 2**20 else None
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, kind):
            raise BadRow(f"not a JSON {'list' if kind is list else 'object'}")
        pairs = list(data.items()) if isinstance(data, dict) else list(enumerate(data)) if isinstance(data, list) else []
        bad = next((k for k, v in pairs if not item(k, v)), None)
        if bad is not None:
            raise BadRow(f"entry {shown(bad)} is malformed")
        return data
    return check


def _startup(key: Any, value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2 and in_range(value[0], 0, MAX_SECONDS)
            and in_range(value[1], 1, MAX_COUNT, integer=True))


def _reason(key: Any, value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("code"), str) and isinstance(value.get("text"), str)


def _memory(key: Any, value: Any) -> bool:
    """A job's out-of-memory record (:mod:`.memory`): numbers in range, None where unknown."""
    if not is_safe_name(key) or not isinstance(value, dict):
        return False
    gb = [value.get(k) for k in ("floor_gb", "limit_gb", "reached_gb")]
    return (all(v is None or in_range(v, 0, 1e7) for v in gb) and in_range(value.get("batch"), 1, MAX_BATCH, integer=True)
            and is_safe_name(value.get("gpu_type")) and in_range(value.get("ooms"), 1, MAX_COUNT, integer=True)
            and in_range(value.get("at", 0), 0, MAX_EPOCH_S))


def _solo(key: Any, value: Any) -> bool:
    """The solo time a running member is judged by (:func:`scheduler.service.contract.solo_estimates`)."""
    return (is_safe_name(key) and isinstance(value, list) and len(value) == 2 and in_range(value[0], 1e-9, 1e6)
            and value[1] in ("measured", "profile", "prior"))


def _gpus(key: Any, value: Any) -> bool:
    return is_safe_name(key) and in_range(value, 1, MAX_GPUS, integer=True)


# meta key -> the check of its text (returns the value the readers use); keys not listed are plain text
META_CHECKS: dict[str, Callable[[str], Any]] = {
    "rounds": _counter, "groups": _counter, "server_pid": _counter, "heartbeat": _time, "round_s": _duration,
    "startup_s": _json_value(dict, _startup), "waiting": _json_value(dict, _reason),
    "cluster": _json_value(dict, _gpus), "instance": lambda text: _safe_text(text),
    "probes": lambda text: _records(text),
    "memory": _json_value(dict, _memory), "solo_estimates": _json_value(dict, _solo),
    FAILURES: _counter, IN_A_ROW: _counter, LAST_FAILURE: _json_value(dict, valid_failure),
}


class Partly(BadRow):
    """A meta value usable in part: ``value`` is what is left once the bad entries are set aside."""

    def __init__(self, problem: str, value: Any) -> None:
        super().__init__(problem)
        self.value = value


def _records(text: str) -> Any:
    """The probe records: a list; a malformed record is set aside on its own, the others are kept."""
    records = _json_value(list, lambda _, record: True)(text)
    good = [r for r in records if valid_record(r)]
    if len(good) < len(records):
        bad = next(i for i, r in enumerate(records) if not valid_record(r))
        raise Partly(f"{len(records) - len(good)} malformed probe record(s), the first at index {bad}; "
                     "the others are kept", good)
    return records


def _safe_text(text: str) -> str:
    if not is_safe_name(text):
        raise BadRow(f"{shown(text)} is not a safe name")
    return text


def check_meta(key: str, value: Any) -> Any:
    """The value of meta ``key`` as its readers use it; :class:`BadRow` when it is not one (:class:`Partly`
    when part of it is usable)."""
    if not isinstance(value, str):
        raise BadRow(f"{shown(value)} is not a text")
    check = META_CHECKS.get(key)
    return check(value) if check is not None else value
