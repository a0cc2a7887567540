"""Every option a command generates from a config field shows that field's default, help and choices; a flag
means one thing across commands; the user-facing commands stay small; ``--set`` reaches every field."""

from __future__ import annotations

import dataclasses
import importlib
from collections import defaultdict
from typing import Any

import pytest
from click.testing import CliRunner

from colocate.cli import COMMAND_MODULES, build_app
from colocate.cli_config import ConfigSpec, entries
from colocate.cli_kit import App
from common.errors import InputError
from common.options import choices_of, option
from scheduler.ilp.config import IlpConfig
from scheduler.sim.config import SimConfig


def _commands() -> dict[str, Any]:
    """Every Click command of the app by its path ('schedule', 'bench scheduler', ...)."""
    out: dict[str, Any] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
        else:
            out[" ".join(path)] = command

    walk(build_app(), ())
    return out


def _config_commands() -> dict[str, tuple[ConfigSpec, ...]]:
    """The configs each generated command takes, read off the decorated command functions."""
    found: dict[str, tuple[ConfigSpec, ...]] = {}
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"colocate.commands.{name}")
        for value in vars(module).values():
            specs = getattr(value, "config_specs", None)
            if specs:
                found[name.replace("_", "-")] = specs
    return found


COMMANDS = _commands()
CONFIGURED = _config_commands()


def _visible(command: Any) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "option" and not getattr(p, "hidden", False)]


def test_the_commands_that_take_a_config_generate_their_options() -> None:
    assert {"schedule", "simulate", "compare", "serve", "launch"} <= set(CONFIGURED)


@pytest.mark.parametrize("command", sorted(CONFIGURED))
def test_every_generated_option_shows_its_fields_default_help_and_choices(command: str) -> None:
    params = {p.name: p for p in COMMANDS[command].params}
    for spec in CONFIGURED[command]:
        for entry in entries(spec):
            if not entry.has_flag:
                assert entry.param not in params, f"{entry.key} is experimental yet has a flag"
                continue
            param = params[entry.param]
            flags = [*param.opts, *param.secondary_opts]
            assert entry.flag in flags or entry.field.metadata.get("argument"), (command, entry.key, flags)
            default = list(entry.default) if isinstance(entry.default, tuple) else entry.default
            if callable(getattr(type(default), "parse", None)):
                default = str(default)  # a parsed value (--belief) shows its text, which parses back to it
            if default is not dataclasses.MISSING:
                assert param.default == default, (command, entry.key, param.default, default)
            assert param.help == entry.help, (command, entry.key)
            choices = choices_of(entry.field, entry.annotation)
            if choices:
                assert param.metavar == "|".join(choices), (command, entry.key)


@pytest.mark.parametrize("command", sorted(CONFIGURED))
def test_no_hand_written_option_restates_a_config_field(command: str) -> None:
    generated = {f for spec in CONFIGURED[command] for e in entries(spec) for f in (e.flag,)}
    for param in COMMANDS[command].params:
        if param.name and (param.name.startswith("cfg__") or param.name in ("set_options", "help_experimental")):
            continue
        assert not set(getattr(param, "opts", [])) & generated, (command, param.opts)


def test_no_command_has_two_options_of_one_name() -> None:
    for path, command in COMMANDS.items():
        seen: dict[str, str] = {}
        for param in command.params:
            for flag in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]:
                assert flag not in seen, f"{path}: {flag} is both {seen[flag]} and {param.name}"
                seen[flag] = str(param.name)


def test_one_spelling_per_idea_across_commands() -> None:
    """A setting named alike in several configs has one flag everywhere."""
    flags: dict[str, set[str]] = defaultdict(set)
    for specs in CONFIGURED.values():
        for spec in specs:
            for entry in entries(spec):
                if entry.has_flag:
                    flags[entry.field.name].add(entry.flag)
    assert {name: found for name, found in flags.items() if len(found) > 1} == {}
    for path, command in COMMANDS.items():
        for param in _visible(command):
            assert "--round" not in param.opts, f"{path} shows --round (the spelling is --round-s)"


@pytest.mark.parametrize("command", ["schedule", "simulate"])
def test_the_round_commands_show_at_most_fifteen_options(command: str) -> None:
    assert len(_visible(COMMANDS[command])) <= 15, [p.opts[0] for p in _visible(COMMANDS[command])]


def test_set_reaches_an_experimental_field_and_names_it_in_errors(tmp_path: Any) -> None:
    from colocate.cli import app

    args = ["schedule", "--cluster", "scheduler/examples/cluster-small.yaml", "--jobs",
            "scheduler/examples/jobs-small.csv", "--profiles", "scheduler/examples/profiles-generic.csv",
            "--colocation", "scheduler/examples/colocation-small.csv", "--json"]
    ok = CliRunner().invoke(app, [*args, "--set", "ilp.solver=cbc", "--set", "ilp.top_k=1"])
    assert ok.exit_code == 0, ok.output
    for bad, named in ((["--set", "ilp.solver=gurobi"], "--set ilp.solver"), (["--set", "nope=1"], "--set"),
                       (["--set", "ilp.top_k=1.5"], "--set ilp.top_k"), (["--power", "0"], "--power"),
                       (["--time-limit", "5", "--set", "ilp.time_limit_s=6"], "--time-limit")):
        result = CliRunner().invoke(app, [*args, *bad])
        assert isinstance(result.exception, InputError) and named in str(result.exception), (bad, result.output)


def test_help_experimental_lists_exactly_the_fields_without_a_flag() -> None:
    from colocate.cli import app

    result = CliRunner().invoke(app, ["simulate", "--help-experimental"], terminal_width=200)
    assert result.exit_code == 0
    listed = {e.key for spec in CONFIGURED["simulate"] for e in entries(spec) if not e.has_flag}
    assert {"sim.throughput", "ilp.solver", "ilp.top_k"} <= listed
    for key in listed:
        assert key in result.output
    assert "sim.round_s" not in result.output  # it has its flag


@dataclasses.dataclass(frozen=True)
class Knobs:
    name: str = option(help="A required text.")
    level: int = option(3, "An integer in [1, 5].")
    mode: str = option("a", "A choice.", choices=("a", "b"))
    old: float = option(1.0, "Renamed.", flag="--new")
    deep: bool = option(False, "An ablation.", experimental=True)

    def __post_init__(self) -> None:
        if not 1 <= self.level <= 5:
            raise InputError(f"{self.level}", field="level", valid="[1, 5]")


def test_a_config_field_becomes_an_option_with_its_own_check() -> None:
    """The pattern on a config of its own: defaults, required fields, choices, ranges and flags."""
    from colocate.cli_config import config_command

    seen: list[Knobs] = []

    @config_command(ConfigSpec("k", Knobs))
    def run(*, k: Knobs) -> None:
        seen.append(k)

    app = App()
    app.command("run")(run)
    app.command("other")(_nothing)
    runner = CliRunner()
    result = runner.invoke(app, ["run", "--name", "x"])
    assert result.exit_code == 0 and seen[-1] == Knobs(name="x"), result.output
    result = runner.invoke(app, ["run", "--name", "x", "--level", "5", "--mode", "b", "--new", "2", "--set", "k.deep=yes"])
    assert result.exit_code == 0, result.output
    assert seen[-1] == Knobs(name="x", level=5, mode="b", old=2.0, deep=True)
    for bad, named in ((["--level", "9"], "--level"), (["--mode", "c"], "--mode"), (["--set", "k.deep=maybe"], "k.deep"),
                       (["--set", "k.old=1", "--new", "2"], "--new")):
        result = runner.invoke(app, ["run", "--name", "x", *bad])
        assert isinstance(result.exception, InputError) and named in str(result.exception), (bad, result.output)
    assert runner.invoke(app, ["run"]).exit_code != 0  # --name is required
    assert runner.invoke(app, ["run", "--name", "x", "--old", "1"]).exit_code != 0  # no hidden old spelling


def _nothing() -> None:
    """A second command, so that ``run`` stays a subcommand."""


def test_the_simulator_and_ilp_defaults_are_their_classes_defaults() -> None:
    """Generated with no base, the commands show the configs' own defaults (serve shows its live ILP)."""
    sim = {e.key: e.default for e in entries(ConfigSpec("sim", SimConfig))}
    assert sim["sim.round_s"] == SimConfig().round_s and sim["sim.belief"] == SimConfig().belief
    ilp = {e.key: e.default for e in entries(ConfigSpec("ilp", IlpConfig))}
    assert ilp["ilp.lambda_unallocated"] == IlpConfig().lambda_unallocated
    serve = {e.key: e.default for spec in CONFIGURED["serve"] for e in entries(spec)}
    assert serve["serve.ilp.lambda_unallocated"] == 2.0 and serve["serve.ilp.keep_bonus"] == 0.02


RETIRED = ("--round", "--throughput", "--step-times", "--batch", "--restart-on", "--efficiency", "--memory",
           "--colocation-strength", "--top-k", "--pair-candidates", "--pricing-passes", "--gap", "--solver",
           "--max-gpus-per-job", "--context-memory-gb", "--charge-resumes", "--resume-floor", "--keep-bonus",
           "--warm-start")


def test_retired_spellings_are_gone_and_no_settings_option_where_every_field_has_a_flag() -> None:
    """The old spellings had one release as hidden aliases; now a command accepts one only where it is the
    field's own flag on that command (schedule shows the ILP's)."""
    def opts(command: str) -> set[str]:
        return {o for p in COMMANDS[command].params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}

    for command in CONFIGURED:
        own = {e.flag for spec in CONFIGURED.get(command.replace("_", "-"), ()) for e in entries(spec) if e.has_flag}
        assert opts(command) & set(RETIRED) <= own, (command, opts(command) & set(RETIRED) - own)
    assert not {"--round", "--colocation-strength", "--top-k"} & (opts("compare") | opts("simulate"))
    assert "--set" not in opts("launch") and "--help-experimental" not in opts("launch")


def test_compare_sets_the_simulator_and_the_ilp_as_simulate_does(tmp_path: Any) -> None:
    from colocate.cli import app

    args = ["compare", "--cluster", "scheduler/data/cluster-default.yaml", "--workloads", "nothing-*.csv",
            "--out", str(tmp_path / "out")]
    for bad, named in ((["--set", "sim.colocation_strength=-1"], "--set sim.colocation_strength"),
                       (["--set", "ilp.top_k=-1"], "--set ilp.top_k")):
        result = CliRunner().invoke(app, [*args, *bad])
        assert isinstance(result.exception, InputError) and named in str(result.exception), result.output
    assert not (tmp_path / "out").exists()


def test_docs_commands_lists_every_command_and_every_subcommand_but_the_benchmarks() -> None:
    """docs/commands.md is the map of the CLI: each command (and each subcommand of a group, ``state check``;
    ``bench <what>`` stands for the benchmarks) has its row."""
    import re
    from pathlib import Path

    from colocate.cli import app

    page = (Path(__file__).resolve().parents[1] / "docs" / "commands.md").read_text()
    rows = " ".join(line for line in page.splitlines() if line.startswith("| `colocate"))
    named = set(re.findall(r"`(?:colocate )?([a-z-]+(?: [a-z-]+)?)[^`]*`", rows))
    named |= {n.split()[0] for n in named}
    root = app
    missing = []
    for name, command in root.commands.items():
        subcommands = getattr(command, "commands", {}) if name != "bench" else {}
        wanted = [f"{name} {sub}" for sub in subcommands] or [name]
        missing += [w for w in wanted if w not in named]
    assert not missing, f"docs/commands.md lacks {missing}"


# Options each command showed before its options were built from shared declarations (main at issue 47):
# a ceiling, so that no command grows. Issue 48 (many users) then added, on purpose: --server on every command that
# talks to a server (submit, jobs, cancel, learned, logs, state check, token), and serve's API and users
# (--api-port, --api-host, --tls-cert, --tls-key, --users, --admin, --private-data). Issue 46 (packing that pays, judged
# on replicates) added compare's --replicates.
OPTION_CEILINGS = {
    "bench matrices": 3,
    "bench predictor": 3,
    "bench profiler": 9,
    "bench scheduler": 16,
    "bench serve": 4,
    "bench simulator": 5,
    "bench variants": 8,
    "cancel": 2,
    "colocation-table": 4,
    "compare": 18,
    "compare-gpus": 6,
    "demo": 4,
    "env": 3,
    "export-gavel": 3,
    "export-pairs": 3,
    "import-gavel": 4,
    "import-pairs": 7,
    "jobs": 4,
    "kernels": 5,
    "launch": 22,
    "learned": 3,
    "logs": 2,
    "matrix": 6,
    "predict": 10,
    "profile": 5,
    "schedule": 15,
    "serve": 29,
    "simulate": 14,
    "state check": 2,
    "submit": 3,
    "token create": 3,
    "token list": 2,
    "token revoke": 2,
}


def test_no_command_shows_more_options_than_before() -> None:
    grown = {path: len(_visible(command)) for path, command in COMMANDS.items()
              if len(_visible(command)) > OPTION_CEILINGS.get(path, 0)}
    assert not grown, grown
