"""The live scheduler's knobs: one frozen dataclass, the single source of ``colocate serve``'s defaults.

Each knob a user may set is a :func:`common.options.option`; ``colocate serve`` generates its options from these
fields and those of the nested configs (:mod:`colocate.cli_config`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from common.bounds import check_number
from common.errors import InputError
from common.options import nested, option, shared_option
from scheduler.executor.base import DEVICES, Runtime, sharing_names
from scheduler.ilp.config import IlpConfig
from scheduler.service.probes.manager import ProbeConfig
from scheduler.service.stability import StabilityConfig

# The round ILP as a live scheduler runs it (scheduler.service.stability, rules 2-4 and fairness): resuming a
# stopped job pays its restart, ties keep what runs, and with λ = 2 a waiting job that fits is allocated before
# any adaptive job grows. Changing partners pays its restarts everywhere (scheduler.ilp, "Pair restart"). The
# simulator keeps IlpConfig's own (Sia's) defaults.
LIVE_ILP = IlpConfig(lambda_unallocated=2.0, keep_bonus=0.02, charge_resumes=True)
ILP_POLICIES = ("colocate", "colocate-triples", "sia")


def _policy_names() -> tuple[str, ...]:
    from scheduler.policies import POLICY_NAMES

    return POLICY_NAMES


@dataclass(frozen=True)
class ServeConfig:
    """Knobs of the live scheduler (``colocate serve`` options)."""

    policy: str = option("colocate", "Scheduling policy (the README's policy table).", choices=_policy_names)
    round_s: float = option(60.0, "Round length, seconds.")
    device: str = shared_option("device", "auto", of=Runtime)
    sharing: str = shared_option("sharing", "timeslice", of=Runtime)
    threads: int = shared_option("threads", 1, of=Runtime)
    stop_grace_s: float = shared_option("grace_s", 30.0, of=Runtime)
    start_timeout_s: float = option(120.0, "A group the backend cannot start in this long goes back to the queue, "
                                           "seconds.", experimental=True)
    log_every: int = option(50, "Built-in jobs log every this many steps.", experimental=True)
    python: str = sys.executable
    ilp: IlpConfig = nested(lambda: LIVE_ILP, "the round ILP of the colocate and sia policies")
    stability: StabilityConfig = nested(StabilityConfig, "how long a started job keeps its GPUs")
    probe: ProbeConfig = nested(ProbeConfig, "automatic probes of never-measured job types")

    def __post_init__(self) -> None:
        if self.policy not in _policy_names():
            raise InputError(f"unknown policy {self.policy!r}", field="policy", valid=", ".join(_policy_names()))
        check_number(self.round_s, field="round_s", low=0, high=86400, low_open=True,  # 0: a busy loop
                     valid="seconds in (0, 86400]")
        if self.device not in DEVICES:
            raise InputError(f"{self.device!r}", field="device", valid=", ".join(DEVICES))
        if self.sharing not in sharing_names():
            raise InputError(f"{self.sharing!r}", field="sharing", valid=", ".join(sharing_names()))
        check_number(self.threads, field="threads", low=1, high=256, integer=True)
        check_number(self.stop_grace_s, field="stop_grace_s", low=0, high=3600, low_open=True,
                     valid="seconds in (0, 3600]")
        check_number(self.start_timeout_s, field="start_timeout_s", low=1, high=86400)
        check_number(self.log_every, field="log_every", low=1, high=10**6, integer=True)

    def policy_options(self) -> dict[str, Any]:
        """The options the policy registry's factory gets: the ILP knobs that differ from IlpConfig's own
        defaults, for the ILP policies (a policy's factory keeps its own defaults, e.g. groups of three for
        colocate-triples), and ``keep_bonus`` always (the packing policies' own default is the simulator's
        hysteresis; serve's is its own); nothing for the others."""
        if self.policy not in ILP_POLICIES:
            return {}
        default = IlpConfig()
        return {f: getattr(self.ilp, f) for f in IlpConfig.__dataclass_fields__
                if getattr(self.ilp, f) != getattr(default, f) or f == "keep_bonus"}


__all__ = ["DEVICES", "ILP_POLICIES", "LIVE_ILP", "ServeConfig"]
