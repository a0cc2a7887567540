"""The Ray actor that collects job statuses from group tasks for the driver to poll.

It lives in a module of its own that imports nothing heavy: Ray imports an actor's defining module in the
actor's fresh worker process, and on a node busy with training jobs an import of pandas or torch there
delayed the board's start past the end of short jobs, so no progress streamed at all.
"""

from __future__ import annotations

from typing import Any


class ProgressBoard:
    """Latest status of every job, reported by the group tasks (a Ray actor)."""

    def __init__(self) -> None:
        self.statuses: dict[str, dict[str, Any]] = {}

    def report(self, statuses: list[dict[str, Any]]) -> None:
        for status in statuses:
            self.statuses[status["job"]] = status

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return dict(self.statuses)
