"""The one exception type for bad user input (specs, traces, cluster files, CLI arguments).

Every layer raises :class:`InputError` for input a user can fix; the CLI prints its message as one line
and exits with status 2 — never a traceback. The message always names the file, the field and what
would be valid, so users can fix the input without reading code.
"""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """Bad input a user can fix. ``str(err)`` is a complete one-line message."""

    def __init__(
        self,
        message: str,
        *,
        source: str | Path | None = None,
        field: str | None = None,
        valid: str | None = None,
    ) -> None:
        self.source = str(source) if source is not None else None
        self.field = field
        self.valid = valid
        self.detail = message
        parts = []
        if self.source:
            parts.append(f"{self.source}:")
        if field:
            parts.append(f"field '{field}':")
        parts.append(message)
        text = " ".join(parts)
        if valid:
            text += f" (valid: {valid})"
        super().__init__(" ".join(text.split()))  # one line, always


class SharingUnavailable(RuntimeError):
    """A sharing mode cannot be set up here (no MPS binary, no GPU); the message says why.

    Not an input error: the same spec runs elsewhere. The profiler records the cell as skipped with this
    message; the executors refuse the plan before starting anything.
    """
