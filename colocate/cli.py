"""The ``colocate`` command line: one module per command under ``colocate/commands`` (accelerate style).

Each command module exposes ``register(app)`` and imports heavy dependencies (torch, pulp, ray) inside the
command body so ``colocate --help`` and light commands start fast. Bad input of any kind surfaces as an
:class:`~common.errors.InputError` and is printed here as one red line with exit status 2.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from colocate.cli_kit import App, Exit, Option, echo
from common.errors import InputError

# Order here is the order in `colocate --help`.
COMMAND_MODULES: tuple[str, ...] = (
    "demo",
    "profile",
    "env",
    "schedule",
    "launch",
    "serve",
    "submit",
    "jobs",
    "cancel",
    "learned",
    "logs",
    "token",
    "state",
    "bench",
    "simulate",
    "compare",
    "matrix",
    "compare_gpus",
    "import_gavel",
    "export_gavel",
    "import_pairs",
    "export_pairs",
    "colocation_table",
    "predict",
    "kernels",
)

# Commands run often from scripts (a submitter in a loop, a dashboard polling jobs): ``main`` builds an app of
# that one command only, so the other commands' module-level imports (the ILP, the launcher) are not paid.
LIGHT_COMMANDS: tuple[str, ...] = ("submit", "jobs", "cancel")


def build_app(names: tuple[str, ...] = COMMAND_MODULES) -> App:
    """The command-line app with the commands of ``names`` (all by default)."""
    built = App(name="colocate", help="GPU co-location profiler and packing-aware cluster scheduler.")
    built.options(_root)  # ``colocate --version``
    for module_name in names:
        importlib.import_module(f"colocate.commands.{module_name}").register(built)
    return built


def __getattr__(name: str) -> App:
    """``colocate.cli.app``, the full app, built on first use."""
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(name)


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's), or a note when running from a bare checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("colocate")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _print_version(value: bool) -> None:
    if value:
        echo(f"colocate {package_version()}")
        raise Exit()


def _root(
    version: bool = Option(False, "--version", callback=_print_version, is_eager=True, expose_value=False,
                           help="Print the version and exit."),
) -> None:
    """GPU co-location profiler and packing-aware cluster scheduler."""


def usage_error(err: Any) -> InputError:
    """A Click usage error (an unknown option, a value of the wrong type, a missing argument) as the one-line
    error every other bad input gets, pointing at the command's ``--help`` for what is valid."""
    ctx = getattr(err, "ctx", None)
    command = ctx.command_path if ctx is not None else "colocate"
    message = err.format_message()
    return InputError(message.rstrip("."), source=command, valid=f"see '{command} --help'")


def _say_error(err: InputError) -> None:
    from rich.console import Console  # only on the way out: a command that succeeds never pays for Rich
    from rich.markup import escape

    from common.untrusted import printable  # an error may quote a file's or a job's text: shown, never run

    Console(stderr=True).print(f"[bold red]error:[/] {escape(printable(err))}", highlight=False, soft_wrap=True)


def main() -> None:
    """Console-script entry point. Bad input of any kind — a file, a value, a Click usage error (an unknown option,
    a value of the wrong type: :func:`usage_error`) — is one line on stderr and exit status 2. Click runs outside
    its standalone mode so that its usage errors reach here rather than being printed as a boxed panel."""
    light = len(sys.argv) > 1 and sys.argv[1] in LIGHT_COMMANDS and not {"--help", "-h"} & set(sys.argv[1:2])
    try:
        command = build_app((sys.argv[1],)) if light else __getattr__("app")
        code = command(standalone_mode=False, prog_name="colocate")  # `python -m colocate.cli` says colocate too
    except InputError as err:
        _say_error(err)
        sys.exit(2)
    except KeyboardInterrupt:  # commands with work to resume say more before this
        from rich.console import Console

        Console(stderr=True).print("interrupted", highlight=False)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as err:  # `colocate` alone (or a group alone): its help
        echo(err.format_message())
        sys.exit(2)
    except click.UsageError as err:  # an unknown option, a value of the wrong type, a missing argument
        _say_error(usage_error(err))
        sys.exit(2)
    except click.ClickException as err:  # Click's others (a file it could not open)
        _say_error(InputError(err.format_message()))
        sys.exit(err.exit_code)
    except click.Abort:  # end of input at a prompt
        sys.exit(1)
    if isinstance(code, int) and not isinstance(code, bool) and code:  # a command's Exit(N)
        sys.exit(code)


if __name__ == "__main__":
    main()
