"""Scheduling policies by name, all behind :class:`scheduler.model.policy.Policy`.

====================  ========  =======  ==========================================================================
name                  jobs      packing  what it is
====================  ========  =======  ==========================================================================
``colocate``          adaptive  yes      ours: Sia's ILP plus pair variables (:class:`scheduler.ilp.PackingPolicy`)
``colocate-triples``  adaptive  yes      the same with groups of three as well (``max_group_size=3``)
``sia``               adaptive  no       the same code with packing off = Sia's formulation (SOSP'23)
``gavel``             rigid     no       Gavel's time-fraction LP, max total throughput as Sia runs it (OSDI'20)
``gavel-packed``      rigid     yes      Gavel's space-sharing variant: all same-size pairs in the LP
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
from dataclasses import dataclass
from typing import Any

from common.errors import InputError
from scheduler.model.policy import Policy


@dataclass(frozen=True)
class PolicySpec:
    """What the simulator needs to know about a named policy."""

    name: str
    adaptive: bool
    packing: bool
    description: str
    factory: Callable[..., Policy]


TRIPLE_MAX_SLOWDOWN = 3.75  # colocate-triples' own default bound (IlpConfig.max_slowdown: why)
# The packing policies' hysteresis (IlpConfig.keep_bonus): what runs counts 1.1 x its goodput, so a group is not
# formed for one round's goodput and split again; with the group-change charge it is what makes packing pay at
# 1x load (results/sim/packing-pays/NOTES.md). sia keeps Sia's 0.
PACKING_KEEP_BONUS = 0.1


def _colocate(seed: int = 0, **options: Any) -> Policy:
    from scheduler.ilp.config import IlpConfig
    from scheduler.ilp.policy import PackingPolicy

    return PackingPolicy(IlpConfig(packing=True, **{"keep_bonus": PACKING_KEEP_BONUS, **options}), name="colocate")


def _colocate_triples(seed: int = 0, **options: Any) -> Policy:
    from scheduler.ilp.config import IlpConfig
    from scheduler.ilp.policy import PackingPolicy

    # groups of three: the slowdown bound is 1.25 x an even third of the GPU, as colocate's 2.5 is of a half
    defaults = {"max_group_size": 3, "max_slowdown": TRIPLE_MAX_SLOWDOWN, "keep_bonus": PACKING_KEEP_BONUS}
    return PackingPolicy(IlpConfig(packing=True, **{**defaults, **options}), name="colocate-triples")


def _sia(seed: int = 0, **options: Any) -> Policy:
    from scheduler.ilp.policy import sia_policy

    return sia_policy(**options)


def _gavel(seed: int = 0, **options: Any) -> Policy:
    from scheduler.policies.gavel import GavelPolicy

    return GavelPolicy(packing=False, name="gavel", **options)


def _gavel_packed(seed: int = 0, **options: Any) -> Policy:
    from scheduler.policies.gavel import GavelPolicy

    return GavelPolicy(packing=True, name="gavel-packed", **options)


def _tiresias(seed: int = 0, **options: Any) -> Policy:
    from scheduler.policies.tiresias import TiresiasPolicy

    return TiresiasPolicy(**options)


def _gandiva(seed: int = 0, **options: Any) -> Policy:
    from scheduler.policies.gandiva import GandivaPolicy

    return GandivaPolicy(seed=seed, **options)


def _fifo(seed: int = 0, **options: Any) -> Policy:
    from scheduler.policies.fifo import FifoPolicy

    return FifoPolicy(**options)


POLICIES: dict[str, PolicySpec] = {
    s.name: s for s in (
        PolicySpec("colocate", True, True, "Sia's ILP with packing (ours)", _colocate),
        PolicySpec("colocate-triples", True, True, "colocate with groups of three as well", _colocate_triples),
        PolicySpec("sia", True, False, "Sia's ILP, packing off", _sia),
        PolicySpec("gavel", False, False, "Gavel max-min fairness, rigid", _gavel),
        PolicySpec("gavel-packed", False, True, "Gavel with space sharing (all pairs)", _gavel_packed),
        PolicySpec("tiresias", False, False, "Tiresias discretised 2D-LAS", _tiresias),
        PolicySpec("gandiva", False, True, "Gandiva random packing + unpacking", _gandiva),
        PolicySpec("fifo", False, False, "FIFO with backfilling", _fifo),
    )
}
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)


def policy_spec(name: str) -> PolicySpec:
    """The :class:`PolicySpec` for ``name``; an unknown name is an :class:`InputError` listing valid ones."""
    spec = POLICIES.get(name.strip().lower())
    if spec is None:
        raise InputError(f"unknown policy {name!r}", source="--policy", field="policy", valid=", ".join(POLICY_NAMES))
    return spec


def make_policy(name: str, *, seed: int = 0, **options: Any) -> Policy:
    """A fresh policy object; ``options`` go to its constructor (e.g. ``top_k=5`` for colocate)."""
    return policy_spec(name).factory(seed=seed, **options)


__all__ = ["POLICIES", "POLICY_NAMES", "PolicySpec", "make_policy", "policy_spec"]
