"""δ, slowdowns, overlap window and confidence intervals against hand-computed examples."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profiler.measure.metrics import (
    JobTiming,
    delta,
    iteration_stats,
    mean_ci,
    overlap_window,
    slowdowns,
    throughput_sum,
)


def test_delta_of_a_pair_by_hand() -> None:
    # t = 0.10 s and 0.20 s alone; 0.15 s and 0.30 s together: δ = 0.30 / 0.30 = 1.0
    assert delta([0.10, 0.20], [0.15, 0.30]) == pytest.approx(1.0)
    # Perfect overlap (no interference): δ = (0.1 + 0.1) / 0.1 = 2
    assert delta([0.1, 0.1], [0.1, 0.1]) == pytest.approx(2.0)
    # Both twice as slow: δ = 0.2 / 0.2 = 1 (no gain, no loss)
    assert delta([0.1, 0.1], [0.2, 0.2]) == pytest.approx(1.0)
    # Worse than back to back
    assert delta([0.1, 0.1], [0.25, 0.25]) == pytest.approx(0.8)


def test_slowdowns_and_throughput_sum_by_hand() -> None:
    assert slowdowns([0.1, 0.2], [0.15, 0.3]) == pytest.approx([1.5, 1.5])
    assert throughput_sum([0.1, 0.2], [0.15, 0.3]) == pytest.approx(2 / 1.5)
    # triple
    assert delta([1.0, 2.0, 3.0], [2.0, 4.0, 5.0]) == pytest.approx(6.0 / 5.0)
    assert throughput_sum([1.0, 2.0, 3.0], [2.0, 4.0, 5.0]) == pytest.approx(0.5 + 0.5 + 0.6)


@given(st.lists(st.tuples(st.floats(0.001, 10), st.floats(0.001, 10)), min_size=1, max_size=3))
def test_delta_never_exceeds_throughput_sum(pairs: list[tuple[float, float]]) -> None:
    solo = [p[0] for p in pairs]
    colocated = [p[1] for p in pairs]
    assert delta(solo, colocated) <= throughput_sum(solo, colocated) * (1 + 1e-9)


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError):
        delta([0.1], [0.1, 0.2])
    with pytest.raises(ValueError):
        delta([0.0], [0.1])


def test_only_the_overlap_window_counts() -> None:
    # job A: starts at 0, iterations of 1 s until 10; job B starts at 2.5, iterations of 2 s until 8.5
    a = JobTiming(0.0, [float(t) for t in range(1, 11)])
    b = JobTiming(2.5, [4.5, 6.5, 8.5])
    window = overlap_window([a, b])
    assert window == (2.5, 8.5)
    stats_a = iteration_stats(a, window)
    # A's boundaries inside [2.5, 8.5]: 3,4,5,6,7,8 -> 5 whole iterations of 1 s
    assert stats_a.iterations == 5 and stats_a.mean_s == pytest.approx(1.0)
    stats_b = iteration_stats(b, window)
    assert stats_b.iterations == 3 and stats_b.mean_s == pytest.approx(2.0)


def test_jobs_that_never_overlap_have_an_empty_window() -> None:
    a = JobTiming(0.0, [1.0, 2.0])
    b = JobTiming(5.0, [6.0, 7.0])
    lo, hi = overlap_window([a, b])
    assert hi < lo
    assert iteration_stats(a, (lo, hi)).iterations == 0


def test_mean_ci_by_hand() -> None:
    ci = mean_ci([1.0, 2.0, 3.0])
    # mean 2, sd 1, n 3, t(0.975, 2) = 4.303 -> half width 4.303 / sqrt(3)
    assert ci.mean == pytest.approx(2.0)
    assert ci.half_width == pytest.approx(4.303 / math.sqrt(3), rel=1e-4)
    single = mean_ci([5.0])
    assert single.mean == 5.0 and math.isnan(single.half_width)
    assert mean_ci([float("nan"), 1.0, 1.0]).n == 2
