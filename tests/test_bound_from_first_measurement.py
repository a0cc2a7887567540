"""A slowdown bound holds from the first measurement of a group (``colocate serve``): a member not yet measured alone
is judged against its solo estimate (a profile, else the prior) with the basis said; groups of three are held to
their measured ratios as pairs are; a measured ratio that breaks a bound keeps the group out of the plan from its
first sample, whatever the belief's exploration says; and a job about to finish keeps its placement (the simulator
and serve share the rule)."""

from __future__ import annotations

from typing import Any

from scheduler.ilp.config import IlpConfig
from scheduler.ilp.policy import PackingPolicy
from scheduler.learning.measured import learned_ratios
from scheduler.learning.online import LearnedGoodputModel, policy_table, round_job_types
from scheduler.model.cluster import cluster_from_dict
from scheduler.model.colocation import BoundedTable, ColocationTable
from scheduler.model.goodput import TableGoodputModel
from scheduler.model.jobs import FINISHING_ROUNDS, Job, JobRequirements, finishing
from scheduler.model.policy import RoundContext
from scheduler.service import contract
from scheduler.service.jobs.jobspec import JobSpec
from scheduler.service.stability import finishing_groups, remaining_s
from scheduler.service.state.store import JobRow

ONE_GPU = cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 80}}})


def _m(app: str, iter_time_s: float, count: int, partner: str = "", batch: int = 16) -> dict[str, Any]:
    """A ``measurements`` row: one configuration's mean iteration time (alone when ``partner`` is empty)."""
    return {"application": app, "gpu_type": "g", "num_gpus": 1, "batch_size": batch, "partner_type": partner,
            "iter_time_s": iter_time_s, "count": count}


def _row(name: str, app: str, partner: str | None, *, rate: float | None = None, step: int = 0, steps: int = 1000,
         max_slowdown: float | None = None, group: str = "g00001") -> JobRow:
    spec = JobSpec(name=name, application=app, command="true", batch_size=16, steps=steps,
                   requirements=JobRequirements(max_slowdown=max_slowdown))
    return JobRow(name=name, spec=spec, state="running", submitted_at=0.0, started_at=1.0, finished_at=None,
                  cancel_requested=False, restarts=0, crashes=0, gpu_type="g", num_gpus=1, batch_size=16,
                  partner=partner, nodes=(0,), gpus=(0,), group_key=group, step=step, samples=step * 16,
                  samples_per_s=rate, sample_step=step, sample_elapsed=1.0, error="")


def _estimate(times: dict[str, tuple[float, str]]) -> contract.SoloEstimate:
    return lambda app, gpu, n, batch: times.get(app)


def test_a_member_never_measured_alone_is_split_against_its_estimate_with_the_basis_said() -> None:
    """slow steps 4.9x its profile's solo time beside fast; neither ever ran alone. Against the estimate the bound
    2.5 is broken: the group is split, and the event says the solo time was estimated from the profile."""
    rows = [_row("slow", "a", "fast"), _row("fast", "b", "slow")]
    measured = [_m("a", 0.49, 3, "b@16"), _m("b", 0.11, 3, "a@16")]
    estimate = _estimate({"a": (0.1, "profile"), "b": (0.1, "prior")})
    broken = contract.broken_bounds({"g00001": rows}, measured, 2.5, estimate)
    assert [(b.job, b.basis) for b in broken["g00001"]] == [("slow", "profile")]
    assert "slowdown 4.90" in broken["g00001"][0].text() and "estimated from its profile" in broken["g00001"][0].text()
    # measured alone later: the measurement is the yardstick, whatever the estimate says
    alone = [*measured, _m("a", 0.45, 5), _m("b", 0.1, 5)]
    assert not contract.broken_bounds({"g00001": rows}, alone, 2.5, estimate)


def test_the_slowdown_is_shown_from_the_first_measurement_with_its_basis() -> None:
    """What ``jobs --json`` and ``colocate_job_slowdown`` show: from the group's first measured rate, against the
    solo time the server judges by (kept in the state each round), with its basis."""
    slow = _row("slow", "a", "fast", rate=16 / 0.49)
    rows = [slow, _row("fast", "b", "slow", rate=16 / 0.11), _row("solo", "c", None, rate=100.0)]
    estimates = contract.solo_estimates(rows, [_m("b", 0.1, 2)], _estimate({"a": (0.1, "prior"), "c": (0.1, "prior")}))
    assert estimates == {"slow": [0.1, "prior"]}  # fast was measured alone; a job alone has no slowdown
    seen = contract.measured_slowdown(slow, contract.SoloTimes([]), {"slow": (0.1, "prior")})
    assert seen is not None and abs(seen[0] - 4.9) < 1e-9 and seen[1] == "prior"
    fast = contract.measured_slowdown(rows[1], contract.SoloTimes([_m("b", 0.1, 2)]), {})
    assert fast is not None and abs(fast[0] - 1.1) < 1e-9 and fast[1] == "measured"


def test_a_group_of_three_is_held_to_its_measured_ratios() -> None:
    """Pairs that each pay predict a triple within the bound 3.75; measured, the triple slowed x 5x: not planned."""
    table = ColocationTable.from_rows([("g", t, u, 0.8, 0.8) for t, u in (("x@16", "y@16"), ("x@16", "z@16"),
                                                                         ("y@16", "z@16"))])
    jobs = [Job("x", "x", batch_size=16), Job("y", "y", batch_size=16), Job("z", "z", batch_size=16)]
    assert BoundedTable(table.ratios, inner=table, default_bound=3.75).triple_ratios("g", jobs) is not None
    measured = [_m("x", 0.5, 1, "y@16+z@16"), _m("x", 0.1, 4)]
    seen = contract.measured_table(table, measured)
    assert BoundedTable(table.ratios, inner=seen, default_bound=3.75).triple_ratios("g", jobs) is None
    assert BoundedTable(table.ratios, inner=seen, default_bound=6.0).triple_ratios("g", jobs) is not None


def test_a_ratio_measured_once_past_a_bound_wins_over_the_beliefs_optimism() -> None:
    """The pair was measured once at 0.73 of its solo speed (slowdown 1.37); the prior (per application) says 0.9,
    so the belief, shrunk and explored upward, still plans it above 1/1.3 (0.77). A job bounded at 1.3 is not paired
    on that belief: the measurement counts from its first sample (two were needed, and the pair was split 2 s
    after it formed)."""
    prior = ColocationTable.from_rows([("g", "a", "b", 0.9, 0.9)])
    measurements = [_m("a", 0.1, 5), _m("b", 0.1, 5), _m("a", 0.1 / 0.73, 1, "b@16"), _m("b", 0.105, 1, "a@16")]
    model = LearnedGoodputModel(measurements, {})
    jobs = [Job("a", "a", batch_size=16, requirements=JobRequirements(max_slowdown=1.3)), Job("b", "b", batch_size=16)]
    table = policy_table(prior, learned_ratios(measurements, model), round_job_types(["g"], [("a", 16), ("b", 16)]),
                         predicted=False)
    assert table is not None and table.lookup("g", jobs[0], jobs[1])[0] > 1 / 1.3  # what the belief plans with
    seen = contract.measured_table(table, measurements, model.solo_time)
    assert BoundedTable(table.ratios, inner=seen, default_bound=2.5).lookup("g", jobs[0], jobs[1]) is None
    goodput = TableGoodputModel({(app, "g", 1): 160.0 for app in ("a", "b")})
    decision = PackingPolicy(IlpConfig(p=1.0, min_benefit=0.0)).allocate(jobs, ONE_GPU, RoundContext(goodput,
                                                                                                  colocation=seen))
    assert all(a.partner is None for a in decision.allocations)
    # the same pair running together now is judged on two samples, as serve splits it with a split event saying
    # why: one sample does not drop its column silently
    running = [j.with_state(current_gpu_type="g", current_num_gpus=1, current_partner=o.name, age_s=600.0)
               for j, o in zip(jobs, jobs[::-1])]
    bounded = BoundedTable(table.ratios, inner=seen, default_bound=2.5)
    assert bounded.lookup("g", running[0], running[1]) is not None
    twice = [*measurements[:2], _m("a", 0.1 / 0.721, 2, "b@16"), measurements[3]]
    seen_twice = contract.measured_table(table, twice, model.solo_time)
    assert BoundedTable(table.ratios, inner=seen_twice, default_bound=2.5).lookup("g", *running) is None


def test_a_job_about_to_finish_keeps_its_group_in_serve() -> None:
    """At step 29,997 of 30,000 at 16 steps/s the job ends in well under two rounds: it and its partner are held."""
    near = _row("near", "a", "other", rate=16 * 16.0, step=29_997, steps=30_000)
    other = _row("other", "b", "near", rate=160.0, step=10, steps=30_000)
    far = _row("far", "c", None, rate=160.0, step=10, steps=30_000, group="g00002")
    assert remaining_s(near) is not None and remaining_s(near) < 1.0
    assert finishing_groups([near, other, far], round_s=60.0) == {"near", "other"}
    assert finishing_groups([_row("new", "a", None, rate=None, step=29_999, steps=30_000)], 60.0) == set()
    # at its target, never measured (a short job): nothing left, so it ends where it is (a stop for a change
    # killed such a job's epilogue in the chaos test: it was completed, its last line never written)
    done = _row("done", "a", None, rate=None, step=30_000, steps=30_000)
    assert remaining_s(done) == 0.0 and finishing_groups([done], 60.0) == {"done"}
    trio = [_row("near", "a", "b,c", rate=256.0, step=29_997, steps=30_000), _row("b", "b", "near,c", rate=160.0),
            _row("c", "c", "b,near", rate=160.0)]
    assert finishing_groups(trio, 60.0) == set()  # a held member would split a group of three: not held


def test_the_finishing_rule_is_one_for_the_simulator_and_serve() -> None:
    from scheduler.formats.workload_jobs import WorkloadJob
    from scheduler.sim.job_state import JobState

    assert FINISHING_ROUNDS == 2.0 and finishing(119.0, 60.0) and not finishing(121.0, 60.0) and not finishing(None, 60)
    assert finishing(119.0, 60.0, group_size=2) and not finishing(119.0, 60.0, group_size=3)
    st = JobState(WorkloadJob("j", "a", 0.0, 1, 32, work=1000.0), work=1000.0, m0=32.0, done=900.0, rate=1.0)
    assert st.remaining_s() == 100.0 and finishing(st.remaining_s(), 60.0)


def test_a_damaged_solo_estimate_record_is_set_aside_not_shown(tmp_path) -> None:
    """The estimates a round keeps in the state are a stored row (untrusted): one malformed is set aside, and
    ``jobs`` shows no slowdown from it."""
    from scheduler.service.state.store import StateStore

    state = StateStore(tmp_path / "state")
    with state.transaction() as db:
        db.set_meta(contract.SOLO_KEY, '{"slow": [0.1, "prior"]}')
    assert contract.load_solo_estimates(state) == {"slow": (0.1, "prior")}
    for bad in ('{"slow": [1e400, "prior"]}', '{"slow": [0.1, "guess"]}', '{"slow": [-1, "prior"]}', "[1]"):
        with state.transaction() as db:
            db.set_meta(contract.SOLO_KEY, bad)
        assert contract.load_solo_estimates(state) == {}
