"""The learning-rate scalings a job may train with: named once, for the job file and the job library alike.

``colocate submit`` checks a job file's ``lr_scaling`` here, ``serve`` passes it to the job as
``COLOCATE_LR_SCALING``, and the job library (:mod:`scheduler.jobkit`) reads it from there and applies it
(:func:`scheduler.jobkit.gradients.lr_factor`). Nothing here imports torch: the job file's validator stays free
of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.errors import InputError
from common.names import shown

LR_SCALINGS = ("adascale", "linear", "sqrt", "none")  # how a learning rate follows the batch size
DEFAULT_LR_SCALING = "adascale"  # the job library's, when neither the script nor the job file names one
LR_SCALING_ENV = "COLOCATE_LR_SCALING"  # how serve hands a job file's scaling to the job
LR_SCALING_RULE = "one of " + ", ".join(LR_SCALINGS)


def check_lr_scaling(value: Any, *, source: str | Path | None, field: str) -> str:
    """``value`` when it names a scaling, else an :class:`~common.errors.InputError` naming ``source`` and
    ``field`` with the valid names."""
    if not isinstance(value, str) or value not in LR_SCALINGS:
        raise InputError(f"{shown(value)} is not a learning-rate scaling", source=source, field=field,
                         valid=LR_SCALING_RULE)
    return value
