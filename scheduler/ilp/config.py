"""The round ILP's knobs: one frozen dataclass, the single source of defaults, checks and CLI help.

Each field carries its command-line help in ``metadata`` (``colocate schedule`` builds its ILP options from
these fields, so defaults and checks are never restated there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from common.bounds import MAX_GPUS, check_number
from common.errors import InputError
from common.names import shown

SOLVERS = ("highs", "pulp-highs", "cbc")
CANDIDATE_MODES = ("top-k", "all")


def _opt(default: Any, help: str, flag: str | None = None) -> Any:
    """A field default with its command-line help (and flag, when it differs from --<name>)."""
    return field(default=default, metadata={"help": help, "flag": flag})


@dataclass(frozen=True)
class IlpConfig:
    """Knobs of the round ILP (all have the defaults used in the README and benchmarks).

    ``p``: goodput power (Sia −0.5; must not be 0). ``lambda_unallocated``: penalty λ per unallocated job
    (used when p < 0). ``restart_cost_s``: Sia's S. ``packing``: add group (pair, triple) variables.
    ``max_group_size``: 2 (pairs) or 3 (pairs and triples). ``top_k``: partners per job, seeded from the
    compatibility graph and added per pricing pass; ``min_benefit``: β, a group needs ``Σ ρ ≥ 1 + β``.
    ``pair_candidates``: "top-k" (ours) or "all" (every compatible pair, as in Gavel's packed LP; for
    comparisons). ``pricing_passes``: column-generation passes (0: seeds only); ``seed_partners``: start
    from the graph's top-k partners (else from singles only). ``time_limit_s`` (pricing and solving
    together; when it runs out the best incumbent, else the greedy selection, answers) and ``mip_gap`` (relative gap of the
    objective; rounds of ≤ 5,000 variables use at most 0.01 %) always go to the solver. ``solver``:
    "highs" (highspy), "pulp-highs" (HiGHS through PuLP) or "cbc" (through PuLP). ``max_gpus_per_job``
    caps multi-node shapes of adaptive jobs (None: the job's own ``max_gpus`` or the cluster).
    ``context_memory_gb``: per process CUDA context added when checking a group's memory. ``warm_start``:
    a policy that runs many rounds starts each round's LP from the last one's basis, groups and priced-in
    singles (:mod:`scheduler.ilp.warm`; the LP optimum is unchanged, only where the solver starts).
    ``charge_resumes``, ``resume_floor`` and ``keep_bonus`` make a live scheduler hold its decisions (``colocate
    serve`` turns them on; off by default so the simulator keeps Sia's restart semantics): resuming a job that
    was stopped costs its restart factor too, and a running job's current configuration wins ties.
    ``feasibility_jump``: HiGHS's feasibility-jump heuristic in the MIP solves of the ``highs`` back-end (off
    by default since 2026-11-24: every MIP starts from the LP rounding's incumbent, and on a round's small MIP
    the heuristic was three quarters of HiGHS's time without improving a start in the Sia workloads).
    """

    p: float = _opt(-0.5, "Goodput power: -0.5 = Sia (fairness), 1 = sum of normalised goodputs.")
    lambda_unallocated: float = _opt(1.1, "Penalty per unallocated job (p < 0).", "--lambda")
    restart_cost_s: float = _opt(25.0, "Sia's restart cost S, seconds.", "--restart-cost")
    packing: bool = _opt(True, "Group variables (co-location); --no-packing is exactly Sia's ILP.")
    max_group_size: int = _opt(2, "Jobs per GPU group: 2 (pairs) or 3 (pairs and triples).")
    top_k: int = _opt(3, "Partners considered per job.")
    min_benefit: float = _opt(0.05, "A group needs the sum of its ratios >= 1 + this.")
    pair_candidates: Literal["top-k", "all"] = _opt("top-k", "top-k (ours) or all (every compatible pair).")
    pricing_passes: int = _opt(2, "Column-generation passes on the LP relaxation (0: seeds only).")
    seed_partners: bool = _opt(True, "Seed partners from the compatibility graph before pricing.")
    time_limit_s: float = _opt(10.0, "Time limit of pricing and solving, seconds.", "--time-limit")
    mip_gap: float = _opt(5e-3, "Relative MIP gap at which the solver stops.", "--gap")
    solver: Literal["highs", "pulp-highs", "cbc"] = _opt("highs", "highs | pulp-highs | cbc.")
    threads: int | None = _opt(1, "Solver threads.")
    max_gpus_per_job: int | None = _opt(None, "Cap on an adaptive job's GPUs (default: the job's max_gpus).")
    context_memory_gb: float = _opt(0.5, "CUDA context per process added to a group's memory, GB.")
    charge_resumes: bool = _opt(False, "A queued job that ran before pays Sia's restart factor (from its first "
                                       "start, at least resume_floor) to resume; off: only running jobs' moves pay.")
    resume_floor: float = _opt(0.5, "Lowest restart factor a resume pays (charge_resumes): a job that waits "
                                    "can always take idle GPUs.")
    charge_partner_changes: bool = _opt(False, "A change of partners restarts every member running on the GPUs, "
                                               "one left alone by a split included (each pays its restart factor), "
                                               "as serve enacts it; off: only the member that moves pays (Sia's "
                                               "move rule).")
    keep_bonus: float = _opt(0.0, "A running job's current configuration counts (1 + this) times its goodput: "
                                  "ties keep what runs.")
    warm_start: bool = _opt(True, "Start each round's LP from the previous round's basis and groups "
                                  "(runs of many rounds: simulate, serve; a single round has none).")
    feasibility_jump: bool = _opt(False, "Run HiGHS's feasibility-jump heuristic in the MIP solves (off: the "
                                         "LP rounding already hands HiGHS an incumbent).")

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
