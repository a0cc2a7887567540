"""The probe records in the state database, read without the probe machinery (``colocate jobs --json`` and
``colocate learned`` read them; neither may import the executor or numpy)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

META_KEY = "probes"  # the state's meta key holding the probe records (a JSON list)

_RECORD_KEYS = {"key": str, "gpu_type": str, "type": str, "partner_type": str, "state": str, "started_at": float}


def load_records(text: str | None) -> list[dict[str, Any]]:
    """The stored probe records; a damaged value (written behind the server's back) reads as no records."""
    try:
        records = json.loads(text or "[]")
    except ValueError:
        return []
    if not isinstance(records, list):
        return []
    return [r for r in records if isinstance(r, dict) and all(isinstance(r.get(k), (t, int) if t is float else t)
                                                              for k, t in _RECORD_KEYS.items())]


def probe_samples(records: Sequence[Mapping[str, Any]]) -> dict[tuple[Any, ...], int]:
    """Samples probes added per measurement key (application, GPU type, GPUs, batch, partner type)."""
    out: dict[tuple[Any, ...], int] = {}
    for r in records:
        wrote = r.get("wrote")
        for key in wrote if isinstance(wrote, list) else ():
            if isinstance(key, list) and len(key) == 5:
                out[tuple(key)] = out.get(tuple(key), 0) + 1
    return out
