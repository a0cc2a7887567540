"""Writing files safely: atomic replacement, for every layer (safe file names: :mod:`common.names`).

:func:`atomic_write` writes to a temporary file in the target's folder and ``os.replace``-s it over the
target, so a reader (or a resumed campaign) sees the old file or the new one, never half of one. By default
it also ``fsync``-s the data before the rename, so a power loss cannot leave an empty file under the final
name; ``durable=False`` skips that for files rewritten every fraction of a second whose loss costs nothing
(progress snapshots). Files come out mode 0644 (:data:`RESULT_FILE_MODE`; ``mkstemp`` would leave 0600), so
results are readable by the group that shares them. Imports nothing of the project.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULT_FILE_MODE = 0o644


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
        os.chmod(temp, RESULT_FILE_MODE)
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


def atomic_write_table(frame: Any, path: str | Path) -> Path:
    """Write a pandas DataFrame as Parquet at ``path`` plus a CSV copy beside it, each atomically."""
    path = Path(path)
    atomic_write(path, lambda temp: frame.to_parquet(temp, index=False))
    atomic_write(path.with_suffix(".csv"), lambda temp: frame.to_csv(temp, index=False))
    return path
