"""The simulator's knobs: :class:`SimConfig`, whose defaults are Sia's simulator.

Each knob a user may set is a :func:`common.options.option`; ``colocate simulate`` and ``colocate compare``
generate their options from these fields (:mod:`colocate.cli_config`). The experimental ones are model
ablations kept for research (``--set sim.FIELD=VALUE``): each has a figure in ``results/sim/`` that uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from common.bounds import check_number
from common.errors import InputError
from common.options import option
from scheduler.learning.belief import BeliefSpec, parse_belief
from scheduler.sim.job_model import SIA_RESTART_COST_S, SIA_RESTART_PENALTY_S, SIA_SLOWDOWN

BELIEF_HELP = ("What packing policies believe about pairs: truth (the table itself), none, predicted, table:FILE "
               "or noisy:SIGMA; all but truth learn as pairs run.")


@dataclass(frozen=True)
class SimConfig:
    """Simulation knobs (defaults: Sia's simulator). Per-application maps fall back to the defaults."""

    round_s: float = option(60.0, "Round length, seconds.")
    seed: int = option(0, "Seed of randomised policies (gandiva) and of noisy beliefs.")
    belief: BeliefSpec = option(BeliefSpec("truth"), BELIEF_HELP)  # text (the flag, a caller) is parsed once, here
    throughput: Literal["fitted", "bootstrap", "oracle"] = option(
        "fitted", "What adaptive policies believe of throughputs. fitted: a step-time model fitted to the "
                  "configurations each job ran (Sia); bootstrap: profiles of the GPU types a job ran on, projected "
                  "to the others; oracle: every profile known.", experimental=True)
    step_times: Literal["interpolated", "fitted"] = option(
        "interpolated", "True step times: interpolated from the profile rows (Sia's simulator) or fitted "
                        "(Pollux-form fit, measured points as measured).", experimental=True)
    batch: Literal["app-max", "workload"] = option(
        "app-max", "app-max: adaptive jobs grow to the application's largest batch (Sia); workload: they run the "
                   "batch the policy chose.", experimental=True)
    restart_on: Literal["placement", "shape", "gpus"] = option(
        "placement", "placement: a job restarts on a new GPU type or GPUs on each node (Sia); shape: on a new type, "
                     "GPU count or node count; gpus: on any change of GPU indices.",
                             experimental=True)
    efficiency: Literal["sia", "gns"] = option(
        "sia", "Statistical efficiency: sia (validation curves at the job's batch) or gns (the initial batch's "
               "gradient-noise curve).", experimental=True)
    memory: bool = option(True, "Enforce every group's memory at its members' local batches.",
            experimental=True)
    colocation_strength: float = option(1.0, "Scale every pair's benefit (sum of ratios - 1): < 1 weaker, > 1 "
                                             "stronger (a sensitivity study).",
                                                     experimental=True)
    restart_cost_s: Mapping[str, float] = field(default_factory=lambda: dict(SIA_RESTART_COST_S))
    default_restart_cost_s: float = 30.0
    restart_penalty_s: Mapping[str, float] = field(default_factory=lambda: dict(SIA_RESTART_PENALTY_S))
    slowdown: Mapping[str, float] = field(default_factory=lambda: dict(SIA_SLOWDOWN))
    max_time_s: float = 60 * 86400.0
    log_allocations: bool = True

    def __post_init__(self) -> None:
        check_number(self.round_s, field="round_s", low=1, high=86400, valid="seconds in [1, 86400]")
        check_number(self.seed, field="seed", low=0, high=2**32 - 1, integer=True)
        check_number(self.max_time_s, field="max_time_s", low=0, high=1e9, low_open=True, valid="seconds > 0")
        check_number(self.colocation_strength, field="colocation_strength", low=0, high=100,
                     valid="a number in [0, 100] (1 = the table as measured)")
        for name, valid in (("throughput", THROUGHPUTS), ("step_times", STEP_TIMES), ("batch", BATCHES),
                            ("restart_on", RESTART_ON), ("efficiency", EFFICIENCIES)):
            if getattr(self, name) not in valid:
                raise InputError(f"{getattr(self, name)!r}", field=name, valid=", ".join(valid))
        if not isinstance(self.belief, BeliefSpec):
            try:
                object.__setattr__(self, "belief", parse_belief(self.belief))
            except InputError as err:
                raise InputError(err.detail, source=err.source, field="belief", valid=err.valid) from None

    def restart_cost(self, application: str) -> float:
        return float(self.restart_cost_s.get(application, self.default_restart_cost_s))

    def restart_penalty(self, application: str) -> float:
        return float(self.restart_penalty_s.get(application, self.default_restart_cost_s))

    def slowdown_of(self, application: str) -> float:
        return float(self.slowdown.get(application, 1.0))


THROUGHPUTS = ("fitted", "bootstrap", "oracle")
STEP_TIMES = ("interpolated", "fitted")
BATCHES = ("app-max", "workload")
RESTART_ON = ("placement", "shape", "gpus")
EFFICIENCIES = ("sia", "gns")
