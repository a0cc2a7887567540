"""Truth and belief apart in the simulator: the policy plans with a belief learned from the pairs it runs."""

from __future__ import annotations

import pytest

from common.errors import InputError
from scheduler.formats.workload_jobs import Workload, WorkloadJob
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.policy import PackingPolicy
from scheduler.learning.belief import noisy_table, parse_belief
from scheduler.model.cluster import cluster_from_dict
from scheduler.model.colocation import ColocationTable
from scheduler.model.goodput import TableGoodputModel
from scheduler.model.policy import PolicyTraits
from scheduler.sim.config import SimConfig
from scheduler.sim.simulator import Simulator

GOODPUT = TableGoodputModel({("a", "g", 1): 10.0, ("b", "g", 1): 10.0})
ONE_GPU = cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
TWO_JOBS = Workload("two", (WorkloadJob("A", "a", 0.0, 1, 32, work=12_000.0),
                            WorkloadJob("B", "b", 0.0, 1, 32, work=18_000.0)))


class Spy:
    """The packing policy, recording the colocation table it was handed each round."""

    traits = PolicyTraits(adaptive=True, max_group_size=2)

    def __init__(self) -> None:
        self.inner = PackingPolicy(IlpConfig(p=1.0), name="colocate")
        self.config, self.name, self.seen = self.inner.config, "colocate", []

    def allocate(self, jobs, cluster, context):  # noqa: ANN001, ANN201 - the Policy protocol
        self.seen.append(context.colocation)
        return self.inner.allocate(jobs, cluster, context)


def run(truth: tuple[float, float], belief: str) -> tuple[Simulator, Spy, object]:
    spy = Spy()
    config = SimConfig(round_s=60.0, restart_cost_s={}, default_restart_cost_s=0.0, slowdown={}, belief=belief)
    sim = Simulator(ONE_GPU, TWO_JOBS, spy, GOODPUT, ColocationTable.from_rows([("g", "a", "b", *truth)]), config,
                    adaptive=True)
    return sim, spy, sim.run()


def test_the_policy_never_reads_the_truth_and_learns_it_from_the_pairs_it_runs() -> None:
    sim, spy, result = run((0.8, 0.6), "none")
    from scheduler.model.jobs import Job

    ja, jb = Job("A", "a", batch_size=32), Job("B", "b", batch_size=32)
    assert all(table is not sim.colocation for table in spy.seen)
    first = spy.seen[0].lookup("g", ja, jb)
    assert first[0] == first[1] and first[0] != 0.8  # nothing known: the same optimistic guess for both
    frame = result.belief
    assert len(frame) >= 2 and (frame["truth_a"] == 0.8).all()
    errors = (frame["belief_a"] - frame["truth_a"]).abs().to_numpy()
    assert errors[-1] < errors[0] < abs(0.5 - 0.8)  # each sample moves the belief toward the truth
    assert result.summary["packed_fraction"] > 0.5
    assert result.meta["belief"]["observations"] == len(frame) and result.meta["model"]["belief"] == "none"


def test_a_pair_that_hurts_is_split_within_two_rounds() -> None:
    _, _, result = run((0.3, 0.35), "none")  # together they do 0.65 of one job alone
    packed_rounds = set(result.allocations.loc[result.allocations["partner"].notna(), "round"])
    assert packed_rounds and max(packed_rounds) <= 1
    assert len(result.belief) == len(packed_rounds)


def test_truth_is_the_default_and_the_policy_then_reads_the_true_table_itself() -> None:
    sim, spy, result = run((0.8, 0.6), "truth")
    assert sim.learner is None and all(table is sim.colocation for table in spy.seen)
    assert result.belief is None and str(SimConfig().belief) == "truth"
    _, _, learned = run((0.8, 0.6), "table:scheduler/examples/colocation-small.csv")  # a table without this pair
    assert learned.summary["completed"] == 2


def test_belief_values_are_checked_and_the_noisy_prior_is_seeded_and_bounded() -> None:
    assert parse_belief("noisy:0.3").sigma == 0.3 and parse_belief("table:x.csv").path == "x.csv"
    for bad in ("oracle", "noisy:", "noisy:-1", "table:", "predicted:3"):
        with pytest.raises(InputError) as info:
            parse_belief(bad)
        assert info.value.field == "belief"
    with pytest.raises(InputError):
        SimConfig(belief="nope")
    truth = ColocationTable.from_rows([("g", "a", "b", 0.8, 0.6), ("g", "a", "a", 0.0, 0.0)])
    one, two = noisy_table(truth, 0.3, seed=1), noisy_table(truth, 0.3, seed=1)
    assert one.ratios == two.ratios and one.ratios[("g", "a", "b")] != (0.8, 0.6)
    assert one.ratios[("g", "a", "a")] == (0.0, 0.0) and max(max(r) for r in one.ratios.values()) <= 1.5
    with pytest.raises(InputError) as info:
        run((0.8, 0.6), "table:/nonexistent.csv")
    assert info.value.field == "belief"


def test_a_calm_cluster_plans_unknown_pairs_without_optimism() -> None:
    from scheduler.model.jobs import Job

    four = cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 4, "memory_gb": 16}}})
    ja, jb = Job("A", "a", batch_size=32), Job("B", "b", batch_size=32)
    spy = Spy()
    config = SimConfig(round_s=60.0, restart_cost_s={}, default_restart_cost_s=0.0, slowdown={}, belief="none")
    sim = Simulator(four, TWO_JOBS, spy, GOODPUT, ColocationTable.from_rows([("g", "a", "b", 0.8, 0.6)]), config,
                    adaptive=True)
    sim.run()
    # two 1-GPU jobs on 4 GPUs: calm, so the unknown pair is planned as time-slicing, not tried
    assert spy.seen[0].lookup("g", ja, jb) == (0.5, 0.5)


def test_priors_carry_their_intervals_and_a_simulated_sample_is_exact() -> None:
    from scheduler.learning.belief import SAMPLE_NOISE, SimBelief, parse_belief
    from scheduler.learning.predictor.prior import leave_pair_out_table

    truth = ColocationTable.from_rows([("g", "a", "b", 0.8, 0.6), ("g", "a", "a", 0.0, 0.0)])
    noisy = noisy_table(truth, 0.3, seed=1)
    (low, high), _ = noisy.intervals[("g", "a", "b")]
    assert low < noisy.ratios[("g", "a", "b")][0] < high  # the interval the noise implies
    assert ("g", "a", "a") not in noisy.intervals  # infeasible: no interval
    rows = [("g", x, y, 0.4 + 0.05 * i, 0.5 + 0.03 * j) for i, x in enumerate("abcde") for j, y in enumerate("abcde")
            if x <= y]
    predicted = leave_pair_out_table(ColocationTable.from_rows(rows))
    assert set(predicted.intervals) == {k for k, (ra, rb) in predicted.ratios.items() if ra > 0}
    learner = SimBelief(parse_belief("predicted"), ColocationTable.from_rows(rows), lambda t: t)
    assert learner.belief.explore.sigma == SAMPLE_NOISE  # the truth's own ratio: as exact as a GPU's repeat
    hope = lambda: learner.belief.planned("g", "a", "c")[0] / learner.belief.estimate("g", "a", "c").ratio_a  # noqa
    before = hope()
    learner.belief.observe("g", "a", "c", 0.45, 0.55)
    assert learner.belief.planned("g", "a", "c") == pytest.approx((0.45, 0.55), rel=0.01)
    assert before > 1.01 and hope() < 1.005  # measured: planned at what it measured, no more hope
