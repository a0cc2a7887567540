"""The placeholders of a command template: ``colocate launch``'s commands and ``colocate submit``'s job files.

Here, apart from the executor that fills them in (:mod:`scheduler.executor.plan`), so that a ``submit``
checks a job's command without importing the executor (its GPU-sharing and cluster modules).
"""

from __future__ import annotations

import string

from common.errors import InputError

PLACEHOLDERS = ("job", "batch_size", "num_gpus", "gpu_type", "partner", "node", "gpus")
VALID = "{" + "}, {".join(PLACEHOLDERS) + "}; {{ and }} for literal braces"


def check_placeholders(command: str, *, source: str, field: str) -> None:
    """Refuse bad placeholder syntax and placeholders other than :data:`PLACEHOLDERS`."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(command) if name is not None]
    except ValueError as err:
        raise InputError(f"bad placeholder syntax ({err})", source=source, field=field, valid=VALID) from None
    for name in names:
        if name not in PLACEHOLDERS:
            raise InputError(f"unknown placeholder {{{name}}}", source=source, field=field, valid=VALID)
