"""``colocate bench <what>``: benchmarks that print the figures recorded in results/BENCHMARKS.md.

``bench`` is a group of subcommands. Each benchmark lives in its own module that exposes
``register_bench(bench_app)`` and adds one subcommand; to add one, append the module's dotted path to
:data:`BENCHMARK_MODULES` (a one-line edit, like ``COMMAND_MODULES`` in ``colocate/cli.py``). Benchmark
modules import their heavy dependencies inside the command body so ``colocate --help`` stays fast.
"""

from __future__ import annotations

import importlib

from colocate import cli_kit

# Dotted paths of modules exposing register_bench(bench_app); order = order in `colocate bench --help`.
BENCHMARK_MODULES: tuple[str, ...] = (
    "colocate.commands.bench.scheduler",
    "colocate.commands.bench.profiler",
    "colocate.commands.bench.simulator",
    "colocate.commands.bench.analysis",
    "colocate.commands.bench.serve",
    "colocate.commands.bench.variants",
)

bench_app = cli_kit.App(
    name="bench",
    help="Benchmarks (speed and quality figures for results/BENCHMARKS.md).",
)

_registered = False


def _register_benchmarks() -> None:
    global _registered
    if _registered:
        return
    for module_name in BENCHMARK_MODULES:
        importlib.import_module(module_name).register_bench(bench_app)
    _registered = True


def register(app: cli_kit.App) -> None:
    _register_benchmarks()
    app.add_command(bench_app, "bench")
