"""The probe records in the state database, read without the probe machinery (``colocate jobs --json`` and
``colocate learned`` read them; neither may import the executors or numpy: the group document's module,
:mod:`scheduler.executor.group_doc`, is the standard library's and :mod:`common`'s only)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common.errors import InputError
from common.safe_load import stored_json
from scheduler.executor.group_doc import GroupDoc

META_KEY = "probes"  # the state's meta key holding the probe records (a JSON list)

_RECORD_KEYS = {"key": str, "gpu_type": str, "type": str, "partner_type": str, "state": str, "started_at": float}
_MAX_TIME = 1e10


def valid_record(record: Any) -> bool:
    """Whether ``record`` is a probe record the server and ``colocate learned`` can use: its keys of the right
    types, finite times, and (while running) the group document and handle the server polls."""
    if not isinstance(record, dict) or not all(isinstance(record.get(k), (t, int) if t is float else t)
                                               and not isinstance(record.get(k), bool) for k, t in _RECORD_KEYS.items()):
        return False
    if not 0 <= record["started_at"] <= _MAX_TIME or not str(record["key"])[1:].isdigit():
        return False
    gpu_s = record.get("gpu_s")
    if gpu_s is not None and (isinstance(gpu_s, bool) or not isinstance(gpu_s, (int, float)) or not 0 <= gpu_s <= _MAX_TIME):
        return False
    if record["state"] != "running":
        return True
    return (_one_job_doc(record.get("doc")) and isinstance(record.get("handle"), dict)
            and all(isinstance(record.get(k), int) and not isinstance(record.get(k), bool) for k in ("node", "gpu"))
            and isinstance(record.get("members"), list) and all(
                isinstance(m, list) and len(m) == 3 and isinstance(m[0], str) and isinstance(m[1], str)
                and isinstance(m[2], int) for m in record["members"]))


def _one_job_doc(doc: Any) -> bool:
    """Whether ``doc`` is a well-formed group document of one job (:class:`GroupDoc`): what a probe runs."""
    try:
        return len(GroupDoc.from_dict(doc).jobs) == 1
    except InputError:
        return False


def load_records(text: str | None) -> list[dict[str, Any]]:
    """The stored probe records; a damaged record (written behind the server's back) is left out (the state
    database's reader records it as set aside: :mod:`scheduler.service.state.rows`)."""
    return [r for r in stored_json(text, list) if valid_record(r)]


def probe_samples(records: Sequence[Mapping[str, Any]]) -> dict[tuple[Any, ...], int]:
    """Samples probes added per measurement key (application, GPU type, GPUs, batch, partner type)."""
    out: dict[tuple[Any, ...], int] = {}
    for r in records:
        wrote = r.get("wrote")
        for key in wrote if isinstance(wrote, list) else ():
            if isinstance(key, list) and len(key) == 5:
                out[tuple(key)] = out.get(tuple(key), 0) + 1
    return out
