"""The live scheduler's stability and fairness rules on the real round ILP (HiGHS): what ``colocate serve`` turns
on (:class:`scheduler.service.stability.StabilityConfig`) and that the simulator's defaults are unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest
from click.testing import CliRunner

from common.errors import InputError
from scheduler.ilp.columns import restart_factor
from scheduler.ilp.config import IlpConfig
from scheduler.ilp.policy import PackingPolicy
from scheduler.model.cluster import cluster_from_dict
from scheduler.model.colocation import ColocationTable
from scheduler.model.goodput import TableGoodputModel
from scheduler.model.jobs import Job
from scheduler.model.policy import RoundContext
from scheduler.service.config import ServeConfig
from scheduler.service.stability import StabilityConfig, fold_startup, hurting_members, load_startups, pinned_jobs

CLUSTER = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}})
# an adaptive job that scales well: 2 GPUs give 1.9x
MODEL = TableGoodputModel({("app", "t4", 1): 100.0, ("app", "t4", 2): 190.0})


def _serve_policy(policy: str = "colocate") -> PackingPolicy:
    return PackingPolicy(replace(ServeConfig.for_policy(policy).ilp, mip_gap=0.0), name=policy)


def _decide(policy: PackingPolicy, jobs: list[Job]) -> dict[str, tuple[int, ...]]:
    decision = policy.allocate(jobs, CLUSTER, RoundContext(MODEL))
    return {a.job: (a.num_gpus,) for a in decision.allocations}


def test_a_running_job_keeps_its_gpus_against_an_equal_job_that_was_stopped_before() -> None:
    # two equal rigid 2-GPU jobs: the running one and one stopped earlier (the swap of the issue)
    running = Job("a", "app", 0.0, num_gpus=2, batch_size=32, age_s=30.0, restarts=3, current_gpu_type="t4",
                  current_num_gpus=2)
    waiting = Job("b", "app", 0.0, num_gpus=2, batch_size=32, age_s=30.0, restarts=3)
    for _ in range(5):  # every round, with the warm start carried along
        assert set(_decide(_serve_policy(), [running, waiting])) == {"a"}
        assert set(_decide(_serve_policy(), [waiting, running])) == {"a"}


def test_ties_keep_what_runs_for_a_fresh_competitor() -> None:
    running = Job("a", "app", 0.0, num_gpus=2, batch_size=32, age_s=5.0, current_gpu_type="t4", current_num_gpus=2)
    fresh = Job("b", "app", 0.0, num_gpus=2, batch_size=32)
    assert set(_decide(_serve_policy(), [fresh, running])) == {"a"}
    assert set(_decide(_serve_policy(), [running, fresh])) == {"a"}


def test_the_simulator_defaults_charge_no_resume_and_give_no_bonus() -> None:
    cfg = IlpConfig()
    assert (cfg.charge_resumes, cfg.keep_bonus, cfg.lambda_unallocated) == (False, 0.0, 1.1)


def test_a_rigid_job_is_not_starved_by_an_adaptive_job_holding_both_gpus() -> None:
    adaptive = Job("big", "app", 0.0, num_gpus=1, max_gpus=2, batch_size=32, adaptive=True, age_s=120.0,
                   current_gpu_type="t4", current_num_gpus=2)
    rigid = Job("small", "app", 1.0, num_gpus=1, batch_size=32)
    # Sia's simulator defaults (lambda 1.1): the adaptive job keeps both GPUs, the rigid one waits
    assert _decide(PackingPolicy(IlpConfig(mip_gap=0.0, packing=False)), [adaptive, rigid]) == {"big": (2,)}
    # serve's fairness (lambda 2): the waiting rigid job gets a GPU, the adaptive job shrinks to its share
    assert _decide(_serve_policy("sia"), [adaptive, rigid]) == {"big": (1,), "small": (1,)}


def test_a_fresh_adaptive_job_does_not_grow_while_a_job_that_fits_waits() -> None:
    jobs = [Job("big", "app", 0.0, num_gpus=1, max_gpus=2, batch_size=32, adaptive=True),
            Job("r1", "app", 1.0, num_gpus=1, batch_size=32), Job("r2", "app", 2.0, num_gpus=1, batch_size=32)]
    decided = _decide(_serve_policy("sia"), jobs)
    assert len(decided) == 2 and all(n == (1,) for n in decided.values())


def test_with_serves_fairness_the_prior_packs_two_waiting_jobs_on_a_lone_gpu() -> None:
    from scheduler.learning.online import policy_table, round_job_types

    one_gpu = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    model = TableGoodputModel({("tiny_cnn", "t4", 1): 300.0, ("resnet18", "t4", 1): 8.0})
    jobs = [Job("a", "tiny_cnn", 0.0, batch_size=8), Job("b", "resnet18", 1.0, batch_size=8)]
    # what a round plans with when no table is given: the δ predictor's prior, explored optimistically
    table = policy_table(None, [], round_job_types(["t4"], [("tiny_cnn", 8), ("resnet18", 8)]))
    planned = table.lookup("t4", *jobs)
    assert planned is not None and 1.05 <= sum(planned) and max(planned) <= 0.95
    context = RoundContext(model, colocation=table)
    packed = _serve_policy().allocate(jobs, one_gpu, context)  # Σ G^-0.5 with λ = 2: both jobs get a share
    assert {(a.job, a.partner) for a in packed.allocations} == {("a", "b"), ("b", "a")}
    # Sia's simulator λ = 1.1: one job alone is worth more than the pair, the other waits
    alone = PackingPolicy(IlpConfig(mip_gap=0.0)).allocate(jobs, one_gpu, context)
    assert len(alone.allocations) == 1 and alone.allocations[0].partner is None
    # and once GPUs are free, the pair is split: alone each is worth more than sharing
    two = _serve_policy().allocate(jobs, CLUSTER, context)
    assert {a.partner for a in two.allocations} == {None} and len(two.allocations) == 2


def test_pinned_pairs_keep_their_partners_in_a_fresh_policy() -> None:
    # four pairs within their minimum run, pairs not next to each other in the seeding order (a restarted
    # server: no earlier round to seed them from)
    four = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 4, "memory_gb": 16}}})
    partner = {f"j{i}": f"j{(i + 4) % 8}" for i in range(8)}
    jobs = [Job(f"j{i}", "app", 0.0, batch_size=32, age_s=30.0, current_gpu_type="t4", current_num_gpus=1,
                current_partner=partner[f"j{i}"], pinned=True) for i in range(8)]
    table = ColocationTable.from_rows([("t4", "app", "app", 0.7, 0.7)])
    decision = _serve_policy().allocate(jobs, four, RoundContext(MODEL, colocation=table))
    assert decision.solver.fallback is None
    assert {(a.job, a.partner) for a in decision.allocations} == set(partner.items())


def test_members_of_a_pair_measured_to_hurt_are_not_held() -> None:
    table = ColocationTable.from_rows([("t4", "app@32", "app@32", 0.0, 0.0), ("t4", "app", "other", 0.7, 0.6)])
    hurt = [Job("a", "app", batch_size=32), Job("b", "app", batch_size=32)]
    fine = [Job("c", "app", batch_size=32), Job("d", "other", batch_size=16)]
    assert hurting_members([("t4", hurt), ("t4", fine)], table) == {"a", "b"}
    assert hurting_members([("t4", hurt)], None) == set()

def test_a_resume_pays_its_restart_factor_but_never_below_the_floor() -> None:
    many = Job("b", "app", 0.0, num_gpus=1, batch_size=32, age_s=10.0, restarts=20)
    assert restart_factor(many, 25.0) == 0.0
    # alone on an idle cluster it still starts: the floor keeps it worth more than waiting
    assert set(_decide(_serve_policy(), [many])) == {"b"}


def test_min_run_defaults_to_the_round_or_three_start_ups_and_pins_warming_jobs() -> None:
    cfg = StabilityConfig()
    assert cfg.min_run(3.0, None) == 3.0 and cfg.min_run(3.0, 4.0) == 12.0
    assert StabilityConfig(min_run_s=1.0).min_run(3.0, 4.0) == 1.0
    running = [("young", "m", 95.0, True), ("old", "m", 50.0, True), ("warming", "m", 50.0, False),
               ("hung", "m", 0.0, False)]
    held = pinned_jobs(running, now=100.0, config=cfg, round_s=3.0, startups={"m": 4.0}, start_timeout_s=80.0)
    assert held == {"young", "warming"}


def test_start_ups_fold_into_a_mean_and_survive_a_round_trip() -> None:
    import json

    startups: dict[str, list[float]] = {}
    fold_startup(startups, "m", 2.0)
    fold_startup(startups, "m", 4.0)
    assert startups == {"m": [3.0, 2]}
    assert load_startups(json.dumps(startups)) == startups and load_startups("not json") == {}


@pytest.mark.parametrize("config,field,value", [(StabilityConfig, "min_run_s", -1.0),
                                                (StabilityConfig, "startup_factor", float("nan")),
                                                (IlpConfig, "keep_bonus", 2.0), (IlpConfig, "resume_floor", 0.0)])
def test_bad_stability_knobs_are_input_errors(config: type, field: str, value: float) -> None:
    with pytest.raises(InputError, match=field):
        config(**{field: value})


def test_the_torch_free_model_names_are_the_zoo() -> None:
    import models
    from scheduler.service.jobs.model_names import BUILTIN_MODELS, known_models

    assert BUILTIN_MODELS == models.MODEL_NAMES and set(BUILTIN_MODELS) <= set(known_models())


def test_submit_validates_without_importing_torch(tmp_path) -> None:
    import subprocess
    import sys

    job = tmp_path / "j.yaml"
    job.write_text("name: j\nmodel: tiny_cnn\nsteps: 10\nbatch_size: 8\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\nmodel: tiny_cnnn\nsteps: 10\nbatch_size: 8\n")
    probe = ("import sys\nfrom colocate.cli import main\nsys.argv = ['colocate', 'submit', '--state', sys.argv[1], "
             "sys.argv[2]]\ntry:\n    main()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
             "print('torch' in sys.modules, code)")
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "state"), str(job)], capture_output=True,
                         text=True, check=True)
    assert out.stdout.split()[-2:] == ["False", "0"], out.stdout + out.stderr
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "state"), str(bad)], capture_output=True,
                         text=True, check=True)
    assert out.stdout.split()[-2:] == ["False", "2"] and "unknown model" in out.stdout + out.stderr


def test_submit_takes_several_files_and_a_bad_one_queues_none(tmp_path) -> None:
    from click.testing import CliRunner

    from colocate.cli import app
    from scheduler.service.state.store import StateStore

    good = [tmp_path / f"g{i}.yaml" for i in range(3)]
    for i, path in enumerate(good):
        path.write_text(f"name: g{i}\nmodel: tiny_cnn\nsteps: 10\nbatch_size: 8\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\nmodel: tiny_cnn\nsteps: 0\nbatch_size: 8\n")
    state = tmp_path / "state"
    result = CliRunner().invoke(app, ["submit", "--state", str(state), *map(str, good[:2]), str(bad)])
    assert result.exit_code != 0 and "bad.yaml" in str(result.exception) + result.output
    assert not (state / "state.db").exists() or StateStore(state).jobs() == []
    result = CliRunner().invoke(app, ["submit", "--state", str(state), *map(str, good)])
    assert result.exit_code == 0 and result.output.split() == ["g0", "g1", "g2"]
    assert [r.name for r in StateStore(state).jobs()] == ["g0", "g1", "g2"]


@pytest.mark.parametrize("flag,value", [("--metrics-port", "0"), ("--min-run", "-1"), ("--round-s", "inf"),
                                        ("--grace", "inf"), ("--threads", "100000000"), ("--backend", "nomad"),
                                        ("--policy", "nope"), ("--sharing", "nope")])
def test_bad_serve_options_are_one_line_errors_naming_the_flag_and_create_nothing(tmp_path, flag: str,
                                                                                   value: str) -> None:
    from colocate.cli import app

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("gpu_types:\n  t4: {nodes: 1, gpus_per_node: 1, memory_gb: 16}\n")
    result = CliRunner().invoke(app, ["serve", "--cluster", str(cluster), "--state", str(tmp_path / "state"),
                                      "--backend", "local", flag, value])
    assert result.exit_code != 0 and isinstance(result.exception, InputError)
    assert flag in str(result.exception)
    assert not (tmp_path / "state").exists()


def _pair_or_not(options: IlpConfig, age_s: float) -> dict[str, tuple[str, ...]]:
    from scheduler.model.colocation import ColocationTable

    one_gpu = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
    table = ColocationTable({("t4", "app", "app"): (0.7, 0.7)})
    running = Job("a", "app", 0.0, num_gpus=1, batch_size=32, age_s=age_s, current_gpu_type="t4",
                  current_num_gpus=1)
    waiting = Job("b", "app", 0.0, num_gpus=1, batch_size=32)
    policy = PackingPolicy(replace(options, mip_gap=0.0))
    decision = policy.allocate([running, waiting], one_gpu, RoundContext(MODEL, colocation=table))
    return {a.job: tuple(a.others) for a in decision.allocations}


def test_a_young_running_job_is_not_restarted_to_take_a_partner_because_serve_restarts_whole_groups() -> None:
    serve = ServeConfig().ilp
    # every member running on the GPUs pays, as serve restarts a changed group whole: the job 10 s into its
    # run keeps 10 / 35 of its goodput, so the pair does not pay yet
    assert _pair_or_not(serve, age_s=10.0) == {"a": ()}
    # a job that has run long loses little to the restart: the pair is formed
    assert _pair_or_not(serve, age_s=1000.0) == {"a": ("b",), "b": ("a",)}


def _split_or_not(options: IlpConfig, age_s: float) -> dict[str, tuple[str, ...]]:
    """Two jobs paired on one GPU of two (each at 0.7 of its speed): kept together or split onto both GPUs."""
    table = ColocationTable({("t4", "app", "app"): (0.7, 0.7)})
    pair = [Job(n, "app", 0.0, num_gpus=1, batch_size=32, age_s=age_s, current_gpu_type="t4", current_num_gpus=1,
                current_partner=p) for n, p in (("a", "b"), ("b", "a"))]
    decision = PackingPolicy(replace(options, mip_gap=0.0)).allocate(pair, CLUSTER, RoundContext(MODEL, colocation=table))
    return {a.job: tuple(a.others) for a in decision.allocations}


def test_a_young_pair_is_not_split_because_the_member_that_stays_restarts_too() -> None:
    serve = ServeConfig().ilp
    # serve restarts the group, the member that stays included: both pay, and the pair runs on
    assert _split_or_not(serve, age_s=40.0) == {"a": ("b",), "b": ("a",)}
    # a pair that has run long loses little to the restarts: split, each alone at full speed
    assert _split_or_not(serve, age_s=10_000.0) == {"a": (), "b": ()}
