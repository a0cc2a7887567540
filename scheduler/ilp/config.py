"""The round ILP's knobs: one frozen dataclass, the single source of their defaults, checks and help.

Each knob is a :func:`common.options.option`: the commands that solve rounds (``schedule``, ``simulate``,
``serve``) generate their ILP options from these fields (:mod:`colocate.cli_config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from common.bounds import MAX_GPUS, check_number
from common.errors import InputError
from common.names import shown
from common.options import option

SOLVERS = ("highs", "pulp-highs", "cbc")
CANDIDATE_MODES = ("top-k", "all")


@dataclass(frozen=True)
class IlpConfig:
    """Knobs of the round ILP; the defaults are the ones the README and the benchmarks use.

    The objective (``p``, ``lambda_unallocated``, restart factors with ``restart_cost_s``) and the group
    columns (``packing``, ``max_group_size``, ``top_k``, ``min_benefit``, ``max_slowdown``) are the model of
    :mod:`scheduler.ilp`; ``time_limit_s`` and ``mip_gap`` always reach the solver (when time runs out the best
    incumbent, else the greedy selection, answers). ``warm_start``: a policy that runs many rounds starts each
    round's LP from the last one's basis, groups and priced-in singles (:mod:`scheduler.ilp.warm`; the optimum
    is unchanged, only where the solver starts). ``charge_resumes`` and ``resume_floor`` make a live scheduler
    hold its decisions (``colocate serve`` turns them on, :mod:`scheduler.service.config`; off here so the
    simulator keeps Sia's restart semantics). ``keep_bonus`` is the hysteresis of what runs: 0 here (``sia``
    as Sia runs it), :data:`scheduler.policies.PACKING_KEEP_BONUS` for the packing policies, 0.02 in ``serve``.
    A change of a group's members always charges every member running on its GPUs (:mod:`scheduler.ilp`,
    "Pair restart").

    ``max_slowdown`` (2.5): no group column in which a member runs below ``1/2.5`` of its solo speed under the
    round's ratios. Why 2.5: an even share of a GPU with one partner is a slowdown of 2 and time-slicing two jobs
    costs ~10 % more (every time-sliced pair measured on the H100 ran at Σ t/t' 0.89-0.91: slowdowns 2.21-2.26,
    ``results/h100/REPORT.md``), so 2.5 = 1.25 x the even share: no member of a pair does much worse than it would
    time-sharing the GPU with one job. Of the 37 H100 MPS pairs with Σ t/t' >= 1.05 it keeps the 13 whose members
    stay within slowdowns 1.64-2.06 and drops the 24 where the lighter member runs at 0.19-0.29 of its speed
    (slowdown 3.5-5.3: a ResNet beside a VGG, ResNet-18 + VGG-19 with δ 1.06 among them); of the 38 paying pairs
    of the transferred table the simulator reads it keeps 36 (98.5 % of their Σ t/t' - 1). ``colocate-triples``
    applies 1.25 x an even third, 3.75 (:mod:`scheduler.policies`).
    """

    p: float = option(-0.5, "Goodput power: -0.5 = Sia (fairness), 1 = sum of normalised goodputs.",
                      flag="--power")
    lambda_unallocated: float = option(1.1, "Penalty per unallocated job (p < 0).", flag="--lambda")
    restart_cost_s: float = option(25.0, "Sia's restart cost S, seconds.", flag="--restart-cost")
    packing: bool = option(True, "Group variables (co-location); off, the ILP is exactly Sia's.")
    max_group_size: int = option(2, "Jobs per GPU group: 2 (pairs) or 3 (pairs and triples).")
    min_benefit: float = option(0.05, "A group needs the sum of its ratios >= 1 + this.")
    max_slowdown: float | None = option(
        2.5, "No member of a group runs slower than 1/this of its solo speed (a job's own max_slowdown overrides "
             "it; none: no bound).", metavar="X|none")
    time_limit_s: float = option(10.0, "Time limit of pricing and solving, seconds.", flag="--time-limit")
    top_k: int = option(3, "Partners per job: seeded from the compatibility graph, added per pricing pass.",
                        experimental=True)
    pair_candidates: Literal["top-k", "all"] = option(
        "top-k", "top-k (ours) or all (every compatible pair, as Gavel's packed LP: for comparisons).",
        experimental=True)
    pricing_passes: int = option(2, "Column-generation passes on the LP relaxation (0: the seeds only).",
                                 experimental=True)
    mip_gap: float = option(5e-3, "Relative MIP gap at which the solver stops (rounds of <= 5,000 variables use "
                                  "at most 0.01 %).", flag="--gap", experimental=True)
    solver: Literal["highs", "pulp-highs", "cbc"] = option(
        "highs", "highs (highspy), pulp-highs (HiGHS through PuLP) or cbc (through PuLP); the others are the "
                 "fall-backs.", experimental=True)
    threads: int | None = option(1, "Solver threads.", experimental=True)
    max_gpus_per_job: int | None = option(None, "Cap on an adaptive job's GPUs (None: the job's max_gpus or the "
                                                "cluster).", experimental=True)
    context_memory_gb: float = option(0.5, "CUDA context per process added to a group's memory, GB.",
                                      experimental=True)
    charge_resumes: bool = option(False, "A queued job that ran before pays Sia's restart factor (from its first "
                                         "start, at least resume_floor) to resume; off: only running jobs' moves "
                                         "pay.", experimental=True)
    resume_floor: float = option(0.5, "Lowest restart factor a resume pays (charge_resumes): a job that waits "
                                      "can always take idle GPUs.", experimental=True)
    keep_bonus: float = option(0.0, "A running job's current configuration counts (1 + this) times its goodput: "
                                    "a change must gain this much (sia 0; colocate 0.1; serve 0.02).",
                               experimental=True)
    warm_start: bool = option(True, "Start each round's LP from the previous round's basis and groups (runs of "
                                    "many rounds: simulate, serve; a single round has none).",
                                            experimental=True)

    def __post_init__(self) -> None:
        # Finite, bounded numbers (NaN, inf and typos such as 1e12 refused); ranges are generous.
        check_number(self.p, field="p", low=-10, high=10,
                     valid="a finite non-zero number in [-10, 10], e.g. -0.5 (Sia) or 1 (sum of goodputs)")
        if self.p == 0:
            raise InputError(f"p = {self.p} is not allowed", field="p",
                             valid="a finite non-zero number in [-10, 10], e.g. -0.5 (Sia) or 1 (sum of goodputs)")
        check_number(self.lambda_unallocated, field="lambda_unallocated", low=0, high=1e6)
        check_number(self.restart_cost_s, field="restart_cost_s", low=0, high=86400, valid="seconds in [0, 86400]")
        if self.max_group_size not in (2, 3):
            raise InputError(f"{shown(self.max_group_size)}", field="max_group_size", valid="2 or 3")
        check_number(self.top_k, field="top_k", low=0, high=1000, integer=True)
        check_number(self.min_benefit, field="min_benefit", low=0, high=2)
        if self.max_slowdown is not None:
            check_number(self.max_slowdown, field="max_slowdown", low=1, high=1000,
                         valid="a slowdown in [1, 1000] (1.25: never slower than 1/1.25 of its solo speed), or none")
        check_number(self.pricing_passes, field="pricing_passes", low=0, high=1000, integer=True)
        check_number(self.time_limit_s, field="time_limit_s", low=0, high=86400, low_open=True,
                     valid="seconds in (0, 86400]")
        check_number(self.mip_gap, field="mip_gap", low=0, high=1, valid="a fraction in [0, 1)")
        if self.mip_gap >= 1:
            raise InputError(f"{self.mip_gap}", field="mip_gap", valid="a fraction in [0, 1)")
        if self.solver not in SOLVERS:
            raise InputError(f"unknown solver {shown(self.solver)}", field="solver", valid=", ".join(SOLVERS))
        if self.pair_candidates not in CANDIDATE_MODES:
            raise InputError(f"{shown(self.pair_candidates)}", field="pair_candidates", valid=", ".join(CANDIDATE_MODES))
        if self.threads is not None:
            check_number(self.threads, field="threads", low=1, high=1024, integer=True)
        if self.max_gpus_per_job is not None:
            check_number(self.max_gpus_per_job, field="max_gpus_per_job", low=1, high=MAX_GPUS, integer=True)
        check_number(self.resume_floor, field="resume_floor", low=0, high=1, low_open=True, valid="a fraction in (0, 1]")
        check_number(self.keep_bonus, field="keep_bonus", low=0, high=1, valid="a fraction in [0, 1]")
        check_number(self.context_memory_gb, field="context_memory_gb", low=0, high=1024, valid="GB in [0, 1024]")
