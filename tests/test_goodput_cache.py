"""The simulator's memoised and vectorised goodput paths give exactly the estimates of the plain paths.

The plain path is one configuration at a time on a model whose caches are cleared before each call; the
fast path is one call for many configurations on a model warmed by other jobs, other progress in the same
epoch and other tuples of the same configurations (what the ILP does every round). The same holds for the
memoised memory-checked pair lookups, the shapes kept across rounds and the pair-column split table; the pair
memory split keeps a member at its smallest profiled local batch.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.model.cluster import Cluster, GpuType
from scheduler.model.configs import Configuration, configurations
from scheduler.model.efficiency import read_validation_curves
from scheduler.model.goodput import EstimateArrays, GoodputEstimate, ProfileGoodputModel
from scheduler.model.jobs import Job
from scheduler.sim.job_model import AccumulatingGoodput, BootstrapGoodput, MemoryCheckedTable, MemoryModel

CLUSTER = Cluster({"t4": GpuType("t4", 4, 4, 16.0), "v100": GpuType("v100", 2, 8, 32.0)})
CONFIGS = tuple(configurations(CLUSTER))
APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@lru_cache(maxsize=1)
def models() -> tuple[ProfileGoodputModel, ProfileGoodputModel]:
    """(warm, plain): two models on the bundled Sia-format profiles with validation curves."""
    from scheduler.formats.bundled import bundled_profiles_dir
    from scheduler.formats.profiles import read_gns_curves, read_sia_profiles

    root = bundled_profiles_dir()
    profiles, curves = read_sia_profiles(root), read_gns_curves(root)
    validation = read_validation_curves(root)
    return (ProfileGoodputModel(profiles, curves, validation), ProfileGoodputModel(profiles, curves, validation))


def same_epoch_twin(model: ProfileGoodputModel, job: Job, other: float) -> Job | None:
    """Another job of the same application at a progress ``other`` of the way through ``job``'s epoch (so it
    shares the memo's state key), or None when rounding puts it in another epoch."""
    curves = model.validation[job.application]
    epoch = curves.epoch(job.progress)
    lo = 0.0 if epoch == 0 else float(curves.boundaries[epoch - 1])
    hi = float(curves.boundaries[epoch]) if epoch < len(curves.boundaries) - 1 else lo + 1.0
    twin = job.with_state(name="twin", progress=lo + other * (hi - lo))
    return twin if curves.epoch(twin.progress) == epoch else None


def plain_estimate(model: ProfileGoodputModel, job: Job, c: Configuration) -> GoodputEstimate | None:
    model.clear_caches()
    return model.estimate(job, c.gpu_type, c.num_gpus, c.num_nodes)


def assert_same(arrays: EstimateArrays, expected: list[GoodputEstimate | None]) -> None:
    """Bit-for-bit: the same configurations run, at the same batch, throughput and efficiency."""
    got = arrays.to_list()
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert (g is None) == (e is None), (g, e)
        if g is not None and e is not None:
            assert (g.batch_size, g.throughput, g.efficiency) == (e.batch_size, e.throughput, e.efficiency)
            assert g.goodput == e.goodput


jobs = st.builds(
    lambda app, adaptive, batch, progress: Job("j", app, batch_size=None if adaptive else batch,
                                               adaptive=adaptive, progress=progress),
    st.sampled_from(APPS), st.booleans(), st.sampled_from([16, 64, 128, 256, 1024, 4096]),
    st.floats(min_value=0.0, max_value=2e6, allow_nan=False),
)
shape_sets = st.lists(st.sampled_from(CONFIGS), min_size=1, max_size=12)


@SETTINGS
@given(job=jobs, configs=shape_sets, other=st.floats(min_value=0.0, max_value=1.0))
def test_memoised_estimates_equal_the_plain_per_configuration_path(job: Job, configs: list[Configuration],
                                                                    other: float) -> None:
    warm, plain = models()
    # warm the caches with the same shapes as another tuple and another job of the same epoch
    twin = same_epoch_twin(warm, job, other)
    if twin is not None:
        warm.estimate_arrays(twin, list(configs))
    shapes = tuple(configs)
    first, again = warm.estimate_arrays(job, shapes), warm.estimate_arrays(job, shapes)
    expected = [plain_estimate(plain, job, c) for c in configs]
    assert_same(first, expected)
    assert_same(again, expected)
    assert not first.goodput.flags.writeable  # shared between callers: nobody may change it


def plain_bootstrap(model: BootstrapGoodput, job: Job, configs: tuple[Configuration, ...]
                    ) -> list[GoodputEstimate | None]:
    """Sia's projection one configuration at a time, as the belief is defined."""
    inner = model.inner
    out = []
    for c in configs:
        inner.inner.clear_caches()
        out.append(inner.estimate(job, c.gpu_type, c.num_gpus, c.num_nodes))
    seen = model.observed.get(job.name)
    if not seen:
        return out
    reference = next(t.name for t in model.cluster if t.name in seen)
    for i, c in enumerate(configs):
        if c.gpu_type in seen:
            continue
        ratio = model.ratio(job.application, c.gpu_type, reference)
        nodes = math.ceil(c.num_gpus / model.cluster[reference].gpus_per_node)
        inner.inner.clear_caches()
        ref = inner.estimate(job, reference, c.num_gpus, nodes) if ratio is not None else None
        if ratio is None or ref is None or out[i] is None:
            continue
        out[i] = GoodputEstimate(ref.batch_size, ref.throughput * ratio, ref.efficiency)
    return out


@SETTINGS
@given(job=jobs, configs=shape_sets, seen=st.dictionaries(st.sampled_from(["t4", "v100"]),
                                                          st.sampled_from([1, 2, 4, 8]), max_size=2))
def test_vectorised_projection_equals_the_per_configuration_projection(job: Job, configs: list[Configuration],
                                                                       seen: dict[str, int]) -> None:
    warm, plain = models()
    fast, slow = BootstrapGoodput(AccumulatingGoodput(warm), CLUSTER), BootstrapGoodput(AccumulatingGoodput(plain), CLUSTER)
    for belief in (fast, slow):
        for gpu_type, n in seen.items():
            belief.record(job.name, gpu_type, n)
    shapes = tuple(configs)
    expected = plain_bootstrap(slow, job, shapes)
    assert_same(fast.estimate_arrays(job, shapes), expected)
    assert_same(fast.estimate_arrays(job, shapes), expected)  # the projection plan, now cached


@SETTINGS
@given(a=jobs, b=jobs, gpu_type=st.sampled_from(["t4", "v100"]), n=st.sampled_from([1, 2, 4]))
def test_memoised_memory_checked_lookup_equals_the_plain_lookup(a: Job, b: Job, gpu_type: str, n: int) -> None:
    warm, _ = models()
    ratios = {(t, x, y): (0.7, 0.6) for t in ("t4", "v100") for x in APPS for y in APPS}
    table = MemoryCheckedTable(ratios, MemoryModel(AccumulatingGoodput(warm), CLUSTER))
    a, b = a.with_state(num_gpus=n), b.with_state(name="k", num_gpus=n)
    plain = table._lookup(gpu_type, a, b)
    assert table.lookup(gpu_type, a, b) == plain
    assert table.lookup(gpu_type, a.with_state(name="other", progress=a.progress + 1.0), b) == plain


def test_a_memory_checked_table_rejects_a_pair_that_does_not_fit() -> None:
    """The memo must keep the memory check: two big-batch rigid BERT jobs on a 16 GB T4 do not fit."""
    warm, _ = models()
    ratios = {("t4", "bert", "bert"): (0.7, 0.6)}
    table = MemoryCheckedTable(ratios, MemoryModel(AccumulatingGoodput(warm), CLUSTER))
    span = warm.local_batch_range("bert", "t4")
    assert span is not None
    big = Job("a", "bert", batch_size=int(span[1]), num_gpus=1)
    small = Job("s", "bert", adaptive=True)
    assert table.lookup("t4", big, big.with_state(name="b")) is None
    assert table.lookup("t4", big, big.with_state(name="b")) is None  # memoised answer
    assert table.lookup("t4", small, small.with_state(name="t")) == (0.7, 0.6)


def test_shapes_are_shared_across_rounds_and_read_only() -> None:
    from scheduler.ilp.columns import _make_shapes, shapes_for
    from scheduler.ilp.config import IlpConfig

    cfg, job = IlpConfig(), Job("a", "cifar10", adaptive=True, max_gpus=8)
    index = {c: i for i, c in enumerate(CONFIGS)}
    first = shapes_for(job, CLUSTER, CONFIGS, index, cfg, frozenset(CONFIGS))
    again = shapes_for(job.with_state(name="b"), CLUSTER, tuple(CONFIGS), dict(index), cfg, frozenset(CONFIGS))
    assert again is first
    fresh = _make_shapes(job, CLUSTER, CONFIGS, index, cfg, frozenset(CONFIGS))
    assert fresh.used == first.used and np.array_equal(fresh.reserved, first.reserved)
    assert all(c.num_gpus <= 8 for c in first.used)
    assert not first.reserved.flags.writeable


@SETTINGS
@given(a=st.sampled_from(APPS), b=st.sampled_from(APPS), gpu_type=st.sampled_from(["t4", "v100"]),
       extra=st.floats(min_value=0.0, max_value=1.0))
def test_pair_memory_never_shrinks_a_micro_batch_below_the_smallest_profiled(a: str, b: str, gpu_type: str,
                                                                           extra: float) -> None:
    """A job already at its smallest local batch beside a big one: the big one makes room (a proportional
    shrink would ask the small one for a micro-batch it cannot run, and the simulator would stop)."""
    warm, _ = models()
    memory = MemoryModel(AccumulatingGoodput(warm), CLUSTER)
    span_a, span_b = warm.local_batch_range(a, gpu_type), warm.local_batch_range(b, gpu_type)
    assert span_a is not None and span_b is not None
    small, big = span_a[0], span_b[0] + extra * (span_b[1] - span_b[0])
    if not memory.group_fits(gpu_type, (a, small), (b, span_b[0])):
        return  # the table never packs such a pair
    # the floors as the simulator passes them: the smallest profiled local batch, or the job's own if smaller
    floors = (min(span_a[0], small), min(span_b[0], big))
    la, lb = memory.group_locals(gpu_type, (a, small), (b, big), floors=floors)
    assert la == small and span_b[0] <= lb <= big
    assert memory.group_fits(gpu_type, (a, la), (b, lb))


@SETTINGS
@given(sizes_a=st.dictionaries(st.sampled_from([1, 2, 4, 8]), st.floats(0.05, 3.0), min_size=1),
       sizes_b=st.dictionaries(st.sampled_from([1, 2, 4, 8]), st.floats(0.05, 3.0), min_size=1),
       n=st.sampled_from([2, 4, 8]), va=st.floats(0.05, 3.0), vb=st.floats(0.05, 3.0),
       p=st.sampled_from([-1.0, -0.5, 0.5, 1.0]))
def test_split_table_answers_as_the_per_configuration_split_test(sizes_a: dict[int, float], sizes_b: dict[int, float],
                                                                 n: int, va: float, vb: float, p: float) -> None:
    """The pair-column filter's table (built once per pair and GPU type) decides as split_beats_pair does."""
    from scheduler.ilp.columns import JobColumns, _best_split, split_beats_pair
    from scheduler.ilp.config import IlpConfig
    from scheduler.ilp.objective import Objective

    index = {c: i for i, c in enumerate(CONFIGS)}
    cfg = IlpConfig(p=p)

    def columns(sizes: dict[int, float]) -> JobColumns:
        est = GoodputEstimate(64, 100.0)
        return JobColumns(single={index[Configuration("v100", 1, s)]: (g, est) for s, g in sizes.items()})

    a, b, c = columns(sizes_a), columns(sizes_b), Configuration("v100", 1, n)
    expected = split_beats_pair(a, b, c, CONFIGS, va, vb, cfg)
    fresh_a, fresh_b = columns(sizes_a), columns(sizes_b)
    got = Objective.of(cfg).column_weight((va, vb)) >= _best_split({}, fresh_a, fresh_b, c, CONFIGS, cfg)
    assert got == expected


@SETTINGS
@given(job=jobs, c=st.sampled_from(CONFIGS), cap=st.sampled_from([None, 4.0, 16.0, 64.0]),
       other=st.floats(min_value=0.0, max_value=1.0))
def test_memoised_accumulating_answers_equal_the_unmemoised_ones(job: Job, c: Configuration, cap: float | None,
                                                                 other: float) -> None:
    """The simulator's re-reads (estimate, and the micro-batched rate under a partner's memory cap) kept by the
    profile model's state key answer as computing them afresh, after a job of the same epoch warmed the memo."""
    warm, plain = models()
    fast, slow = AccumulatingGoodput(warm), AccumulatingGoodput(plain)
    slow._memo._key_of = None  # no memo: every call computed
    twin = same_epoch_twin(warm, job, other)
    if twin is not None:
        fast.estimate(twin, c.gpu_type, c.num_gpus, c.num_nodes)
        fast.accumulated(twin, c.gpu_type, c.num_gpus, c.num_nodes, cap)
    for _ in range(2):  # the first call fills the memo (unless the twin did), the second reads it
        plain.clear_caches()
        assert fast.estimate(job, c.gpu_type, c.num_gpus, c.num_nodes) == slow.estimate(
            job, c.gpu_type, c.num_gpus, c.num_nodes)
        plain.clear_caches()
        assert fast.accumulated(job, c.gpu_type, c.num_gpus, c.num_nodes, cap) == slow.accumulated(
            job, c.gpu_type, c.num_gpus, c.num_nodes, cap)


def test_a_model_without_validation_curves_keeps_no_memo() -> None:
    """Without Sia's curves the efficiency moves with the progress itself: nothing may be kept by epoch."""
    warm, _ = models()
    bare = ProfileGoodputModel(warm.profiles, warm.curves)
    acc = AccumulatingGoodput(bare)
    job = Job("j", "cifar10", batch_size=4096, adaptive=False, progress=10.0)
    assert bare.state_key(job) is None
    acc.estimate(job, "t4", 1)
    acc.accumulated(job, "t4", 1, 1, 8.0)
    assert not acc._memo._answers


@given(progress=st.one_of(st.floats(min_value=-1.0, max_value=3e6), st.just(float("nan"))),
       app=st.sampled_from(APPS))
def test_epoch_by_bisect_is_numpys_search(progress: float, app: str) -> None:
    curves = models()[0].validation[app]
    expected = min(int(np.searchsorted(curves.boundaries, progress, side="right")), len(curves.boundaries) - 1)
    assert curves.epoch(progress) == expected
    for b in curves.boundaries[:5]:  # on a boundary: past it, as searchsorted's right side
        assert curves.epoch(float(b)) == min(int(np.searchsorted(curves.boundaries, b, side="right")),
                                             len(curves.boundaries) - 1)


def test_triangulating_with_the_profiles_answers_as_triangulating_on_first_query() -> None:
    """Interpolated step times between profiled rows are the same whether the rows were triangulated when
    the profiles were read (what :class:`StepTimes` does now) or on the first query."""
    from scheduler.model import step_time

    warm, _ = models()
    rows = warm.profiles[(warm.profiles["application"] == "bert") & (warm.profiles["gpu_type"] == "t4")]
    local = np.array([4.0, 5.5, 7.5, 12.0])
    saved = dict(step_time._TRIANGULATIONS)
    try:
        step_time._TRIANGULATIONS.clear()
        lazy = step_time._Interpolator(rows)
        lazy_answer = lazy.times(local, 10, 5)  # 10 GPUs on 5 nodes: no profiled line, so across the rows
        step_time._TRIANGULATIONS.clear()
        eager = step_time._Interpolator(rows)
        eager.prepare()
        assert eager._nd is not None
        eager_answer = eager.times(local, 10, 5)
    finally:
        step_time._TRIANGULATIONS.clear()
        step_time._TRIANGULATIONS.update(saved)
    for a, b in zip(lazy_answer, eager_answer):
        np.testing.assert_array_equal(a, b)
    assert not np.isnan(lazy_answer[0]).any()
