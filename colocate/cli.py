"""The ``colocate`` command line: one module per command under ``colocate/commands`` (accelerate style).

Each command module exposes ``register(app)`` and imports heavy dependencies (torch, pulp, ray) inside the
command body so ``colocate --help`` and light commands start fast. Bad input of any kind surfaces as an
:class:`~common.errors.InputError` and is printed here as one red line with exit status 2.
"""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console
from rich.markup import escape

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
    "bench",
    "simulate",
    "compare",
    "matrix",
    "import_gavel",
    "export_gavel",
    "import_pairs",
    "export_pairs",
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
    """Console-script entry point: click handles usage errors; input errors become one line, exit 2."""
    try:
        app()  # standalone: usage errors print click's message and exit 2
    except InputError as err:
        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:  # commands with work to resume say more before this
        Console(stderr=True).print("interrupted", highlight=False)
        sys.exit(130)


if __name__ == "__main__":
    main()
