"""The live scheduler's knobs: one frozen dataclass, the single source of ``colocate serve``'s defaults."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from scheduler.service.probes import ProbeConfig
from scheduler.service.stability import StabilityConfig


@dataclass(frozen=True)
class ServeConfig:
    """Knobs of the live scheduler (``colocate serve`` options)."""

    round_s: float = 60.0
    policy: str = "colocate"
    policy_options: dict[str, Any] = field(default_factory=dict)
    device: str = "auto"  # what built-in jobs train on: auto | cpu | cuda
    sharing: str = "timeslice"  # how packed groups share their GPUs: a registered mode (profiler.gpu.sharing)
    threads: int = 1
    stop_grace_s: float = 30.0  # SIGTERM → SIGKILL for a job asked to stop
    start_timeout_s: float = 120.0  # a group the backend cannot start in this long goes back to the queue
    log_every: int = 50
    python: str = sys.executable
    stability: StabilityConfig = field(default_factory=StabilityConfig)  # minimum run, restarts, fairness
    probe: ProbeConfig = field(default_factory=ProbeConfig)  # automatic probes of never-measured job types
