"""Scheduling policies by name, all behind :class:`scheduler.model.policy.Policy`.

====================  ========  =======  ==========================================================================
name                  jobs      packing  what it is
====================  ========  =======  ==========================================================================
``colocate``          adaptive  yes      ours: Sia's ILP plus pair variables (:class:`scheduler.ilp.PackingPolicy`)
``colocate-triples``  adaptive  yes      the same with groups of three as well (``max_group_size=3``)
``sia``               adaptive  no       the same code with packing off = Sia's formulation (SOSP'23)
``gavel-sia``         rigid     no       Gavel's time-fraction LP, max total throughput, Sia's mechanism (OSDI'20)
``gavel-refill``      rigid     no       the same LP, freed GPUs refilled between Gavel rounds (Gavel's own)
``gavel-packed``      rigid     yes      ``gavel-refill``'s space-sharing variant: all same-size pairs in the LP
``tiresias``          rigid     no       discretised 2D-LAS (NSDI'19)
``gandiva``           rigid     yes      random pairing when oversubscribed, unpack pairs with Σ ratio < 1 (OSDI'18)
``fifo``              rigid     no       first come first served with backfilling
====================  ========  =======  ==========================================================================

Adaptive jobs get their GPU count and batch size chosen by goodput (the policy plans with the workload's
batch size as their upper limit, as Sia's speedup functions do); rigid jobs run exactly as submitted.
:func:`make_policy` builds a fresh policy object per simulation (baselines keep per-run bookkeeping such as attained service).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from common.errors import InputError
from common.options import option
from scheduler.ilp.config import IlpConfig
from scheduler.model.policy import Policy

TRIPLE_MAX_SLOWDOWN = 3.75  # colocate-triples' own default bound (IlpConfig.max_slowdown: why)
# The packing policies' hysteresis (IlpConfig.keep_bonus): what runs counts 1.2 x its goodput, so a group is not
# formed for one round's goodput and split again; with the group-change charge it is what makes packing pay at
# 1x load. 0.2 over 0.1 and 0.3 on Sia's six workloads at 1x and 2x, three replicates a point: knowing the true
# pairs is then no worse than knowing none at every point (results/sim/packing-pays/NOTES.md, section 8.7).
# sia keeps Sia's 0.
PACKING_KEEP_BONUS = 0.2
# Policy names that no longer exist -> what to use instead (refused with this hint, never accepted).
RENAMED = {"gavel": "gavel-sia (Sia's mechanism: what simulate and compare ran as gavel) or gavel-refill "
                    "(the refill mechanism: what serve ran as gavel)"}


@dataclass(frozen=True)
class PolicySpec:
    """What the simulator, ``serve`` and the commands need to know about a named policy.

    ``ilp``: the policy's own round-ILP settings when it solves the round ILP (its factory takes an
    :class:`IlpConfig` built over them), None when it solves none. ``pinned``: the ILP fields that make the policy
    what it is (``sia`` is the ILP without packing): a config that changes one is refused.
    """

    name: str
    adaptive: bool
    packing: bool
    description: str
    factory: Callable[..., Policy]
    ilp: IlpConfig | None = None
    pinned: tuple[str, ...] = ()

    @property
    def solves_ilp(self) -> bool:
        return self.ilp is not None


def _colocate(seed: int, ilp: IlpConfig) -> Policy:
    from scheduler.ilp.policy import PackingPolicy

    return PackingPolicy(ilp, name="colocate")


def _colocate_triples(seed: int, ilp: IlpConfig) -> Policy:
    from scheduler.ilp.policy import PackingPolicy

    return PackingPolicy(ilp, name="colocate-triples")


def _sia(seed: int, ilp: IlpConfig) -> Policy:
    from scheduler.ilp.policy import PackingPolicy

    return PackingPolicy(ilp, name="sia")


def _gavel(packing: bool, mechanism: str, name: str) -> Callable[..., Policy]:
    def factory(seed: int) -> Policy:
        from scheduler.policies.gavel import GavelPolicy

        return GavelPolicy(packing=packing, name=name, mechanism=mechanism)

    return factory


def _tiresias(seed: int) -> Policy:
    from scheduler.policies.tiresias import TiresiasPolicy

    return TiresiasPolicy()


def _gandiva(seed: int) -> Policy:
    from scheduler.policies.gandiva import GandivaPolicy

    return GandivaPolicy(seed=seed)


def _fifo(seed: int) -> Policy:
    from scheduler.policies.fifo import FifoPolicy

    return FifoPolicy()


POLICIES: dict[str, PolicySpec] = {
    s.name: s for s in (
        PolicySpec("colocate", True, True, "Sia's ILP with packing (ours)", _colocate,
                   IlpConfig(packing=True, keep_bonus=PACKING_KEEP_BONUS), pinned=("packing",)),
        # groups of three: the slowdown bound is 1.25 x an even third of the GPU, as colocate's 2.5 is of a half
        PolicySpec("colocate-triples", True, True, "colocate with groups of three as well", _colocate_triples,
                   IlpConfig(packing=True, max_group_size=3, max_slowdown=TRIPLE_MAX_SLOWDOWN,
                             keep_bonus=PACKING_KEEP_BONUS), pinned=("packing", "max_group_size")),
        PolicySpec("sia", True, False, "Sia's ILP, packing off", _sia, IlpConfig(packing=False), pinned=("packing",)),
        PolicySpec("gavel-sia", False, False, "Gavel's LP under Sia's mechanism (as Sia's simulator), rigid",
                   _gavel(False, "sia", "gavel-sia")),
        PolicySpec("gavel-refill", False, False, "Gavel's LP, GPUs refilled between Gavel rounds, rigid",
                   _gavel(False, "refill", "gavel-refill")),
        PolicySpec("gavel-packed", False, True, "gavel-refill with space sharing (all pairs)",
                   _gavel(True, "refill", "gavel-packed")),
        PolicySpec("tiresias", False, False, "Tiresias discretised 2D-LAS", _tiresias),
        PolicySpec("gandiva", False, True, "Gandiva random packing + unpacking", _gandiva),
        PolicySpec("fifo", False, False, "FIFO with backfilling", _fifo),
    )
}
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)
ILP_POLICY_NAMES: tuple[str, ...] = tuple(n for n, s in POLICIES.items() if s.solves_ilp)


def policy_spec(name: str) -> PolicySpec:
    """The :class:`PolicySpec` for ``name``; an unknown name is an :class:`InputError` listing valid ones."""
    key = name.strip().lower()
    spec = POLICIES.get(key)
    if spec is None:
        hint = f"{key} was renamed: {RENAMED[key]}" if key in RENAMED else ", ".join(POLICY_NAMES)
        raise InputError(f"unknown policy {name!r}", source="--policy", field="policy", valid=hint)
    return spec


def make_policy(name: str, *, seed: int = 0, ilp: IlpConfig | None = None) -> Policy:
    """A fresh policy object. ``ilp``: the round-ILP settings of a policy that solves it (default: the policy's
    own, :attr:`PolicySpec.ilp`); given to a policy that solves none, or changing a field the policy pins, it is
    an :class:`InputError`."""
    spec = policy_spec(name)
    if spec.ilp is None:
        if ilp is not None:
            raise InputError(f"round-ILP settings with policy {spec.name}", source="--policy", field="ilp",
                             valid=f"a policy that solves the round ILP: {', '.join(ILP_POLICY_NAMES)}")
        return spec.factory(seed=seed)
    config = spec.ilp if ilp is None else ilp
    for f in spec.pinned:
        if getattr(config, f) != getattr(spec.ilp, f):
            raise InputError(f"{f} {getattr(config, f)} with policy {spec.name}", source="--policy", field=f"ilp.{f}",
                             valid=f"{getattr(spec.ilp, f)}: {PINNED[f][1]}")
    return spec.factory(seed=seed, ilp=config)


def own_ilp(name: str, **changes: Any) -> IlpConfig:
    """The round-ILP settings of ILP policy ``name`` (its own, :attr:`PolicySpec.ilp`) with ``changes``."""
    own = policy_spec(name).ilp
    if own is None:
        raise InputError(f"policy {name} solves no round ILP", source="--policy", field="policy",
                         valid=", ".join(ILP_POLICY_NAMES))
    return replace(own, **changes)


@dataclass(frozen=True)
class PolicyChoice:
    """The policy of one run (``colocate simulate --policy``): a config, so a run's printed settings name it."""

    policy: str = option("colocate", "Scheduling policy (the README's policy table).", metavar="|".join(POLICY_NAMES))

    def __post_init__(self) -> None:
        policy_spec(self.policy)

    @property
    def spec(self) -> PolicySpec:
        return policy_spec(self.policy)


# The ILP fields a policy decides (PolicySpec.pinned): what each is, and what to use instead of changing it.
PINNED = {"packing": ("packing", "--policy sia for the ILP without packing, --policy colocate for it with packing"),
          "max_group_size": ("its group size", "3 with --policy colocate-triples, or --policy colocate for pairs")}


__all__ = ["ILP_POLICY_NAMES", "PACKING_KEEP_BONUS", "PINNED", "POLICIES", "POLICY_NAMES", "PolicyChoice", "PolicySpec",
           "make_policy", "own_ilp", "policy_spec"]
