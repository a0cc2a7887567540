"""The live scheduler's pieces without a cluster: job files, the state database, online learning, the round diff,
the executor registry. Fast; real SQLite, real policy (the ILP) where a decision is involved."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from colocate.cli import app
from common.errors import InputError
from scheduler.formats.colocation_table import load_colocation_table
from scheduler.learning.explore import ExploreConfig
from scheduler.learning.measured import learned_ratios
from scheduler.learning.online import LearnedGoodputModel, learned_table_frame, policy_table
from scheduler.model.colocation import ColocationTable
from scheduler.service.jobs.jobspec import job_from_dict, load_job
from scheduler.service.rounds import Slot, plan_changes
from scheduler.service.state.store import QUEUED, StateStore

JOB = {"name": "a", "model": "tiny_cnn", "steps": 100, "batch_size": 8}


@pytest.mark.parametrize(("change", "field"), [
    ({"model": "nope"}, "model"),
    ({"command": "x"}, "model"),  # both model and command
    ({"steps": None}, "steps"),
    ({"samples": 10}, "steps"),  # both steps and samples
    ({"batch_size": 0}, "batch_size"),
    ({"max_batch_size": 4}, "max_batch_size"),
    ({"min_gpus": 2, "max_gpus": 1}, "max_gpus"),
    ({"adaptive": "yes"}, "adaptive"),
    ({"gpu_types": ["h200"]}, "gpu_types"),
    ({"name": "a b"}, "name"),
    ({"colour": 1}, "colour"),
])
def test_bad_job_files_are_one_line_errors_naming_the_field(change: dict, field: str) -> None:
    data = {k: v for k, v in {**JOB, **change}.items() if v is not None}
    with pytest.raises(InputError) as info:
        job_from_dict(data, source="job.yaml", gpu_types=("t4", "v100"))
    assert info.value.field == field and "job.yaml" in str(info.value) and "\n" not in str(info.value)


def test_a_command_job_keeps_its_placeholders_checked(tmp_path: Path) -> None:
    path = tmp_path / "train-b.yaml"
    path.write_text("command: 'python t.py --bs {batch_size} --oops {nope}'\nsamples: 1000\nbatch_size: 4\n")
    with pytest.raises(InputError, match="unknown placeholder"):
        load_job(path)
    path.write_text("command: 'python t.py --bs {batch_size}'\napplication: bert\nsamples: 1000\nbatch_size: 4\n")
    spec = load_job(path)
    assert (spec.name, spec.app, spec.samples, spec.steps) == ("train-b", "bert", 1000, None)


def test_submit_cancel_and_jobs_work_on_the_database_from_the_cli(tmp_path: Path) -> None:
    state = tmp_path / "state"
    job = tmp_path / "a.yaml"
    job.write_text("model: tiny_cnn\nsteps: 10\nbatch_size: 4\n")
    runner = CliRunner()
    assert runner.invoke(app, ["submit", "--state", str(state), str(job)]).output.strip() == "a"
    again = runner.invoke(app, ["submit", "--state", str(state), str(job)])
    assert again.exit_code != 0 and "already submitted" in str(again.exception)
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    assert "not valid YAML" in str(runner.invoke(app, ["submit", "--state", str(state), str(bad)]).exception)
    assert "cancel requested" in runner.invoke(app, ["cancel", "--state", str(state), "a"]).output
    missing = runner.invoke(app, ["cancel", "--state", str(state), "zz"])
    assert isinstance(missing.exception, InputError) and "no job named 'zz'" in str(missing.exception)
    listing = runner.invoke(app, ["jobs", "--state", str(state)])
    assert listing.exit_code == 0 and "queued" in listing.output
    store = StateStore(state)
    assert store.job("a").cancel_requested and store.job("a").state == QUEUED
    assert sqlite3.connect(store.path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_failed_transaction_leaves_no_trace(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.submit(job_from_dict(JOB))
    with pytest.raises(RuntimeError), store.transaction() as db:
        db.update_job("a", state="running", step=50)
        db.event("a", "started", "")
        raise RuntimeError("crash in the middle of a round")
    row = store.job("a")
    assert (row.state, row.step) == (QUEUED, 0) and [e["kind"] for e in store.events("a")] == ["submitted"]


def _measurements(store: StateStore, rows: list[tuple]) -> list[dict]:
    with store.transaction() as db:
        for row in rows:
            db.add_measurement(*row)
    return store.measurements()


def test_measurements_override_the_prior_and_calibrate_unmeasured_configurations(tmp_path: Path) -> None:
    from scheduler.model.jobs import Job

    store = StateStore(tmp_path)
    spec = job_from_dict({**JOB, "gpu_types": ["t4"]})
    prior = LearnedGoodputModel([], {"a": spec})
    job = Job("a", "tiny_cnn", batch_size=8)
    before = {n: prior.estimate(job, "t4", n).throughput for n in (1, 2)}
    rows = _measurements(store, [("tiny_cnn", "t4", 1, 8, "", 0.010), ("tiny_cnn", "t4", 1, 8, "", 0.030)])
    assert rows[0]["count"] == 2 and rows[0]["iter_time_s"] == pytest.approx(0.020)
    learned = LearnedGoodputModel(rows, {"a": spec})
    assert learned.estimate(job, "t4", 1).throughput == pytest.approx(8 / 0.020)  # measured, as measured
    scale = (8 / 0.020) / before[1]
    assert learned.estimate(job, "t4", 2).throughput == pytest.approx(before[2] * scale)  # calibrated prior
    assert learned.estimate(job, "v100", 1) is None  # not an allowed GPU type of the job


def test_a_job_measured_at_its_batch_is_scaled_from_its_own_measurement_not_a_median_over_batches(
        tmp_path: Path) -> None:
    """Two jobs of one application at two batches, each off the prior by another factor: the 2-GPU estimate of
    each keeps the prior's GPU scaling of its own 1-GPU rate (a median over both batches made the next GPU of
    the faster-than-prior one look worse than the prior says: a resize it should make was not made)."""
    from scheduler.model.jobs import Job

    store = StateStore(tmp_path)
    specs = {name: job_from_dict({**JOB, "name": name, "batch_size": b, "max_gpus": 2, "adaptive": False})
             for name, b in (("small", 8), ("big", 32))}
    prior = LearnedGoodputModel([], specs)
    jobs = {"small": Job("small", "tiny_cnn", batch_size=8), "big": Job("big", "tiny_cnn", batch_size=32)}
    gain = {name: prior.estimate(job, "t4", 2).throughput / prior.estimate(job, "t4", 1).throughput
            for name, job in jobs.items()}
    one_gpu = {"small": 8 / prior.estimate(jobs["small"], "t4", 1).throughput * 3.0,  # 3× slower than the prior
               "big": 32 / prior.estimate(jobs["big"], "t4", 1).throughput / 2.0}  # 2× faster
    rows = _measurements(store, [("tiny_cnn", "t4", 1, 8, "", one_gpu["small"]),
                                 ("tiny_cnn", "t4", 1, 32, "", one_gpu["big"])])
    learned = LearnedGoodputModel(rows, specs)
    for name, job in jobs.items():
        measured = learned.estimate(job, "t4", 1).throughput
        assert measured == pytest.approx(job.batch_size / one_gpu[name])
        assert learned.estimate(job, "t4", 2).throughput / measured == pytest.approx(gain[name])
    assert learned.calibration("tiny_cnn", "t4", 16) == pytest.approx((1 / 3 + 2) / 2)  # a batch never measured
    assert learned.calibration("tiny_cnn", "t4", 32) == pytest.approx(2.0)
    assert learned.calibration("tiny_cnn", "v100", 32) == pytest.approx((1 / 3 + 2) / 2)  # per application


def test_pair_measurements_become_ratios_with_their_sample_counts_and_an_exported_table(tmp_path: Path) -> None:
    from scheduler.model.jobs import Job

    store = StateStore(tmp_path)
    rows = _measurements(store, [
        ("tiny_cnn", "t4", 1, 8, "", 0.010), ("resnet18", "t4", 1, 4, "", 0.040),
        ("tiny_cnn", "t4", 1, 8, "resnet18@4", 0.020), ("tiny_cnn", "t4", 1, 8, "resnet18@4", 0.020),
        ("resnet18", "t4", 1, 4, "tiny_cnn@8", 0.050)])
    model = LearnedGoodputModel(rows, {})
    [pair] = learned_ratios(rows, model)
    got = {pair["type_a"]: (pair["ratio_a"], pair["n_a"]), pair["type_b"]: (pair["ratio_b"], pair["n_b"])}
    assert got == {"tiny_cnn@8": (pytest.approx(0.5), 2), "resnet18@4": (pytest.approx(0.8), 1)}
    base = ColocationTable.from_rows([("t4", "tiny_cnn", "resnet18", 0.99, 0.99), ("t4", "vgg", "vgg", 0.6, 0.6)])
    table = policy_table(base, [pair], predicted=False, explore=ExploreConfig(enabled=False))
    tiny, resnet = Job("x", "tiny_cnn", batch_size=8), Job("y", "resnet18", batch_size=4)
    a, b = table.lookup("t4", tiny, resnet)
    assert 0.5 < a < 0.99 and 0.8 < b < 0.99  # one sample pulls the prior table's 0.99 toward the measurement
    a16, _ = table.lookup("t4", Job("x", "tiny_cnn", batch_size=16), resnet)  # the per-application belief
    assert 0.5 < a16 < 0.99
    assert policy_table(base, []) is base
    path = tmp_path / "learned.csv"
    from scheduler.formats.colocation_table import write_colocation_table

    write_colocation_table(learned_table_frame([pair]), path)
    assert load_colocation_table(path).lookup("t4", resnet, tiny) == pytest.approx((0.8, 0.5))


def test_a_pair_ratio_is_learned_only_against_a_measured_solo_and_the_export_reads_back(tmp_path: Path) -> None:
    from scheduler.model.jobs import Job

    store = StateStore(tmp_path)
    # resnet18's solo at batch 4 was never measured; tiny_cnn's solo at 1 GPU and at 2 GPUs was
    rows = _measurements(store, [
        ("tiny_cnn", "t4", 1, 8, "", 0.010), ("tiny_cnn", "t4", 2, 8, "", 0.006), ("resnet18", "t4", 2, 4, "", 0.01),
        ("tiny_cnn", "t4", 1, 8, "resnet18@4", 0.020), ("resnet18", "t4", 1, 4, "tiny_cnn@8", 0.050),
        ("tiny_cnn", "t4", 2, 8, "resnet18@4", 0.012), ("resnet18", "t4", 2, 4, "tiny_cnn@8", 0.001)])
    pairs = {r["num_gpus"]: r for r in learned_ratios(rows, LearnedGoodputModel(rows, {}))}
    assert pairs[1]["solo_source"] == "pending" and pairs[1]["ratio_b"] is None  # no solo: nothing learned
    assert pairs[2]["solo_source"] == "measured"
    assert pairs[2]["ratio_b"] == pytest.approx(1.1)  # 10.0 measured: bounded, never a ratio the reader refuses
    path = tmp_path / "learned.csv"
    from scheduler.formats.colocation_table import write_colocation_table

    frame = learned_table_frame(list(pairs.values()))
    assert len(frame) == 1 and int(frame["n"].iloc[0]) == 1  # one row per GPU type and pair, pending left out
    write_colocation_table(frame, path)
    back = load_colocation_table(path)
    assert back.lookup("t4", Job("x", "tiny_cnn", batch_size=8), Job("y", "resnet18", batch_size=4)) == pytest.approx(
        (0.5, 1.1))
    table = policy_table(None, list(pairs.values()), predicted=False)
    assert table.ratios[("t4", "tiny_cnn@8", "resnet18@4")][0] > 0  # pending rows did not enter the belief


def test_unchanged_groups_are_kept_changed_ones_stopped_and_new_units_started() -> None:
    def slot(job: str, gpus: tuple[int, ...] = (0,), batch: int = 8, partner: str | None = None) -> Slot:
        return Slot(job, "t4", len(gpus), batch, (partner,) if partner else (), (0,), gpus)

    current = {"g1": (slot("a"),), "g2": (slot("b", (1,)),), "g3": (slot("c", (2, 3)),)}
    desired = [(slot("a"),), (slot("b", (1,), batch=16),), (slot("c", (2,), partner="d"), slot("d", (2,), partner="c"))]
    plan = plan_changes(current, desired, set())
    assert plan.keep == ("g1",) and set(plan.stop) == {"g2", "g3"}
    assert set(plan.start) == set(desired[1:])


def test_a_group_of_three_is_one_unit_kept_while_unchanged_and_measured_against_its_group(tmp_path: Path) -> None:
    from scheduler.model.policy import Allocation, JobPlacement, Placement, RoundDecision, SolverInfo
    from scheduler.service.rounds import current_placement, current_units, desired_units
    from scheduler.service.settle import group_type
    from scheduler.service.state.store import RUNNING

    members = ("a", "b", "c")
    others = {j: tuple(m for m in members if m != j) for j in members}
    decision = RoundDecision(tuple(Allocation(j, "t4", 1, 8, partner=others[j][0], partners=others[j]) for j in members),
                             (), 0.0, SolverInfo("test", "optimal", 0.0, 0.0))
    placement = Placement({j: JobPlacement(j, "t4", (0,), (0,), others[j][0], others[j]) for j in members})
    [unit] = desired_units(decision, placement)
    assert [s.job for s in unit] == list(members) and unit[0].others == ("b", "c") and unit[0].partner == "b,c"
    store = StateStore(tmp_path)
    for j in members:
        store.submit(job_from_dict({**JOB, "name": j}))
    with store.transaction() as db:
        for s in unit:
            db.update_job(s.job, state=RUNNING, group_key="g1", gpu_type="t4", num_gpus=1, batch_size=8,
                          partner=s.partner, nodes=s.nodes, gpus=s.gpus)
    rows = store.jobs()
    assert current_units(rows) == {"g1": unit}  # read back from the database: the same unit, so it is kept
    assert plan_changes(current_units(rows), [unit], set()).keep == ("g1",)
    assert current_placement(rows).of("a") == placement.of("a")
    by_name = {r.name: r for r in rows}
    assert group_type([by_name["b"], by_name["c"]]) == "tiny_cnn@8+tiny_cnn@8"
    measured = _measurements(store, [("tiny_cnn", "t4", 1, 8, "", 0.01),
                                     ("tiny_cnn", "t4", 1, 8, "tiny_cnn@8+tiny_cnn@8", 0.03)])
    assert len(measured) == 2  # kept against the group, but not a row of the pair table
    assert learned_ratios(measured, LearnedGoodputModel(measured, {})) == []


def test_executors_come_from_a_registry_behind_one_protocol() -> None:
    from scheduler.executor.base import Executor
    from scheduler.executor.registry import EXECUTOR_NAMES, make_executor
    from scheduler.executor.slurm.live import SlurmExecutor
    from scheduler.executor.slurm.settings import SlurmSettings

    assert EXECUTOR_NAMES == ("local", "ray", "slurm")
    local = make_executor("local")
    assert isinstance(local, Executor) and local.name == "local" and local.runs_here  # launch picks its node
    slurm = SlurmExecutor(SlurmSettings())
    assert isinstance(slurm, Executor) and slurm.name == "slurm" and not slurm.runs_here
    with pytest.raises(InputError) as info:
        make_executor("kubernetes")
    assert info.value.field == "backend" and "local, ray, slurm" in str(info.value)


def test_serve_explores_unknown_pairs_only_while_its_jobs_ask_for_every_gpu(tmp_path: Path) -> None:
    from scheduler.executor.registry import make_executor
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.model.jobs import Job
    from scheduler.service.server import Server

    store = StateStore(tmp_path)
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 4, "memory_gb": 16}}})
    server = Server(store, cluster, make_executor("local"))
    tiny, resnet = Job("x", "tiny_cnn", batch_size=8), Job("y", "resnet18", batch_size=4)
    store.submit(job_from_dict({**JOB, "name": "a"}))
    store.submit(job_from_dict({**JOB, "name": "b", "model": "resnet18", "batch_size": 4}))
    _, calm, _ = server.learned(store.jobs())  # two 1-GPU jobs on 4 GPUs: the prior's means, no optimism
    store.submit(job_from_dict({**JOB, "name": "c", "min_gpus": 2}))
    _, busy, _ = server.learned(store.jobs())  # they ask for all 4: unknown pairs planned optimistically
    assert calm is not None and busy is not None
    calm_ab, busy_ab = calm.lookup("t4", tiny, resnet), busy.lookup("t4", tiny, resnet)
    assert calm_ab is not None and busy_ab is not None and sum(calm_ab) < sum(busy_ab)


def test_learned_out_before_any_pair_is_learned_writes_nothing_and_exits_1(tmp_path: Path) -> None:
    state = StateStore(tmp_path / "state")
    state.submit(job_from_dict({"name": "a", "model": "tiny_cnn", "steps": 10, "batch_size": 8}))
    with state.transaction() as db:  # a solo time alone: no pair to learn from
        db.add_measurement("tiny_cnn", "t4", 1, 8, "", 0.01)
    out = tmp_path / "learned.csv"
    done = CliRunner().invoke(app, ["learned", "--state", str(state.dir), "--out", str(out)])
    assert done.exit_code == 1 and "nothing written" in done.output, done.output
    assert not out.exists()
    shown = CliRunner().invoke(app, ["learned", "--state", str(state.dir)])  # the table view still shows the solo
    assert shown.exit_code == 0 and "tiny_cnn" in shown.output, shown.output


def test_a_group_the_backend_cannot_start_is_tried_again_after_a_backoff_and_leaves_no_files(tmp_path: Path) -> None:
    """sbatch failing (here: any backend's start raising) is the job's waiting reason, one attempt per backoff, and
    the group's files are removed: not an event and two files per round for as long as it fails."""
    from scheduler.executor.local import LocalExecutor
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.service.config import ServeConfig
    from scheduler.service.server import Server
    from scheduler.service.waiting import META_KEY, loads

    class Refusing(LocalExecutor):
        calls = 0

        def start(self, group, doc):  # type: ignore[no-untyped-def]
            doc.group_file.with_suffix(".sbatch").write_text("#!/bin/bash\n")  # written before it failed
            self.calls += 1
            raise RuntimeError("sbatch: error: Batch job submission failed: Unable to contact slurm controller")

    store = StateStore(tmp_path / "state")
    executor = Refusing()
    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    server = Server(store, cluster, executor, ServeConfig(round_s=0.5, device="cpu"))
    store.submit(job_from_dict(JOB))
    for _ in range(4):
        server.round()
    assert executor.calls == 1 and [e["kind"] for e in store.events("a")].count("start-failed") == 1
    reason = loads(store.meta(META_KEY))["a"]
    assert reason["code"] == "start-failed" and "Unable to contact slurm controller" in reason["text"]
    assert "next try in" in reason["text"] and store.job("a").state == QUEUED and not store.groups()
    assert not list((store.dir / "runs").iterdir())


def test_failed_starts_back_off_doubling_up_to_ten_minutes() -> None:
    from scheduler.service.groups import StartRetries

    retries = StartRetries()
    delays = [retries.failed(["a", "b"], "refused") for _ in range(8)]
    assert delays == [10, 20, 40, 80, 160, 320, 600, 600] and retries.waiting(["b", "c"])
    assert retries.failed(["c"], "refused") == 10  # counted per job: another unit starts its own count
    retries.started(["a", "b"])
    assert not retries.waiting(["a", "b"]) and retries.failed(["a"], "refused") == 10
