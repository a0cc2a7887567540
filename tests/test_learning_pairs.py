"""The pair belief, the exploration rule and the prior: shrinkage, intervals, splitting, leave-pair-out."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import InputError
from scheduler.learning.explore import ExploreConfig, contended, hurts, planning_ratios
from scheduler.learning.pairs import PairBelief, PairConfig, table_prior
from scheduler.model.colocation import ColocationTable


def test_samples_shrink_the_prior_by_their_count_and_narrow_the_interval() -> None:
    prior = table_prior(ColocationTable.from_rows([("t4", "a", "b", 0.9, 0.8)]))
    belief = PairBelief(prior)
    before = belief.estimate("t4", "a", "b")
    assert before.source == "prior" and before.ratio_a == pytest.approx(0.9)
    belief.observe("t4", "a", "b", 0.5, 0.4)
    one = belief.estimate("t4", "a", "b")
    assert 0.5 < one.ratio_a < 0.9 and 0.4 < one.ratio_b < 0.8 and one.samples == 1
    belief.observe("t4", "b", "a", 0.4, 0.5, count=20)  # the other order is the same pair
    many = belief.estimate("t4", "a", "b")
    assert many.ratio_a == pytest.approx(0.5, abs=0.05) and many.samples == 21
    width = lambda e: e.interval_a[1] / e.interval_a[0]  # noqa: E731
    assert width(many) < width(one) < width(before)
    swapped = belief.estimate("t4", "b", "a")
    assert (swapped.ratio_a, swapped.ratio_b) == (many.ratio_b, many.ratio_a)


def test_a_pair_measured_at_one_batch_informs_the_same_applications_at_another() -> None:
    belief = PairBelief(None)
    belief.observe("t4", "x@8", "y@4", 0.3, 0.3, count=10)
    assert belief.estimate("t4", "x", "y").samples == 10
    other = belief.estimate("t4", "x@16", "y@4")
    assert other.samples == 0 and other.ratio_a < 0.45  # its prior is the application-level belief, not 0.5


@given(st.floats(0.0, 50.0), st.floats(0.0, 50.0), st.integers(1, 1000))
def test_learned_ratios_are_always_bounded(ra: float, rb: float, n: int) -> None:
    belief = PairBelief(None)
    belief.observe("t4", "a", "b", ra, rb, count=n)
    est = belief.estimate("t4", "a", "b")
    config = PairConfig()
    if ra <= 0 or rb <= 0:
        assert not est.feasible
    else:
        assert config.min_ratio <= est.ratio_a <= config.max_ratio
        assert config.min_ratio <= est.ratio_b <= config.max_ratio


def test_unknown_pairs_are_planned_optimistically_and_the_optimism_shrinks() -> None:
    belief = PairBelief(None)  # nothing known: time-slicing, held weakly
    fresh = belief.planned("t4", "a", "b")
    assert sum(fresh) > 1.0  # worth trying when jobs wait
    belief.observe("t4", "a", "b", 0.5, 0.5, count=50)
    settled = belief.planned("t4", "a", "b")
    assert sum(settled) < sum(fresh) and sum(settled) == pytest.approx(1.0, abs=0.05)
    assert max(planning_ratios(0.94, 0.94, 0.1)) <= 0.95  # the optimism is bounded


def test_optimism_is_for_pairs_nothing_specific_is_known_of_and_all_is_the_earlier_rule() -> None:

    given = table_prior(ColocationTable.from_rows([("t4", "a", "b", 0.55, 0.55)]))
    assert PairBelief(given).planned("t4", "a", "b") == pytest.approx((0.55, 0.55))  # a prior: its mean
    assert sum(PairBelief(given, explore=ExploreConfig(optimism="all")).planned("t4", "a", "b")) > 1.2
    unknown, earlier = PairBelief(None), PairBelief(None, explore=ExploreConfig(optimism="all"))
    assert sum(unknown.planned("t4", "x", "y")) > 1.2  # nothing known: worth trying
    for belief in (unknown, earlier):
        belief.observe("t4", "x", "y", 0.53, 0.53)
    assert sum(unknown.planned("t4", "x", "y")) < 1.1  # measured: planned at what it measured, not tried again
    assert sum(earlier.planned("t4", "x", "y")) > 1.15  # the earlier rule: still at the top of its interval
    generic = PairBelief(lambda gpu, a, b: (0.55, 0.55, False))  # a prior's guess for types it never saw
    assert not generic.estimate("t4", "a", "b").specific and sum(generic.planned("t4", "a", "b")) > 1.2
    assert generic.planned("t4", "a", "b", explore=False) == pytest.approx((0.55, 0.55))
    with pytest.raises(InputError) as info:
        ExploreConfig(optimism="some")
    assert info.value.field == "optimism"


def test_a_pair_that_hurts_is_split_after_one_or_two_rounds_of_samples() -> None:
    optimistic = table_prior(ColocationTable.from_rows([("t4", "a", "b", 0.8, 0.8)]))
    belief = PairBelief(optimistic)
    assert sum(belief.planned("t4", "a", "b")) > 1.5
    belief.observe("t4", "a", "b", 0.3, 0.35)  # one round: δ < 1 far beyond its interval
    assert belief.planned("t4", "a", "b") == (0.0, 0.0)
    assert hurts(0.3, 0.35, 1) and not hurts(0.45, 0.5, 1)  # 0.95 is within the interval of 1: not yet
    assert hurts(0.44, 0.44, 2)  # two rounds decide a pair at 0.88
    table = belief.planning_table({"t4": ["a", "b"]})
    assert table.ratios[("t4", "a", "b")] == (0.0, 0.0) and table.ratios[("t4", "a", "a")][0] > 0


def test_infeasible_stays_infeasible_and_bad_knobs_are_refused() -> None:
    belief = PairBelief(table_prior(ColocationTable.from_rows([("v100", "a", "a", 0.0, 0.0)])))
    assert belief.planned("v100", "a", "a") == (0.0, 0.0)
    belief.observe("t4", "a", "b", 0.0, 0.0)
    assert not belief.estimate("t4", "a", "b").feasible
    with pytest.raises(InputError):
        ExploreConfig(sigma=-1)
    with pytest.raises(InputError):
        PairConfig(max_ratio=2.0)


def test_the_prior_knows_every_pair_and_leave_pair_out_never_sees_the_pair() -> None:
    from scheduler.learning.prior import fit_table_prior, leave_pair_out_table, table_frame

    rows = [("t4", a, b, ra, rb) for a, b, ra, rb in [
        ("x", "x", 0.4, 0.4), ("x", "y", 0.45, 0.5), ("x", "z", 0.5, 0.6), ("y", "y", 0.6, 0.6),
        ("y", "z", 0.7, 0.7), ("z", "z", 0.8, 0.8), ("w", "w", 0.0, 0.0)]]
    table = ColocationTable.from_rows(rows)
    prior = fit_table_prior(table_frame(table))
    ra, rb = prior("t4", "x", "z")
    assert 0.3 < ra < 0.7 and 0.4 < rb < 0.8
    new = prior("a100", "never", "seen")  # an unknown GPU type and job types: the pooled model's mean
    assert all(0.3 < r < 0.8 for r in new)
    assert prior.knows("t4", "x", "z") and prior.knows("a100", "x", "y")  # seen types, on any GPU type
    assert not prior.knows("t4", "x", "never") and not prior.knows("a100", "never", "seen")
    out = leave_pair_out_table(table)
    assert out.ratios[("t4", "w", "w")] == (0.0, 0.0)  # memory facts are kept
    held = out.ratios[("t4", "z", "z")]
    assert held != (0.8, 0.8) and all(math.isfinite(r) and r > 0 for r in held)


def test_exploration_is_load_aware_and_the_earlier_rule_explores_in_every_round() -> None:
    calm, busy = [1, 1], [1, 1, 2]  # GPU counts the round's jobs ask for, on 4 GPUs
    assert not contended(calm, 4) and contended(busy, 4)  # the default: >= 1x the GPUs
    always = ExploreConfig(contention=0.0)
    assert contended([], 4, always) and contended(calm, 4, always)
    assert contended(calm, 4, ExploreConfig(contention=0.5)) and not contended([1], 4, ExploreConfig(contention=0.5))
    belief = PairBelief(None)  # nothing known: 0.5 each
    assert belief.planned("t4", "a", "b", explore=False) == (0.5, 0.5)  # calm: not worth trying (Σ 1)
    assert sum(belief.planned("t4", "a", "b", explore=True)) > 1.2
    measured = PairBelief(None)
    measured.observe("t4", "a", "b", 0.3, 0.35)
    assert measured.planned("t4", "a", "b", explore=False) == (0.0, 0.0)  # a pair that hurts splits in any round
    table = belief.planning_table({"t4": ["a", "b"]}, explore=False)
    assert table.ratios[("t4", "a", "b")] == (0.5, 0.5)
    with pytest.raises(InputError) as info:
        ExploreConfig(contention=-1)
    assert info.value.field == "contention"


def test_serve_plans_with_the_same_load_aware_rule() -> None:
    from scheduler.learning.online import policy_table

    types = {"t4": ["a", "b"]}
    calm = policy_table(None, [], types, predicted=False, demands=[1, 1], gpus=4)
    busy = policy_table(None, [], types, predicted=False, demands=[1, 1, 1, 1], gpus=4)
    unsaid = policy_table(None, [], types, predicted=False)  # no demands given: explores (the earlier call)
    earlier = policy_table(None, [], types, predicted=False, demands=[1, 1], gpus=4,
                           explore=ExploreConfig(contention=0.0))
    assert calm is not None and busy is not None and unsaid is not None and earlier is not None
    assert calm.ratios[("t4", "a", "b")] == (0.5, 0.5)
    assert sum(busy.ratios[("t4", "a", "b")]) > 1.2
    assert unsaid.ratios == busy.ratios == earlier.ratios
