"""One typed config from the command to the policy: the registry's ILP settings per policy, the user's values over
them, refusals of what does not apply, and a run's printed config loaded again (``--set @FILE``) reproducing it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from common.errors import InputError
from scheduler.ilp.config import IlpConfig
from scheduler.policies import ILP_POLICY_NAMES, POLICIES, make_policy, own_ilp, policy_spec
from scheduler.service.config import LIVE_ILP, ServeConfig

TINY = ("name,time,application,num_replicas,batch_size,work\n"
        "cifar10-0,0,cifar10,1,128,300000\ncifar10-1,30,cifar10,2,256,400000\n"
        "bert-2,60,bert,1,12,6000\ndeepspeech2-3,100,deepspeech2,1,20,40000\n")
CLUSTER = "scheduler/data/cluster-default.yaml"
SCHEDULE = ["schedule", "--cluster", "scheduler/examples/cluster-small.yaml", "--jobs", "scheduler/examples/jobs-small.csv",
            "--profiles", "scheduler/examples/profiles-generic.csv", "--colocation",
            "scheduler/examples/colocation-small.csv", "--json"]


def _invoke(*args: str) -> tuple[int, str, BaseException | None]:
    from colocate.cli import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.exception


def test_the_registry_says_which_policies_solve_the_ilp_and_with_what() -> None:
    assert ILP_POLICY_NAMES == ("colocate", "colocate-triples", "sia")
    assert all(POLICIES[n].ilp is None for n in POLICIES if n not in ILP_POLICY_NAMES)
    triples = make_policy("colocate-triples")
    assert triples.config.max_group_size == 3 and triples.config.max_slowdown == 3.75  # type: ignore[attr-defined]
    assert make_policy("sia", ilp=own_ilp("sia", top_k=7)).config.top_k == 7  # type: ignore[attr-defined]


@pytest.mark.parametrize("name, ilp, field", [
    ("fifo", IlpConfig(), "ilp"),  # a policy that solves no ILP takes none
    ("sia", IlpConfig(packing=True), "ilp.packing"),  # what makes the policy what it is cannot change
    ("colocate-triples", own_ilp("colocate", packing=True), "ilp.max_group_size"),
])
def test_an_ilp_config_that_does_not_fit_the_policy_is_refused(name: str, ilp: IlpConfig, field: str) -> None:
    with pytest.raises(InputError) as err:
        make_policy(name, ilp=ilp)
    assert err.value.field == field


def test_gavel_names_one_mechanism_each_and_the_old_name_says_which() -> None:
    assert make_policy("gavel-sia").mechanism == "sia"  # type: ignore[attr-defined]
    assert make_policy("gavel-refill").mechanism == "refill"  # type: ignore[attr-defined]
    assert make_policy("gavel-packed").mechanism == "refill"  # type: ignore[attr-defined]
    with pytest.raises(InputError) as err:
        policy_spec("gavel")
    assert "gavel-sia" in str(err.value) and "gavel-refill" in str(err.value)


def test_serve_runs_each_ilp_policy_with_its_own_settings_and_the_live_changes() -> None:
    assert ServeConfig().ilp == ServeConfig.for_policy("colocate").ilp
    triples = ServeConfig.for_policy("colocate-triples").ilp
    assert (triples.max_group_size, triples.keep_bonus, triples.lambda_unallocated) == (3, 0.02, 2.0)
    assert ServeConfig.for_policy("sia").ilp.packing is False and ServeConfig.for_policy("fifo").ilp == LIVE_ILP


def test_ilp_settings_with_a_policy_that_solves_none_are_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "w.csv").write_text(TINY)
    code, out, err = _invoke("simulate", "--cluster", CLUSTER, "--workload", str(tmp_path / "w.csv"),
                             "--policy", "gavel-sia", "--set", "ilp.top_k=5", "--json")
    assert code != 0 and isinstance(err, InputError) and "with --policy gavel-sia" in str(err) and not out
    code, _, err = _invoke("serve", "--cluster", CLUSTER, "--state", str(tmp_path / "s"), "--policy", "colocate-triples",
                           "--set", "serve.ilp.max_group_size=2")
    assert isinstance(err, InputError) and "decides its group size" in str(err) and not (tmp_path / "s").exists()


def test_a_printed_schedule_config_reloaded_gives_the_same_decision(tmp_path: Path) -> None:
    code, out, err = _invoke(*SCHEDULE, "--power", "1", "--set", "ilp.top_k=5")
    assert code == 0, err
    first = json.loads(out)
    assert first["config"]["ilp"]["p"] == 1.0 and first["config"]["ilp"]["top_k"] == 5
    (tmp_path / "run.json").write_text(out)
    code, again, err = _invoke(*SCHEDULE, "--set", f"@{tmp_path / 'run.json'}")
    assert code == 0, err
    second = json.loads(again)
    for run in (first, second):
        del run["solver"]  # its wall time
    assert second == first
    # the command line wins over the file
    code, other, _ = _invoke(*SCHEDULE, "--set", f"@{tmp_path / 'run.json'}", "--power", "-0.5")
    assert json.loads(other)["config"]["ilp"]["p"] == -0.5


def test_a_printed_simulate_config_reloaded_gives_the_identical_run(tmp_path: Path) -> None:
    (tmp_path / "w.csv").write_text(TINY)
    where = ["simulate", "--cluster", CLUSTER, "--workload", str(tmp_path / "w.csv"), "--json"]
    code, out, err = _invoke(*where, "--policy", "sia", "--set", "ilp.p=1", "--belief", "none", "--round-s", "120")
    assert code == 0, err
    first = json.loads(out)
    assert first["config"]["run"] == {"policy": "sia"} and first["config"]["ilp"]["packing"] is False
    (tmp_path / "run.json").write_text(out)
    code, again, err = _invoke(*where, "--set", f"@{tmp_path / 'run.json'}")
    assert code == 0, err
    second = json.loads(again)
    first.pop("wall_s"), second.pop("wall_s")
    assert second == first  # every metric and every setting


@pytest.mark.parametrize("content, named", [
    ('{"ilp": {"top_kk": 3}}', "unknown setting 'ilp.top_kk'"),
    ('{"ilp": {"top_k": "three"}}', '"three" is not a value of ilp.top_k'),
    ('{"ilp": {"solver": "gurobi"}}', "'gurobi'"),
    ('{"ilp": {"mip_gap": 2}}', "out of range"),
    ('{"ilp": {"top_k": 2.5}}', "is not a value of ilp.top_k"),
    ('{"ilp": {"packing": "yes please"}}', "is not a value of ilp.packing"),
    ("[1, 2]", "not a JSON object"),
    ("{", "cannot read it"),
])
def test_a_bad_config_file_is_a_one_line_error_naming_file_and_key(tmp_path: Path, content: str, named: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, out, err = _invoke(*SCHEDULE, "--set", f"@{path}")
    assert code != 0 and isinstance(err, InputError) and named in str(err) and str(path) in str(err) and not out


def test_a_value_the_user_gives_wins_even_where_it_equals_the_plain_default() -> None:
    """serve handed the policy only the ILP values that differed from IlpConfig's defaults, so ``--max-slowdown
    2.5`` (IlpConfig's own) with ``colocate-triples`` ran at the policy's 3.75; the config is now built over the
    policy's settings, and what the user gave is kept."""
    from colocate import cli_kit
    from colocate.cli_config import config_command
    from colocate.commands.serve import SERVE_SPEC

    seen: dict[str, ServeConfig] = {}

    @config_command(SERVE_SPEC)
    def probe(*, serve: ServeConfig) -> None:
        seen["serve"] = serve

    app = cli_kit.App()
    app.command("probe")(probe)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["probe", "--policy", "colocate-triples", "--max-slowdown", "2.5"])
    assert result.exit_code == 0, result.output
    ilp = seen["serve"].ilp
    assert (ilp.max_slowdown, ilp.max_group_size, ilp.keep_bonus) == (2.5, 3, 0.02)
    assert make_policy("colocate-triples", ilp=ilp).traits.max_slowdown == 2.5
    CliRunner().invoke(app, ["probe", "--policy", "colocate-triples"])
    assert seen["serve"].ilp.max_slowdown == 3.75  # left alone: the policy's own


def test_compare_config_says_the_ilp_settings_given_over_each_policys_own(tmp_path: Path) -> None:
    from dataclasses import replace

    from colocate.commands.compare import write_config
    from scheduler.sim.compare import CompareRequest

    ilp = {name: replace(policy_spec(name).ilp, top_k=5, p=1.0) for name in ("colocate", "sia")}
    request = CompareRequest(cluster=Path(CLUSTER), workloads="w-*.csv", out=tmp_path, policies="colocate,sia,fifo",
                             ilp=ilp)
    record = json.loads(write_config(request).read_text())
    assert record["config"]["ilp"] == {"p": 1.0, "top_k": 5}  # not packing: each policy keeps its own
    assert record["config"]["request"]["workloads"] == "w-*.csv" and record["config"]["sim"]["round_s"] == 60
    assert record["ilp_of_policy"]["colocate"]["packing"] is True and record["ilp_of_policy"]["sia"]["packing"] is False
    assert record["ilp_of_policy"]["fifo"] is None


@pytest.mark.slow
def test_compare_records_its_config_and_the_record_loads_again(tmp_path: Path) -> None:
    """``colocate compare`` writes the settings it ran with beside its report (each policy's whole ILP settings
    too); ``--set @FILE`` of that record runs the same comparison."""
    (tmp_path / "w.csv").write_text("name,time,application,num_replicas,batch_size,work\n"
                                    "a,0,cifar10,1,128,30000\nb,30,cifar10,1,128,30000\n")
    where = ["compare", "--cluster", CLUSTER, "--workloads", str(tmp_path / "w.csv"), "--policies", "colocate,fifo"]
    code, out, err = _invoke(*where, "--out", str(tmp_path / "a"), "--workers", "1", "--set", "ilp.top_k=5",
                             "--round-s", "120")
    assert code == 0, err
    assert f"config: {tmp_path / 'a' / 'config.json'}" in out
    first = json.loads((tmp_path / "a" / "config.json").read_text())
    config = first["config"]
    assert config["ilp"] == {"top_k": 5}  # what was given over each policy's own
    assert config["sim"]["round_s"] == 120 and config["request"]["policies"] == "colocate,fifo"
    assert config["request"]["workers"] == 1
    assert first["ilp_of_policy"]["fifo"] is None
    own = first["ilp_of_policy"]["colocate"]
    assert own["top_k"] == 5 and own["packing"] is True and own["max_slowdown"] == 2.5
    code, _, err = _invoke(*where, "--out", str(tmp_path / "b"), "--set", f"@{tmp_path / 'a' / 'config.json'}")
    assert code == 0, err
    second = json.loads((tmp_path / "b" / "config.json").read_text())
    assert second["config"]["request"].pop("out") == str(tmp_path / "b")
    first["config"]["request"].pop("out")
    assert second == first
    import pandas as pd

    runs = [pd.read_csv(tmp_path / d / "summary.csv").drop(columns=["wall_s"]) for d in ("a", "b")]
    pd.testing.assert_frame_equal(*runs)
