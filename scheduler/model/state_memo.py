"""Answers about a job kept by what they are a function of (a profile model's state key of the job).

The simulator re-reads a running job's goodput several times a round (Sia re-reads it at every epoch
boundary; ``SimConfig.substeps``), and asks for the micro-batched rate of a job sharing its GPUs' memory;
with Sia's validation curves the answers depend on the job only through its application, batch limits and
epoch (:meth:`scheduler.model.goodput.ProfileGoodputModel.state_key`), so most re-reads are the same question.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from scheduler.model.goodput import RESULT_CACHE_SIZE, ProfileGoodputModel
from scheduler.model.jobs import Job

T = TypeVar("T")


class StateMemo:
    """Answers about a job kept by ``model``'s :meth:`ProfileGoodputModel.state_key` of it and the rest of the
    question; for any other model (or a job without a key) every call is computed."""

    def __init__(self, model: object) -> None:
        self._key_of = model.state_key if isinstance(model, ProfileGoodputModel) else None
        self._answers: dict[tuple, object] = {}

    def same_state(self, job: Job, other: Job) -> bool:
        """Whether every answer about ``job`` is also the answer about ``other`` (both have a key, and it is
        one key); False where nothing says so."""
        if self._key_of is None:
            return False
        key = self._key_of(job)
        return key is not None and key == self._key_of(other)

    def __call__(self, compute: Callable[..., T], job: Job, *rest: object) -> T:
        state = self._key_of(job) if self._key_of is not None else None
        if state is None:
            return compute(job, *rest)
        key = (compute.__name__, state, *rest)
        if key not in self._answers:
            if len(self._answers) > RESULT_CACHE_SIZE:
                self._answers.clear()
            self._answers[key] = compute(job, *rest)
        return self._answers[key]  # type: ignore[return-value]


__all__ = ["StateMemo"]
