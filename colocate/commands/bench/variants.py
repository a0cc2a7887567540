"""``colocate bench variants``: the command line of :mod:`scheduler.bench.variants` (parse, run, print)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.bench.simulator import DEFAULT_WORKLOADS, SIA_CLUSTER

VARIANT_HELP = ("A model variant: NAME=SETTING[,SETTING...] with each SETTING a --set KEY=VALUE of `colocate simulate` "
                "(sim.* or ilp.*), e.g. 'earlier=sim.throughput=bootstrap,sim.step_times=fitted'; a NAME alone is "
                "the defaults (repeatable; default: one variant, 'default').")


def parse_variant(text: str) -> Any:
    """``NAME=KEY=VALUE,KEY=VALUE`` (or ``NAME``) → a :class:`~scheduler.bench.variants.Variant`, its settings
    checked as ``colocate simulate --set`` checks them."""
    from dataclasses import replace

    from colocate.cli_config import ConfigSpec, entries, parse_setting
    from common.errors import InputError
    from scheduler.bench.variants import Variant
    from scheduler.ilp.config import IlpConfig
    from scheduler.sim.config import SimConfig

    name, _, rest = text.partition("=")
    known = {e.key: e for spec in (ConfigSpec("sim", SimConfig), ConfigSpec("ilp", IlpConfig)) for e in entries(spec)}
    sim: dict[str, Any] = {}
    ilp: dict[str, Any] = {}
    for setting in (s for s in rest.split(",") if s.strip()):
        key, sep, value = setting.partition("=")
        entry = known.get(key.strip())
        if not sep or entry is None:
            raise InputError(f"{setting!r} in variant {name!r}", field="--variant",
                             valid="KEY=VALUE with KEY one of " + ", ".join(sorted(known)))
        (sim if entry.spec.name == "sim" else ilp)[entry.dotted] = parse_setting(entry, value)
    if not name.strip():
        raise InputError(f"{text!r}", field="--variant", valid="NAME or NAME=KEY=VALUE,...")
    try:
        IlpConfig(**ilp)
        return Variant(name.strip(), replace(SimConfig(), **sim), ilp)
    except InputError as err:
        raise InputError(f"variant {name!r}: {err.detail}", field="--variant", valid=err.valid) from None


def register_bench(bench_app: Any) -> None:
    """Add ``colocate bench variants`` to the bench sub-app."""
    from colocate import cli_kit
    from colocate.cli_config import input_option

    @bench_app.command("variants")
    def variants_bench(
        variant: list[str] = cli_kit.Option([], "--variant", help=VARIANT_HELP),
        workloads: str = cli_kit.Option(None, "--workloads", help="Comma-separated workload files.",
                                      show_default="Sia's philly and saturn workload-1"),
        policies: str = cli_kit.Option("sia", "--policies", help="Comma-separated policies."),
        cluster: Path = input_option("cluster", SIA_CLUSTER, show_default="scheduler/examples/sia-64gpu.yaml"),
        profiles: Path = input_option("profiles", show_default="<shared data>/sia/traces"),
        replicates: int = cli_kit.Option(1, "--replicates", help="Runs per workload: the trace itself, then copies with "
                                                               "every arrival moved inside one round."),
        repeats: int = cli_kit.Option(1, "--repeats", help="Timed repetitions, the variants alternating."),
        as_json: bool = input_option("as_json", False),
    ) -> None:
        """Run the simulator under model variants (ablations, fidelity, speed) and print each run's figures."""
        from rich.console import Console
        from rich.table import Table

        from common.bounds import check_number
        from common.safe_load import json_text
        from scheduler.bench.variants import run_variants
        from scheduler.formats.shared_data import shared_data_dir
        from scheduler.policies import policy_spec

        check_number(replicates, field="--replicates", low=1, high=100, integer=True)
        check_number(repeats, field="--repeats", low=1, high=100, integer=True)
        chosen = [parse_variant(v) for v in variant] or [parse_variant("default")]
        names = [policy_spec(p).name for p in policies.split(",") if p.strip()]
        files = ([Path(p.strip()) for p in workloads.split(",") if p.strip()] if workloads
                 else [shared_data_dir() / p for p in DEFAULT_WORKLOADS])
        table = Table(title=f"colocate bench variants · {cluster.name}")
        for column in ("workload", "rep", "policy", "variant", "avg JCT h", "restarts", "rounds", "wall s", "CPU s"):
            table.add_column(column, justify="left" if column in ("workload", "policy", "variant") else "right")
        for row in run_variants(cluster, files, names, chosen, replicates, repeats, profiles):
            if as_json:
                print(json_text(row), flush=True)
                continue
            table.add_row(row["workload"], str(row["replicate"]), row["policy"], row["variant"],
                          f"{row['avg_jct_h']:.4f}", str(row["restarts"]), str(row["rounds"]),
                          f"{row['wall_s']:.1f}", f"{row['cpu_s']:.1f}")
        if not as_json:
            Console(width=160).print(table)
