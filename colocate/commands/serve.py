"""``colocate serve``: run the live scheduler on a state directory until stopped (Ctrl-C / SIGTERM)."""

from __future__ import annotations

import signal
from dataclasses import replace

from colocate import cli_kit
from colocate.cli_config import ConfigSpec, config_command, entries, explicit_settings
from common.errors import InputError
from scheduler.service.config import ILP_POLICIES, ServeConfig
from scheduler.service.serve import ServeRequest

REQUEST_SPEC = ConfigSpec("request", ServeRequest, panel="Where")
# The ILP knobs serve shows as flags; the rest of the round ILP is set with --set serve.ilp.FIELD=VALUE.
SERVE_SPEC = ConfigSpec("serve", ServeConfig, base=ServeConfig, panel="Scheduler",
                        flags=("policy", "round_s", "device", "sharing", "threads", "stop_grace_s", "ilp.restart_cost_s",
                               "ilp.time_limit_s", "ilp.max_slowdown", "stability.min_run_s", "probe.enabled",
                               "probe.budget_gpu_s"))


def register(app: cli_kit.App) -> None:
    app.command("serve")(serve)


def _check_policy_options(config: ServeConfig) -> None:
    """ILP settings given with a policy that solves no ILP would be silently ignored: refuse them; so is a group
    size that contradicts ``colocate-triples``."""
    given = {k: v for k, v in explicit_settings("serve").items() if k.startswith("ilp.")}
    policy = config.policy
    shown = {e.dotted: e.shown_as for e in entries(SERVE_SPEC)}
    if given and policy not in ILP_POLICIES:
        flag = shown[sorted(given)[0]]
        raise InputError(f"{flag} with --policy {policy}", field=flag,
                         valid=f"--policy {', '.join(ILP_POLICIES)} (the policies that solve the round ILP)")
    size = given.get("ilp.max_group_size")
    if policy == "colocate-triples" and size is not None and size != 3:
        raise InputError(f"max_group_size {size} with --policy colocate-triples", field=shown["ilp.max_group_size"],
                         valid="3, or --policy colocate for pairs")


@config_command(REQUEST_SPEC, SERVE_SPEC)
def serve(*, request: ServeRequest, serve: ServeConfig) -> None:
    """Run packed, adaptive jobs: every round the policy decides, the executor enacts only the changes."""
    from colocate.commands._output import error_console
    from scheduler.service.rounds import RoundStats
    from scheduler.service.serve import serve_forever
    from scheduler.service.state.health import StateChanged

    _check_policy_options(serve)
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
