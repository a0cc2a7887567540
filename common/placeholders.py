"""The placeholders of a command template: ``colocate launch``'s commands and ``colocate submit``'s job files.

Here, apart from the executor that fills them in (:mod:`scheduler.executor.plan`), so that a ``submit``
checks a job's command without importing the executor (its GPU-sharing and cluster modules).
"""

from __future__ import annotations

import re
import string

from common.errors import InputError

PLACEHOLDERS = ("job", "batch_size", "num_gpus", "gpu_type", "partner", "node", "gpus")
VALID = "{" + "}, {".join(PLACEHOLDERS) + "}; {{ and }} for literal braces"


MAX_FORMAT_WIDTH = 256  # widths/precisions in a placeholder's format spec ({batch_size:>8})
_FORMAT_NUMBER = re.compile(r"\d+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # tab and newline aside (a multi-line job command)


def check_template(command: str, *, source: str, field: str, max_chars: int, valid: str = VALID,
                   newlines: bool = True) -> None:
    """Refuse a command template no script or record should hold: longer than ``max_chars``, a NUL, a carriage
    return or another control character (a newline too unless ``newlines``), bad or unknown placeholders, and
    format specs that are nested or wider than :data:`MAX_FORMAT_WIDTH` (``{job:>100000000}`` fills in
    slowly to a huge command)."""
    if len(command) > max_chars:
        raise InputError(f"{len(command)} characters", source=source, field=field,
                         valid=f"at most {max_chars} characters; {valid}")
    bad = _CONTROL.search(command) or (None if newlines else re.search("\n", command))
    if bad is not None:
        raise InputError(f"contains the control character {bad.group()!r}", source=source, field=field,
                         valid=f"a command on {'lines' if newlines else 'one line'} of printable text; {valid}")
    check_placeholders(command, source=source, field=field)
    for _, _, spec, _ in string.Formatter().parse(command):
        if spec and ("{" in spec or any(int(n) > MAX_FORMAT_WIDTH for n in _FORMAT_NUMBER.findall(spec))):
            raise InputError(f"format spec {spec[:40]!r} is nested or wider than {MAX_FORMAT_WIDTH}", source=source,
                             field=field, valid=valid)


def check_placeholders(command: str, *, source: str, field: str) -> None:
    """Refuse bad placeholder syntax and placeholders other than :data:`PLACEHOLDERS`."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(command) if name is not None]
    except ValueError as err:
        raise InputError(f"bad placeholder syntax ({err})", source=source, field=field, valid=VALID) from None
    for name in names:
        if name not in PLACEHOLDERS:
            raise InputError(f"unknown placeholder {{{name}}}", source=source, field=field, valid=VALID)
