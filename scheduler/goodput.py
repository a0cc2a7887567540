"""Goodput: what a job achieves on a configuration = throughput × statistical efficiency (Pollux, OSDI'21).

This module defines the interface policies and the simulator call (:class:`GoodputModel`,
:class:`GoodputEstimate`); implementations follow below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from scheduler.jobs import Job


@dataclass(frozen=True)
class GoodputEstimate:
    """A job's best (adaptive) or fixed (rigid) operating point on one configuration.

    ``throughput`` in samples/s, ``efficiency`` in (0, 1], ``goodput = throughput × efficiency``
    (statistically useful samples/s). ``batch_size`` is the global batch.
    """

    batch_size: int
    throughput: float
    efficiency: float = 1.0

    @property
    def goodput(self) -> float:
        return self.throughput * self.efficiency


@runtime_checkable
class GoodputModel(Protocol):
    """Answers "how fast does this job go on N GPUs of type T over K nodes?"."""

    def estimate(self, job: Job, gpu_type: str, num_gpus: int, num_nodes: int = 1) -> GoodputEstimate | None:
        """Best batch size for adaptive jobs (within their limits), the job's own batch for rigid ones.

        None when the job cannot run there (no profile for the application/type, or the batch does not fit).
        """
        ...

    def throughput(self, application: str, gpu_type: str, num_gpus: int, batch_size: int,
                   num_nodes: int = 1) -> float | None:
        """Samples/s at a given global batch size, or None when unknown."""
        ...
