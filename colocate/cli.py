"""The ``colocate`` command line: one module per command under ``colocate/commands`` (accelerate style).

Each command module exposes ``register(app)`` and imports heavy dependencies (torch, pulp, ray) inside the
command body so ``colocate --help`` and light commands start fast. Bad input of any kind surfaces as an
:class:`~colocate.errors.InputError` and is printed here as one red line with exit status 2.
"""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console
from rich.markup import escape

from colocate.errors import InputError

# Order here is the order in `colocate --help`.
COMMAND_MODULES: tuple[str, ...] = (
    "demo",
    "profile",
    "env",
    "schedule",
    "launch",
    "bench",
    "simulate",
    "compare",
    "matrix",
    "import_gavel",
    "export_gavel",
    "colocation_table",
    "predict",
    "kernels",
)

app = typer.Typer(
    name="colocate",
    help="GPU co-location profiler and packing-aware cluster scheduler.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module_name in COMMAND_MODULES:
    importlib.import_module(f"colocate.commands.{_module_name}").register(app)


def main() -> None:
    """Console-script entry point: run the app, turning input errors into one line on stderr."""
    try:
        app(standalone_mode=False)
    except InputError as err:
        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except typer.Abort:
        Console(stderr=True).print("[yellow]aborted[/]")
        sys.exit(130)
    except KeyboardInterrupt:
        Console(stderr=True).print("[yellow]interrupted[/]")
        sys.exit(130)
    except (typer.BadParameter, typer.Exit) as exc:  # pragma: no cover - click handles these normally
        raise exc
    except Exception as exc:  # click usage errors arrive as ClickException in non-standalone mode
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Exit):
            sys.exit(exc.exit_code)
        raise


if __name__ == "__main__":
    main()
