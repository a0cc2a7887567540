"""The simulator's knobs: :class:`SimConfig` (defaults: Sia's simulator) and the allowed values of its
choice fields. :mod:`scheduler.sim.simulator` re-exports both."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from common.errors import InputError
from scheduler.learning.belief import parse_belief
from scheduler.learning.explore import DEFAULT_EXPLORE, ExploreConfig
from scheduler.sim.job_model import SIA_RESTART_COST_S, SIA_RESTART_PENALTY_S, SIA_SLOWDOWN

CHOICES = {"throughput": ("fitted", "bootstrap", "oracle"), "step_times": ("interpolated", "fitted"),
           "batch": ("app-max", "workload"), "restart_on": ("placement", "shape", "gpus"),
           "efficiency": ("sia", "gns"), "gavel_rounds": ("sia", "refill"),
           "first_run": ("blind", "profiled"), "throughput_fit": ("pollux", "lines"),
           "efficiency_belief": ("extrapolated", "curves"), "measure_batches": ("each", "first")}


@dataclass(frozen=True)
class SimConfig:
    """Simulation knobs (defaults: Sia's simulator). Per-application maps fall back to the defaults."""

    round_s: float = 60.0
    seed: int = 0
    restart_cost_s: Mapping[str, float] = field(default_factory=lambda: dict(SIA_RESTART_COST_S))
    default_restart_cost_s: float = 30.0
    restart_penalty_s: Mapping[str, float] = field(default_factory=lambda: dict(SIA_RESTART_PENALTY_S))
    slowdown: Mapping[str, float] = field(default_factory=lambda: dict(SIA_SLOWDOWN))
    max_time_s: float = 60 * 86400.0
    log_allocations: bool = True
    throughput: str = "fitted"
    # what the fitted belief says of a job that has never run: blind = one GPU of every type, all alike (Sia's
    # simulator does not read a job's throughputs before its first run, so where it starts is arbitrary and the
    # job migrates once measured); profiled = the profiles' values (the earlier behaviour)
    first_run: str = "blind"
    # how the fitted belief fits a job's measured points: pollux = Pollux's joint fit (Sia's scheduler; measured
    # step times come out as measured, one multi-GPU count measured makes more GPUs cost more); lines = a line
    # per term to its own measurement (the earlier, more optimistic fit)
    throughput_fit: str = "pollux"
    # what the fitted belief takes as a job's statistical efficiency at other batches: extrapolated = Pollux's
    # formula from the gradient statistics measured when the job last ran (Sia's scheduler); curves = the
    # validation curves at every batch (the earlier belief: what the job will really see)
    efficiency_belief: str = "extrapolated"
    # which of the batches a job ran in a round the fitted belief measures: each = every one, in order, the
    # gradient noise at the last (Sia's simulator records a point at every epoch, and the batch changes between
    # epochs); first = the batch it started the round with (the earlier model)
    measure_batches: str = "each"
    step_times: str = "interpolated"
    batch: str = "app-max"
    restart_on: str = "placement"
    efficiency: str = "sia"
    gavel_rounds: str = "sia"  # gavel's mechanism (scheduler.policies.gavel): Sia's held rounds, or refill
    # a job alone re-reads its goodput this many times a round, as Sia's simulator re-reads the efficiency at
    # every epoch boundary (it rises with progress: a short job crosses ~17 epochs a round); 1 = the earlier model
    substeps: int = 6
    memory: bool = True
    colocation_strength: float = 1.0
    belief: str = "truth"  # what packing policies believe about pairs (scheduler.learning.belief)
    # a learning belief explores only in rounds whose jobs ask for >= this × the GPUs; 0: always (earlier)
    explore_contention: float = DEFAULT_EXPLORE.contention

    def __post_init__(self) -> None:
        if not self.round_s > 0:
            raise InputError(f"round length {self.round_s}", source="--round", field="round", valid="seconds > 0")
        if not self.max_time_s > 0:
            raise InputError(f"max time {self.max_time_s}", source="simulate", field="max_time_s", valid="seconds > 0")
        for name, valid in CHOICES.items():
            if getattr(self, name) not in valid:
                raise InputError(f"{name} {getattr(self, name)!r}", source="simulate", field=name,
                                 valid=", ".join(valid))
        parse_belief(self.belief)
        _ = self.explore  # builds the exploration knobs, which validates the contention
        if not (isinstance(self.substeps, int) and 1 <= self.substeps <= 600):
            raise InputError(f"substeps {self.substeps!r}", source="--substeps", field="substeps",
                             valid="an integer in [1, 600]")
        if not self.colocation_strength >= 0:
            raise InputError(f"colocation strength {self.colocation_strength}", source="simulate",
                             field="colocation_strength", valid="a number >= 0 (1 = the table as measured)")

    @property
    def explore(self) -> ExploreConfig:
        """The exploration rule's knobs for a learning ``belief``."""
        return ExploreConfig(contention=self.explore_contention)

    def restart_cost(self, application: str) -> float:
        return float(self.restart_cost_s.get(application, self.default_restart_cost_s))

    def restart_penalty(self, application: str) -> float:
        return float(self.restart_penalty_s.get(application, self.default_restart_cost_s))

    def slowdown_of(self, application: str) -> float:
        return float(self.slowdown.get(application, 1.0))
