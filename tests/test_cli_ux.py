"""What a new user sees first: ``--version``, ``--help`` that shows flags as flags, usage errors in one line,
and an error that names the GPU types without profiles — through the real console script."""

from __future__ import annotations

import os
import re
from pathlib import Path

from test_cli_stdout import REPO, colocate

from scheduler.formats.profiles import read_sia_profiles


def test_version_prints_the_package_version() -> None:
    from importlib.metadata import version

    done = colocate("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"colocate {version('colocate')}"


def test_help_shows_flags_without_a_value_type(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    for args in (["--help"], ["simulate", "--help"]):
        done = colocate(*args)
        assert done.returncode == 0, done.stderr
        assert "<bool>" not in done.stdout, args
        assert re.search(r"--help\s+Show this message", done.stdout), done.stdout
    simulate_help = done.stdout
    assert re.search(r"--json\s+Print the result as JSON", simulate_help)
    assert "-o, --out PATH" in simulate_help  # options that take a value keep their type


def test_usage_errors_are_one_line_with_exit_2_and_no_args_still_prints_the_help(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")  # narrow: the line must not be boxed or wrapped by Rich
    cases = {("simulate", "--round-s", "abc"): ("colocate simulate: Invalid value for '--round-s'",),
             ("simulate", "--nosuch"): ("colocate simulate: No such option", "--nosuch"),  # Click words it two ways
             ("simulate",): ("colocate simulate: Missing option '--cluster'",),
             ("nosuchcmd",): ("colocate: No such command 'nosuchcmd'",),
             ("submit",): ("Missing argument 'JOB.yaml...'",)}
    for args, fragments in cases.items():
        done = colocate(*args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, (args, done.stderr)
        assert lines[0].startswith("error: ") and "--help')" in lines[0], lines[0]
        assert all(fragment in lines[0] for fragment in fragments), lines[0]
        assert "Traceback" not in done.stderr and "╭" not in done.stderr
    done = colocate()
    assert done.returncode == 2 and "Usage: colocate" in done.stdout and "simulate" in done.stdout


def test_simulate_names_the_cluster_types_without_bundled_profiles(tmp_path: Path, monkeypatch) -> None:
    """Sia's 64-GPU cluster on a clean clone (no shared data): the error names aws, dgx-ext, rtx as unprofiled
    and the bundled types t4, v100 — not 'no placements-<gpu>.csv files found'."""
    monkeypatch.setenv("COLOCATE_SHARED_DATA", str(tmp_path / "absent"))
    done = colocate("simulate", "--cluster", "scheduler/examples/sia-64gpu.yaml", "--workload",
                    "scheduler/examples/demo-workload.csv", "--policy", "sia")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    error = done.stderr.replace("\n", " ")
    assert "GPU type(s) aws, dgx-ext, rtx" in error and "profiles t4, v100" in error, error
    assert "no placements-<gpu>.csv files found" not in error


def test_reading_profiles_for_absent_applications_names_the_ones_there() -> None:
    import pytest

    from common.errors import InputError

    with pytest.raises(InputError, match="application") as err:
        read_sia_profiles(REPO / "scheduler/data/profiles", applications=["nope"])
    assert "cifar10" in str(err.value)


def test_the_serve_lock_file_names_the_server_pid_and_a_second_server_keeps_it(tmp_path: Path) -> None:
    """The shell's `$!` is the server itself; the lock file says which pid holds the state directory too,
    and a refused second server does not erase it."""
    import pytest

    from common.errors import InputError
    from scheduler.executor.registry import make_executor
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.service.config import ServeConfig
    from scheduler.service.server import Server
    from scheduler.service.state.store import StateStore

    cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})

    def server() -> Server:
        return Server(StateStore(tmp_path / "state"), cluster, make_executor("local"), ServeConfig(device="cpu"))

    first = server()
    first.acquire()
    lock = tmp_path / "state" / "server.lock"
    assert lock.read_text() == f"{os.getpid()}\n"
    with pytest.raises(InputError, match="another colocate serve"):
        server().acquire()
    assert lock.read_text() == f"{os.getpid()}\n"


def _commands(group, path=()):
    import click

    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def test_no_help_text_is_lost_to_rich_markup() -> None:
    """Help was rendered through Rich markup, where ``[word ...]`` is a style tag that vanishes from the screen
    (``Results directory [default: results/<name>]`` showed as ``Results directory .``): every command's and
    option's help must read the same after markup, and defaults that are not values go in ``show_default``."""
    from rich.text import Text

    from colocate.cli import app

    lost = []
    for path, command in _commands(app):
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        texts += [p.show_default for p in command.params if isinstance(getattr(p, "show_default", None), str)]
        lost += [(" ".join(path), t) for t in texts if Text.from_markup(t).plain != t]
    assert len(list(_commands(app))) > 20
    assert not lost, lost


def test_a_default_that_is_not_a_value_is_shown(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    done = colocate("profile", "--help")
    assert done.returncode == 0, done.stderr
    assert "[default: (results/<name>)]" in done.stdout
