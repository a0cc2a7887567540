"""What a job's directory holds, read as untrusted input: its progress, its exit record, its log's last line.

A running job owns its directory (``colocate serve``: ``STATE/jobs/NAME/``; ``colocate launch``: its log
folder) and may write anything there. The server reads these files every round, so each one is read by
:func:`common.untrusted.read_regular` (a regular file, not a link; at most :data:`MAX_RECORD_BYTES`; within a
deadline; never waiting on a pipe) and parsed by :func:`common.safe_load.parse_json` (nesting, duplicate keys,
NaN), then checked field by field:

==============================  ================================================================================
progress (``progress.json``)    a JSON object; ``step`` and ``restored_step`` integers in [0, 10¹²] (a step
                                trains at least one sample: the samples bound of a job file), ``restored_step``
                                ≤ ``step``; ``samples`` an integer in [0, 10¹⁶] (10⁹ steps × a batch of 10⁷);
                                ``elapsed_s`` and ``iter_time_s`` numbers in [0, 10⁸]; ``samples_per_s`` in
                                [0, 10¹⁶]; ``steps`` null or an integer in [0, 10⁹]; ``state`` null, "running",
                                "finished" or "stopped"; optional gradient statistics (absent until the job
                                has an estimate): ``grad_sqr`` (|G|², the true gradient's squared norm) and
                                ``grad_var`` (tr Σ, the per-example gradient covariance's trace) numbers in
                                [0, 10³⁰], ``lr`` (the learning rate in use) a number in (0, 10⁶]. Other keys
                                are allowed and ignored.
exit record (``exit.json``)     written by the group's supervisor (the job could overwrite it): ``returncode``
                                null or an integer in [-255, 255], ``stop_requested`` a boolean, ``last_line`` a
                                string of at most 1,000 characters, ``generation`` null or a string
out-of-memory record            written by a job that ran out of GPU memory (the built-in trainer; a command
(``oom.json``)                  may): ``reached_bytes`` and ``limit_bytes`` null or numbers in [0, 10¹⁵] (what it
                                allocated when it failed, its context not counted, and the limit it ran
                                under, its context counted), ``local_batch``
                                null or an integer in [1, 10⁷], ``message`` a string of at most 1,000 characters
==============================  ================================================================================

A file that fails is a *problem* naming the file and what is wrong (``progress.json: is a named pipe (not a
regular file)``); the server records it against the job as misbehaviour (:mod:`scheduler.service.server`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.bounds import (
    MAX_BATCH,
    MAX_GRADIENT_STAT,
    MAX_LR,
    MAX_PROGRESS_SAMPLES,
    MAX_PROGRESS_STEPS,
    MAX_SECONDS,
    MAX_STEPS,
    in_range,
)
from common.errors import InputError
from common.names import shown
from common.safe_load import parse_json
from common.untrusted import UntrustedFile, read_regular

MAX_RECORD_BYTES = 64 * 1024  # a progress or exit record is a few hundred bytes
LOG_TAIL_BYTES = 8192  # how much of a log's end is read for its last line
PROGRESS_STATES = ("running", "finished", "stopped")
MAX_LAST_LINE = 1000
# key -> (low, high, integer)
_PROGRESS_NUMBERS: dict[str, tuple[float, float, bool]] = {
    "step": (0, MAX_PROGRESS_STEPS, True), "restored_step": (0, MAX_PROGRESS_STEPS, True),
    "samples": (0, MAX_PROGRESS_SAMPLES, True), "elapsed_s": (0, MAX_SECONDS, False),
    "iter_time_s": (0, MAX_SECONDS, False), "samples_per_s": (0, MAX_PROGRESS_SAMPLES, False),
    "steps": (0, MAX_STEPS, True),
}
# the gradient statistics a job may report (serve's live goodput: scheduler.learning.gradient_noise); absent → None
_GRADIENT_NUMBERS: dict[str, tuple[float, float]] = {
    "grad_sqr": (0, MAX_GRADIENT_STAT), "grad_var": (0, MAX_GRADIENT_STAT), "lr": (0, MAX_LR),
}


class BadRecord(Exception):
    """A record a job wrote is not one we use: ``str(err)`` names the file and the problem."""


def check_progress(data: Any, name: str = "progress.json") -> dict[str, Any]:
    """The progress record ``data`` with its numbers checked (see the module docstring); :class:`BadRecord`
    otherwise. Missing numbers read as 0 (``step``, ``samples``, ``restored_step``, ``elapsed_s``) or None."""
    if not isinstance(data, dict):
        raise BadRecord(f"{name}: is not a JSON object")
    out = dict(data)
    for key, (low, high, integer) in _PROGRESS_NUMBERS.items():
        value = data.get(key)
        if value is None:
            out[key] = 0 if key in ("step", "samples", "restored_step", "elapsed_s") else None
            continue
        if not in_range(value, low, high, integer=integer):
            kind = "an integer" if integer else "a number"
            raise BadRecord(f"{name}: field '{key}': {shown(value)} is not {kind} in [{low:g}, {high:g}]")
        out[key] = int(value) if integer else float(value)
    for key, (low, high) in _GRADIENT_NUMBERS.items():
        value = data.get(key)
        if value is None:
            out[key] = None
            continue
        positive = key == "lr"  # a learning rate of 0 trains nothing: not one to report
        if not in_range(value, low, high) or (positive and not value > 0):
            bounds = f"({low:g}, {high:g}]" if positive else f"[{low:g}, {high:g}]"
            raise BadRecord(f"{name}: field '{key}': {shown(value)} is not a number in {bounds}")
        out[key] = float(value)
    if out["restored_step"] > out["step"]:
        raise BadRecord(f"{name}: field 'restored_step': {out['restored_step']} is more than step {out['step']}")
    if data.get("state") is not None and data.get("state") not in PROGRESS_STATES:
        raise BadRecord(f"{name}: field 'state': {shown(data.get('state'))} is not one of "
                        f"{', '.join(PROGRESS_STATES)}")
    return out


def check_exit(data: Any, name: str = "exit.json") -> dict[str, Any]:
    """An exit record with its fields checked; :class:`BadRecord` otherwise."""
    if not isinstance(data, dict):
        raise BadRecord(f"{name}: is not a JSON object")
    code = data.get("returncode")
    if code is not None and not in_range(code, -255, 255, integer=True):
        raise BadRecord(f"{name}: field 'returncode': {shown(code)} is not an exit status in [-255, 255]")
    if not isinstance(data.get("stop_requested", False), bool):
        raise BadRecord(f"{name}: field 'stop_requested': {shown(data.get('stop_requested'))} is not a boolean")
    line = data.get("last_line", "")
    if not isinstance(line, str) or len(line) > MAX_LAST_LINE:
        raise BadRecord(f"{name}: field 'last_line': not a string of at most {MAX_LAST_LINE} characters")
    generation = data.get("generation")
    if generation is not None and (not isinstance(generation, str) or len(generation) > 100):
        raise BadRecord(f"{name}: field 'generation': {shown(generation)} is not a group key")
    return {**data, "returncode": None if code is None else int(code),
            "stop_requested": bool(data.get("stop_requested", False)), "last_line": line}


MAX_MEMORY_BYTES = 1e15  # a petabyte: no device has that much


def check_oom(data: Any, name: str = "oom.json") -> dict[str, Any]:
    """An out-of-memory record with its fields checked; :class:`BadRecord` otherwise."""
    if not isinstance(data, dict):
        raise BadRecord(f"{name}: is not a JSON object")
    out: dict[str, Any] = {}
    for key in ("reached_bytes", "limit_bytes"):
        value = data.get(key)
        if value is not None and not in_range(value, 0, MAX_MEMORY_BYTES):
            raise BadRecord(f"{name}: field '{key}': {shown(value)} is not a number of bytes in [0, 1e15]")
        out[key] = None if value is None else float(value)
    batch = data.get("local_batch")
    if batch is not None and not in_range(batch, 1, MAX_BATCH, integer=True):
        raise BadRecord(f"{name}: field 'local_batch': {shown(batch)} is not an integer in [1, {MAX_BATCH}]")
    out["local_batch"] = None if batch is None else int(batch)
    message = data.get("message", "")
    if not isinstance(message, str) or len(message) > MAX_LAST_LINE:
        raise BadRecord(f"{name}: field 'message': not a string of at most {MAX_LAST_LINE} characters")
    out["message"] = message
    return out


def read_record(directory: str | Path, name: str, check: Callable[[Any, str], dict[str, Any]]) -> dict[str, Any] | None:
    """The checked record ``directory/name``, or None when there is none; :class:`BadRecord` when it is bad."""
    try:
        data = read_regular(directory, name, max_bytes=MAX_RECORD_BYTES)
    except UntrustedFile as err:
        raise BadRecord(f"{name}: {err}") from None
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRecord(f"{name}: is not UTF-8 text") from None
    try:
        return check(parse_json(text, source=name), name)
    except InputError as err:
        raise BadRecord(f"{name}: {err.detail}") from None


def job_records(directory: str | Path, progress_file: str, exit_file: str, oom_file: str = "oom.json"
                ) -> dict[str, Any]:
    """``{"progress", "exit", "oom", "problem"}`` of one job: each record checked, or None with the problem named."""
    out: dict[str, Any] = {"progress": None, "exit": None, "oom": None, "problem": None}
    problems = []
    for key, name, check in (("progress", progress_file, check_progress), ("exit", exit_file, check_exit),
                             ("oom", oom_file, check_oom)):
        try:
            out[key] = read_record(directory, name, check)
        except BadRecord as err:
            problems.append(str(err))
    out["problem"] = "; ".join(problems) or None
    return out


def checked_files(files: Any) -> dict[str, Any]:
    """A job's records as an executor reported them (a Ray actor answers with plain dicts), checked again
    here: whatever fails is dropped and named in ``problem``."""
    if not isinstance(files, dict):
        return {"progress": None, "exit": None, "problem": "the executor reported no records for it"}
    out: dict[str, Any] = {"progress": None, "exit": None, "oom": None}
    problems = [files["problem"]] if isinstance(files.get("problem"), str) and files["problem"] else []
    for key, check in (("progress", check_progress), ("exit", check_exit), ("oom", check_oom)):
        if files.get(key) is None:
            continue
        try:
            out[key] = check(files[key], f"{key} record")
        except BadRecord as err:
            problems.append(str(err))
    out["problem"] = "; ".join(problems)[:1000] or None
    return out


def read_progress(path: str | Path) -> dict[str, Any] | None:
    """The last progress a job wrote at ``path`` (checked), or None when there is none or it is bad."""
    p = Path(path)
    try:
        return read_record(p.parent, p.name, check_progress)
    except BadRecord:
        return None


def last_line(path: str | Path, limit: int = 300) -> str:
    """The last non-blank line of a log (its last :data:`LOG_TAIL_BYTES` read), or why it cannot be read."""
    p = Path(path)
    try:
        data = read_regular(p.parent, p.name, max_bytes=LOG_TAIL_BYTES, tail=True)
    except UntrustedFile as err:
        return f"({p.name} {err})"
    if not data:
        return ""
    lines = [ln for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else ""
