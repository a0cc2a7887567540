"""Matplotlib helpers shared by the scheduler's reports: a headless pyplot and a save that closes the figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg back end (reports are written on machines without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path, dpi: int = 120) -> Path:
    """Lay out, write and close ``fig`` (closing frees it: a campaign or comparison writes many figures in one
    process)."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return Path(path)


__all__ = ["pyplot", "save_figure"]
