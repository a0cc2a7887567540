"""The live scheduler's knobs: one frozen dataclass, the single source of ``colocate serve``'s defaults.

Each knob a user may set is a :func:`common.options.option`; ``colocate serve`` generates its options from these
fields and those of the nested configs (:mod:`colocate.cli_config`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

from common.bounds import check_number
from common.errors import InputError
from common.names import is_safe_name
from common.options import nested, option, shared_option
from common.owners import USERS_MODES
from scheduler.executor.base import DEVICES, Runtime, sharing_names
from scheduler.ilp.config import IlpConfig
from scheduler.service.probes.manager import ProbeConfig
from scheduler.service.stability import StabilityConfig

# The round ILP as a live scheduler runs it (scheduler.service.stability, rules 2-4 and fairness): resuming a
# stopped job pays its restart, ties keep what runs, and with λ = 2 a waiting job that fits is allocated before
# any adaptive job grows. Changing partners pays its restarts everywhere (scheduler.ilp, "Pair restart"). The
# simulator keeps each policy's own (scheduler.policies: Sia's, with colocate's hysteresis).
LIVE_CHANGES = {"lambda_unallocated": 2.0, "keep_bonus": 0.02, "charge_resumes": True}
LIVE_ILP = IlpConfig(**LIVE_CHANGES)  # type: ignore[arg-type]


def live_ilp(policy: str) -> IlpConfig:
    """The round ILP ``serve`` runs ``policy`` with: the policy's own settings (:mod:`scheduler.policies`; groups of
    three for ``colocate-triples``, no packing for ``sia``) with the live scheduler's changes; :data:`LIVE_ILP` for a
    policy that solves none (its restart cost and slowdown bound still apply to the jobs)."""
    from scheduler.policies import policy_spec

    own = policy_spec(policy).ilp
    return LIVE_ILP if own is None else replace(own, **LIVE_CHANGES)  # type: ignore[arg-type]


def _policy_names() -> tuple[str, ...]:
    from scheduler.policies import POLICY_NAMES

    return POLICY_NAMES


@dataclass(frozen=True)
class ApiConfig:
    """Who may do what through the API, and the limits every request meets."""

    admins: tuple[str, ...] = option((), "A user (NAME) or a group (@NAME) who may cancel and read every job and "
                                          "manage tokens; repeatable. Root and the server's user always may.",
                                     flag="--admin", metavar="USER|@GROUP")
    private_data: bool = option(False, "Hide other users' jobs from non-admins (as Slurm's PrivateData=jobs).")
    max_body_bytes: int = option(1 << 20, "Largest request body, bytes.", experimental=True)
    request_timeout_s: float = option(30.0, "A request not answered in this long gets 503, seconds.",
                                       experimental=True)
    rate_per_s: float = option(50.0, "Requests per second one caller may make (a burst of twice that).",
                                experimental=True)

    def __post_init__(self) -> None:
        for name in self.admins:
            if not is_safe_name(name.removeprefix("@")):
                raise InputError(f"{name!r} is not a user or group name", field="admins",
                                 valid="USER or @GROUP (letters, digits, '.', '_', '-')")
        check_number(self.max_body_bytes, field="max_body_bytes", low=1024, high=1 << 30, integer=True)
        check_number(self.request_timeout_s, field="request_timeout_s", low=0.1, high=3600)
        check_number(self.rate_per_s, field="rate_per_s", low=0.1, high=1e6)


@dataclass(frozen=True)
class ServeConfig:
    """Knobs of the live scheduler (``colocate serve`` options)."""

    policy: str = option("colocate", "Scheduling policy (the README's policy table).", choices=_policy_names)
    round_s: float = option(60.0, "Round length, seconds.")
    device: str = shared_option("device", "auto", of=Runtime)
    sharing: str = shared_option("sharing", "timeslice", of=Runtime)
    users: str = option("own", "Whose jobs run, as whom: own (the server's own user's jobs only), multi (each job as "
                               "its owner: the server runs as root; local and slurm backends) or single (every job as "
                               "the server's user, whoever submitted it; not as root).", choices=USERS_MODES)
    threads: int = shared_option("threads", 1, of=Runtime)
    stop_grace_s: float = shared_option("grace_s", 30.0, of=Runtime)
    start_timeout_s: float = option(120.0, "A group the backend cannot start in this long goes back to the queue, "
                                           "seconds.", experimental=True)
    log_every: int = option(50, "Built-in jobs log every this many steps.", experimental=True)
    python: str = sys.executable
    # the ILP of the policy as serve runs it: ServeConfig.for_policy(NAME) (the command line builds it so)
    ilp: IlpConfig = nested(lambda: LIVE_ILP, "the round ILP of the colocate and sia policies")
    stability: StabilityConfig = nested(StabilityConfig, "how long a started job keeps its GPUs")
    probe: ProbeConfig = nested(ProbeConfig, "automatic probes of never-measured job types")
    api: ApiConfig = nested(ApiConfig, "who may do what through the API, and its limits")

    def __post_init__(self) -> None:
        if self.policy not in _policy_names():
            raise InputError(f"unknown policy {self.policy!r}", field="policy", valid=", ".join(_policy_names()))
        check_number(self.round_s, field="round_s", low=0, high=86400, low_open=True,  # 0: a busy loop
                     valid="seconds in (0, 86400]")
        if self.device not in DEVICES:
            raise InputError(f"{self.device!r}", field="device", valid=", ".join(DEVICES))
        if self.sharing not in sharing_names():
            raise InputError(f"{self.sharing!r}", field="sharing", valid=", ".join(sharing_names()))
        if self.users not in USERS_MODES:
            raise InputError(f"{self.users!r}", field="users", valid=", ".join(USERS_MODES))
        check_number(self.threads, field="threads", low=1, high=256, integer=True)
        check_number(self.stop_grace_s, field="stop_grace_s", low=0, high=3600, low_open=True,
                     valid="seconds in (0, 3600]")
        check_number(self.start_timeout_s, field="start_timeout_s", low=1, high=86400)
        check_number(self.log_every, field="log_every", low=1, high=10**6, integer=True)

    @classmethod
    def for_policy(cls, policy: str, **changes: Any) -> ServeConfig:
        """The knobs of a server running ``policy``: its ILP is :func:`live_ilp` unless ``changes`` give one."""
        return cls(policy=policy, **{"ilp": live_ilp(policy), **changes})


__all__ = ["ApiConfig", "DEVICES", "LIVE_ILP", "ServeConfig", "live_ilp"]
