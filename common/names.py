"""One strict pattern for every name that reaches a file, a path, a script or a manifest.

Job names, GPU type names, application names and campaign names end up in file names (logs, progress
files, manifests, results directories), in ``#SBATCH`` lines and comments of emitted scripts and in pod
names. A newline there turns a comment into a command, a ``/`` or ``..`` leaves the output directory, and
two names that only differ in characters a sanitiser drops would share one file. So such names are checked
*where they are read* against :data:`NAME_PATTERN` — ASCII letters, digits, ``.``, ``_`` and ``-``,
starting with a letter or digit, at most :data:`NAME_MAX` characters — and refused with a one-line
:class:`~common.errors.InputError` otherwise. Distinct valid names are distinct file names.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from common.errors import InputError

NAME_MAX = 100
NAME_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{NAME_MAX - 1}}}")
NAME_RULE = f"1-{NAME_MAX} ASCII letters, digits, '.', '_' or '-', starting with a letter or digit"
_SHOWN = 60


def shown(value: Any, limit: int = _SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages that echo user input. An integer of more
    than 30 digits is shown by its size (``repr`` refuses one of more than 4,300 digits with a ValueError)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return huge_integer(value)
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def huge_integer(value: int) -> str:
    """An integer too long to print, described by its size (counted from its bits: ``str`` may refuse it)."""
    digits = int(abs(value).bit_length() * math.log10(2)) + 1
    return f"{'a negative' if value < 0 else 'an'} integer of about {digits} digits"


def is_safe_name(value: Any) -> bool:
    return isinstance(value, str) and NAME_PATTERN.fullmatch(value) is not None


def check_name(value: Any, *, source: str | Path | None, field: str, what: str = "name") -> str:
    """``value`` if it is a safe name (see the module docstring), else a one-line :class:`InputError`."""
    if not is_safe_name(value):
        raise InputError(f"{shown(value)} is not a valid {what}", source=source, field=field, valid=NAME_RULE)
    return value


def safe_name(text: str, limit: int | None = 60, *, keep: str = "", empty: str = "job") -> str:
    """A file-name-safe version of a label: the characters of :data:`NAME_PATTERN` (plus those in ``keep``;
    matrix files keep the ``@`` and ``+`` of job types) stay, runs of others become ``-``.

    A label that is already safe and at most ``limit`` characters (None: no limit) comes back unchanged, so
    for names checked on reading this is the identity. Any other label gets a hash of the whole appended, so
    two labels that differ only in dropped characters or beyond ``limit`` never share a file; ``empty``
    stands in for nothing left.
    """
    kept = re.sub("[^A-Za-z0-9_.\\-" + re.escape(keep) + "]+", "-", text).strip("-.")
    if text and kept == text and (limit is None or len(text) <= limit):
        return text
    import hashlib  # only for names that need a digest: a submit of plain names skips the import

    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    stem = kept or empty
    return f"{stem if limit is None else stem[:max(limit - 9, 1)]}-{digest}"


def comment_text(text: str) -> str:
    """``text`` made safe for one comment line of an emitted script: control characters become '?'."""
    return "".join(c if c.isprintable() else "?" for c in text)
