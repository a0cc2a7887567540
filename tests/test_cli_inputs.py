"""The inputs many commands share (``common.options.Inputs``): one flag and one help text for each idea on every
command, and ``--colocation`` takes a results directory wherever it is accepted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from colocate.cli import build_app
from common.options import Inputs, flag_of, shared_field

SHARED = {flag_of(shared_field(name)): shared_field(name).metadata["help"] for name in
          ("cluster", "profiles", "colocation", "out", "as_json")}


def _commands() -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))
        if not hasattr(command, "commands"):
            out[" ".join(path)] = command

    walk(build_app(), ())
    return out


def test_each_shared_input_has_one_help_text_on_every_command() -> None:
    seen: dict[str, set[str]] = {flag: set() for flag in SHARED}
    for path, command in _commands().items():
        for param in command.params:
            for flag in set(getattr(param, "opts", [])) & set(SHARED):
                seen[flag].add(param.help)
                assert param.help == SHARED[flag], (path, flag, param.help)
    assert all(seen.values()), seen  # every shared flag is used somewhere
    assert Inputs().as_json is False and flag_of(shared_field("as_json")) == "--json"


def _results_dir(tmp_path: Path) -> Path:
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("job_a,job_b,gpu_type,time_a,time_b,speed_a,speed_b\ncifar10,cifar10,t4,0.05,0.05,0.95,0.95\n"
                     "cifar10,deepspeech2,t4,0.05,0.3,0.9,0.9\n")
    done = CliRunner().invoke(build_app(), ["import-pairs", str(pairs), "--out", str(tmp_path / "apps"),
                                            "--no-matrices"])
    assert done.exit_code == 0, done.output
    return tmp_path / "apps"


def test_schedule_takes_a_results_directory_as_its_colocation_table(tmp_path: Path) -> None:
    results = _results_dir(tmp_path)
    done = CliRunner().invoke(build_app(), [
        "schedule", "--cluster", "scheduler/examples/cluster-small.yaml", "--jobs", "scheduler/examples/jobs-small.csv",
        "--profiles", "scheduler/examples/profiles-generic.csv", "--colocation", str(results), "--json"])
    assert done.exit_code == 0, (done.output, done.exception)
    assert '"allocations"' in done.output


def test_serve_starts_from_a_results_directorys_measured_pairs(tmp_path: Path) -> None:
    from colocate.analysis.matrix import measured_pairs
    from scheduler.model.jobs import Job
    from scheduler.service.serve import serve_colocation

    results = _results_dir(tmp_path)
    table, origin = serve_colocation(results, ["t4"], "timeslice", measured_pairs(results))
    assert table is not None and str(results) in origin
    assert table.lookup("t4", Job("a", "cifar10"), Job("b", "deepspeech2")) is not None


def test_the_library_names_a_field_and_the_command_line_its_flag(tmp_path: Path) -> None:
    """``load_cluster`` names the field ``cluster``; the command prints ``--cluster``. A field of the same name in
    another file (a job file's key) keeps its name."""
    import pytest

    from colocate.cli_kit import flag_named
    from common.errors import InputError
    from scheduler.model.cluster import load_cluster

    missing = tmp_path / "nope.yaml"
    with pytest.raises(InputError) as info:
        load_cluster(missing)
    assert info.value.field == "cluster"
    done = CliRunner().invoke(build_app(), ["simulate", "--cluster", str(missing), "--workload", "x.csv"])
    assert isinstance(done.exception, InputError) and done.exception.field == "--cluster", done.output
    command = build_app().commands["simulate"]
    other = InputError("bad", source=tmp_path / "job.yaml", field="cluster")
    assert flag_named(other, command.params, {"cluster": missing}) is other
    inside = InputError("bad", source=tmp_path / "state" / "server.db", field="state")
    jobs = build_app().commands["jobs"]
    assert flag_named(inside, jobs.params, {"state": tmp_path / "state"}).field == "--state"


def test_launch_and_serve_share_the_runtime_flags() -> None:
    """``--device``, ``--sharing``, ``--threads`` and ``--grace``: one help text on both (``Runtime``), each
    command with its own default (serve gives a stopped job 30 s to checkpoint, launch 10 s)."""
    commands = _commands()
    helps: dict[str, set[str]] = {}
    defaults: dict[tuple[str, str], Any] = {}
    for path in ("launch", "serve"):
        for param in commands[path].params:
            for flag in set(getattr(param, "opts", [])) & {"--device", "--sharing", "--threads", "--grace"}:
                helps.setdefault(flag, set()).add(param.help)
                defaults[(path, flag)] = param.default
    assert set(helps) == {"--device", "--sharing", "--threads", "--grace"}
    assert all(len(texts) == 1 for texts in helps.values()), helps
    assert defaults[("launch", "--grace")] == 10.0 and defaults[("serve", "--grace")] == 30.0
