"""Writing files safely: atomic replacement and file-name-safe labels, for every layer.

:func:`atomic_write` writes to a temporary file in the target's folder and ``os.replace``-s it over the
target, so a reader (or a resumed campaign) sees the old file or the new one, never half of one. By default
it also ``fsync``-s the data before the rename, so a power loss cannot leave an empty file under the final
name; ``durable=False`` skips that for files rewritten every fraction of a second whose loss costs nothing
(progress snapshots). Imports nothing of the project.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | Path, write: Callable[[str], object], *, durable: bool = True) -> Path:
    """Call ``write(temp_path)`` and move the result over ``path`` in one step; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(temp)
        if durable:
            with open(temp, "rb") as stream:
                os.fsync(stream.fileno())
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    return path


def atomic_write_text(path: str | Path, text: str, *, durable: bool = True) -> Path:
    """Replace ``path`` with ``text`` atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda temp: Path(temp).write_text(text), durable=durable)


def atomic_write_json(data: Any, path: str | Path, *, durable: bool = True) -> Path:
    """Replace ``path`` with ``data`` as indented, key-sorted JSON (values JSON cannot hold become strings)."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
    return atomic_write_text(path, text, durable=durable)


def safe_name(text: str, limit: int | None = 60, *, keep: str = "", empty: str = "job") -> str:
    """A file-name-safe version of a label: runs of other characters become ``-``.

    Letters, digits, ``_``, ``.``, ``-`` and the characters in ``keep`` stay (matrix files keep the ``@``
    and ``+`` of job types); leading and trailing ``-``/``.`` go; ``empty`` stands in for nothing left;
    at most ``limit`` characters (None: no limit).
    """
    pattern = "[^A-Za-z0-9_.\\-" + re.escape(keep) + "]+"
    name = re.sub(pattern, "-", text).strip("-.") or empty
    return name if limit is None else name[:limit]


def atomic_write_table(frame: Any, path: str | Path) -> Path:
    """Write a pandas DataFrame as Parquet at ``path`` plus a CSV copy beside it, each atomically."""
    path = Path(path)
    atomic_write(path, lambda temp: frame.to_parquet(temp, index=False))
    atomic_write(path.with_suffix(".csv"), lambda temp: frame.to_csv(temp, index=False))
    return path
