"""The pair belief, the exploration rule and the prior: shrinkage, intervals, splitting, leave-pair-out."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import InputError
from scheduler.ilp.config import IlpConfig
from scheduler.learning.explore import ExploreConfig, contended, hurts, planning_ratios, z_of
from scheduler.learning.pairs import PairBelief, PairConfig, PriorAnswer, table_prior
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
    belief = PairBelief(None)  # nothing known: time-slicing, with the spread of ratios around it
    fresh = belief.planned("t4", "a", "b")
    assert sum(fresh) > 1 + IlpConfig().min_benefit  # worth trying when jobs wait
    belief.observe("t4", "a", "b", 0.5, 0.5, count=50)
    settled = belief.planned("t4", "a", "b")
    assert sum(settled) < sum(fresh) and sum(settled) == pytest.approx(1.0, abs=0.05)
    assert max(planning_ratios(0.94, 0.94, 0.3, 0.3)) <= 0.95  # the optimism is bounded
    assert planning_ratios(0.97, 0.5, 0.3, 0.0) == (0.97, 0.5)  # ... but never below the belief itself


def test_the_optimism_is_the_upper_end_of_the_priors_own_interval() -> None:
    def prior(width: float) -> PairBelief:
        answer = PriorAnswer(0.45, 0.5, (0.45 / width, 0.45 * width), (0.5 / width, 0.5 * width), 0.8)
        return PairBelief(lambda gpu, a, b: answer)

    sure, unsure = prior(1.05), prior(2.5)
    z = ExploreConfig().z / z_of(0.8)  # the rule's interval (20 %) within the prior's (80 %)
    assert sure.planned("t4", "a", "b") == pytest.approx((0.45 * 1.05 ** z, 0.5 * 1.05 ** z))
    assert sum(sure.planned("t4", "a", "b")) < 1.0 < sum(unsure.planned("t4", "a", "b"))  # tried only if unsure
    assert sure.planned("t4", "a", "b", explore=False) == pytest.approx((0.45, 0.5))  # calm: the prediction
    unsure.observe("t4", "a", "b", 0.55, 0.5)  # one measurement outweighs a wide prior ...
    est = unsure.estimate("t4", "a", "b")
    assert est.ratio_a == pytest.approx(0.55, rel=0.02) and est.sd_a < 0.06
    assert sum(unsure.planned("t4", "a", "b")) < 1.15  # ... and the pair is not tried again on hope
    given = table_prior(ColocationTable.from_rows([("t4", "a", "b", 0.55, 0.55)]))  # a table without intervals:
    assert sum(PairBelief(given).planned("t4", "a", "b")) < 1.2  # as sure as one measured sample
    with pytest.raises(InputError) as info:
        ExploreConfig(level=1.2)
    assert info.value.field == "level"
    assert sum(PairBelief(None, explore=ExploreConfig(level=0.8)).planned("t4", "x", "y")) > sum(
        PairBelief(None).planned("t4", "x", "y"))  # a wider interval, more hope


def test_a_pair_that_hurts_is_split_after_one_or_two_rounds_of_samples() -> None:
    optimistic = table_prior(ColocationTable.from_rows([("t4", "a", "b", 0.8, 0.8)]))
    belief = PairBelief(optimistic)
    assert sum(belief.planned("t4", "a", "b")) > 1.5
    belief.observe("t4", "a", "b", 0.3, 0.35)  # one round: δ < 1 far beyond its interval
    assert belief.planned("t4", "a", "b") == (0.0, 0.0)
    assert hurts(0.3, 0.35, 1) and not hurts(0.495, 0.495, 1)  # 0.99 is within the interval of 1: not yet
    assert hurts(0.492, 0.492, 1)  # one round decides a pair at 0.984 ...
    assert not hurts(0.495, 0.495, 1) and hurts(0.495, 0.495, 2)  # ... two rounds one at 0.99
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


def test_the_prior_knows_every_pair_with_an_interval_and_leave_pair_out_never_sees_the_pair() -> None:
    import random

    from scheduler.learning.predictor.prior import fit_table_prior, leave_pair_out_table, table_frame

    rng = random.Random(3)  # ten job types: a sensitivity and a pressure each, and some noise
    names = ["x", "y", "z", *(f"t{k}" for k in range(7))]
    sense = {n: rng.uniform(0.4, 0.9) for n in names}
    press = {n: rng.uniform(0.6, 1.0) for n in names}
    noisy = lambda a, b: min(sense[a] * press[b] * rng.uniform(0.9, 1.1), 1.0)  # noqa: E731
    rows = [("t4", a, b, noisy(a, b), noisy(b, a)) for i, a in enumerate(names) for b in names[i:]]
    rows.append(("t4", "w", "w", 0.0, 0.0))
    table = ColocationTable.from_rows(rows)
    prior = fit_table_prior(table_frame(table))
    known = prior("t4", "x", "z")
    assert known.ratio_a == pytest.approx(table.ratios[("t4", "x", "z")][0], rel=0.15)
    assert known.interval_a is not None and known.interval_a[0] < known.ratio_a < known.interval_a[1]
    new = prior("a100", "never", "seen")  # an unknown GPU type and job types: the pooled model's mean
    assert all(0.3 < r < 0.8 for r in (new.ratio_a, new.ratio_b))
    unseen = prior("t4", "x", "never")  # a type it never saw: a wider interval than a type it knows
    assert unseen.interval_b is not None and known.interval_b is not None
    assert unseen.interval_b[1] / unseen.interval_b[0] > known.interval_b[1] / known.interval_b[0]
    out = leave_pair_out_table(table)
    assert out.ratios[("t4", "w", "w")] == (0.0, 0.0)  # memory facts are kept
    held = out.ratios[("t4", "z", "z")]
    assert held != table.ratios[("t4", "z", "z")] and all(math.isfinite(r) and r > 0 for r in held)
    (low_a, high_a), _ = out.intervals[("t4", "x", "z")]
    assert low_a < out.ratios[("t4", "x", "z")][0] < high_a
    assert out.intervals[("t4", "z", "x")][1] == (low_a, high_a)  # both orders, swapped


def test_exploration_is_load_aware_and_the_earlier_rule_explores_in_every_round() -> None:
    calm, busy = [1, 1], [1, 1, 2]  # GPU counts the round's jobs ask for, on 4 GPUs
    assert not contended(calm, 4) and contended(busy, 4)  # the default: >= 1x the GPUs
    always = ExploreConfig(contention=0.0)
    assert contended([], 4, always) and contended(calm, 4, always)
    assert contended(calm, 4, ExploreConfig(contention=0.5)) and not contended([1], 4, ExploreConfig(contention=0.5))
    belief = PairBelief(None)  # nothing known: 0.5 each
    assert belief.planned("t4", "a", "b", explore=False) == (0.5, 0.5)  # calm: not worth trying (Σ 1)
    assert sum(belief.planned("t4", "a", "b", explore=True)) > 1 + IlpConfig().min_benefit
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
    assert sum(busy.ratios[("t4", "a", "b")]) > 1 + IlpConfig().min_benefit
    assert unsaid.ratios == busy.ratios == earlier.ratios


def test_serve_plans_each_pair_at_the_top_of_the_predictors_interval_wider_for_a_model_no_table_has() -> None:
    from scheduler.learning.online import _predicted_prior, policy_table

    types = {"v100": ["LM@20", "ResNet-50@64", "mymodel@8"]}  # Gavel's V100 pairs know the first two
    busy = policy_table(None, [], types, predicted=True, demands=[8], gpus=4)
    calm = policy_table(None, [], types, predicted=True, demands=[1], gpus=4)
    assert busy is not None and calm is not None
    prior = _predicted_prior(None)
    known, new = prior("v100", "LM@20", "ResNet-50@64"), prior("v100", "mymodel@8", "LM@20")
    assert known.interval_a is not None and new.interval_a is not None
    width = lambda i: i[1] / i[0]  # noqa: E731
    assert width(new.interval_a) > width(known.interval_a)  # a model no table has: a wider interval
    z = ExploreConfig().z / z_of(0.8)  # the rule's interval (30 %) within the predictor's (80 %)
    for (a, b), answer in ((("LM@20", "ResNet-50@64"), known), (("mymodel@8", "LM@20"), new)):
        low, high = answer.interval_a
        centre = math.sqrt(low * high)
        assert calm.ratios[("v100", a, b)][0] == pytest.approx(centre)  # calm: its centre
        top = centre * (high / centre) ** z  # contended: the top of the rule's interval (capped)
        assert busy.ratios[("v100", a, b)][0] == pytest.approx(min(top, max(0.95, centre)))
