"""``colocate serve``: run the live scheduler on a state directory until stopped (Ctrl-C / SIGTERM)."""

from __future__ import annotations

import signal
from dataclasses import replace

from colocate import cli_kit
from colocate.cli_config import ConfigSpec, Defaults, config_command
from common.errors import InputError
from scheduler.service.config import ServeConfig
from scheduler.service.serve import ServeRequest


def _policy_defaults(built: ServeConfig, others: dict[str, object]) -> Defaults:
    """Serve's knobs for the chosen policy: its ILP as serve runs it; ILP settings with a policy that solves
    none are refused."""
    from colocate.commands.simulate import ILP_VALID
    from scheduler.policies import PINNED, policy_spec

    spec = policy_spec(built.policy)
    return Defaults(ServeConfig.for_policy(built.policy), why=f"--policy {built.policy}", valid=ILP_VALID,
                    unused=() if spec.solves_ilp else ("ilp",), pinned={f"ilp.{f}": PINNED[f] for f in spec.pinned})


REQUEST_SPEC = ConfigSpec("request", ServeRequest, panel="Where")
# The ILP knobs serve shows as flags; the rest of the round ILP is set with --set serve.ilp.FIELD=VALUE.
SERVE_SPEC = ConfigSpec("serve", ServeConfig, base=ServeConfig, panel="Scheduler",
                        flags=("policy", "round_s", "device", "sharing", "threads", "stop_grace_s", "ilp.restart_cost_s",
                               "ilp.time_limit_s", "ilp.max_slowdown", "stability.min_run_s", "probe.enabled",
                               "probe.budget_gpu_s", "users", "api.admins", "api.private_data"), defaults=_policy_defaults)


def register(app: cli_kit.App) -> None:
    app.command("serve")(serve)


@config_command(REQUEST_SPEC, SERVE_SPEC)
def serve(*, request: ServeRequest, serve: ServeConfig) -> None:
    """Run packed, adaptive jobs: every round the policy decides, the executor enacts only the changes."""
    from colocate.commands._output import error_console
    from scheduler.service.rounds import RoundStats
    from scheduler.service.serve import serve_forever
    from scheduler.service.state.health import StateChanged

    request = replace(request, config=serve)
    if request.colocation is not None and request.colocation.is_dir():  # a results directory's measured pairs
        from colocate.analysis.matrix import measured_pairs

        request = replace(request, colocation_rows=measured_pairs(request.colocation))
    stop = {"now": False}

    def request_stop(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    def on_round(stats: RoundStats) -> None:
        error_console.print(f"round {stats.round}: {stats.active_jobs} active, {stats.stopped} stopped, "
                            f"{stats.started} started, {stats.total_s:.3f} s (policy {stats.policy_s:.3f} s)",
                            highlight=False)

    try:
        serve_forever(request, should_stop=lambda: stop["now"], on_round=on_round,
                      announce=lambda line: error_console.print(line, highlight=False, soft_wrap=True))
    except StateChanged as err:  # not bad input: the state went away under a running server (exit 3)
        from common.untrusted import printable

        said = InputError(err.detail, source=err.source, field="--state", valid=err.valid)  # the field's flag
        error_console.print(f"error: {printable(said)}", highlight=False, markup=False, soft_wrap=True)
        raise cli_kit.Exit(3) from None
