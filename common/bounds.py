"""One checker for numbers users give: finite, of the right kind, inside a documented range.

Every numeric field of a spec, cluster, jobs or workload file and every numeric CLI option has a range;
NaN, ±inf, booleans and values outside it are refused with a one-line :class:`~common.errors.InputError`
naming the file and field. Ranges are generous but finite, so a typo such as ``repeats: 1e9`` or
``nodes: 1e12`` fails at once instead of running for minutes and finishing nothing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from common.errors import InputError
from common.names import huge_integer, shown

# Shared upper limits (documented in README "Reliability").
MAX_GPUS = 100_000  # GPUs (or nodes) of one type, or one job's GPU count
MAX_BATCH = 10_000_000  # global batch size
MAX_SECONDS = 1e8  # arrival times, durations, ages, time-outs (about three years)
MAX_REPEATS = 1_000
MAX_STEPS = 10**9  # a job's target iterations
MAX_SAMPLES = 10**12  # a job's target samples
# What a running job may report (its progress file): a step trains at least one sample and at most one batch.
MAX_PROGRESS_STEPS = MAX_SAMPLES
MAX_PROGRESS_SAMPLES = MAX_STEPS * MAX_BATCH
# its gradient statistics: a squared norm or a variance trace no training that still learns reaches; a learning rate
MAX_GRADIENT_STAT = 1e30
MAX_LR = 1e6
MAX_EPOCH_S = 1e10  # a wall-clock time stamp (seconds since 1970; the year 2286)


def shown_number(x: float) -> str:
    """A number from outside as an error message shows it, whatever its size: never raises (``f"{x:g}"``
    overflows for an integer beyond 1e308, and ``str`` refuses one of more than 4,300 digits)."""
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 10**30:
        return huge_integer(x)
    return f"{x:g}"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"



def _describe(low: float, high: float, integer: bool, low_open: bool, high_open: bool = False) -> str:
    kind = "an integer" if integer else "a number"
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    return f"{kind} in {left}{_fmt(low)}, {_fmt(high)}{right}"


def in_range(value: Any, low: float, high: float, *, integer: bool = False) -> bool:
    """Whether ``value`` passes :func:`check_number` with these limits (for readers that record, not raise)."""
    try:
        check_number(value, field="", low=low, high=high, integer=integer)
    except InputError:
        return False
    return True


def check_number(value: Any, *, field: str, low: float, high: float, source: str | Path | None = None,
                 integer: bool = False, low_open: bool = False, high_open: bool = False, valid: str | None = None,
                 row: int | None = None) -> Any:
    """``value`` (an int when ``integer``) if it is a finite number in range, else an :class:`InputError`.

    ``low_open`` makes the lower limit exclusive (``> low``), ``high_open`` the upper one (``< high``). Whole
    floats pass as integers (YAML ``1e3``), booleans never count as numbers. ``row``: the row of a table the
    value came from, named in the message.
    """
    rule = valid or _describe(low, high, integer, low_open, high_open)
    at = "" if row is None else f"row {row}: "
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:  # numpy scalars and the like
            import numbers

            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError
            value = value.item() if hasattr(value, "item") else float(value)
        except (TypeError, ValueError):
            raise InputError(f"{at}{shown(value)} is not a number", source=source, field=field, valid=rule) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{at}{value} is not a finite number", source=source, field=field, valid=rule)
    if value < low or (low_open and value <= low) or value > high or (high_open and value >= high):
        raise InputError(f"{at}{shown_number(value)} is out of range", source=source, field=field, valid=rule)
    if integer:
        if value != int(value):
            raise InputError(f"{at}{shown_number(value)} is not a whole number", source=source, field=field, valid=rule)
        return int(value)
    return value
