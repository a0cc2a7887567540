"""User-facing options declared once, on the config field that holds them.

A frozen config dataclass (``IlpConfig``, ``SimConfig``, ``ServeConfig``, a command's request) declares each
knob a user may set with :func:`option`: its default, its help, and where it differs from the defaults, its
flag, its choices, whether it is experimental. The command line is generated from those fields
(:mod:`colocate.cli_config`), so a default, a help text or a list of choices is written in exactly one place.

* A field without :func:`option` is internal: no command shows or sets it.
* ``experimental=True``: a knob for ablations and research (results/ that used it name it). It stays off the
  command's ``--help``; ``--set NAMESPACE.FIELD=VALUE`` sets it and ``--help-experimental`` lists it.
* :func:`nested`: a field holding another config whose options join the command's (``ServeConfig.stability``).

This module imports nothing of the project or of the command-line library: the configs stay plain dataclasses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

_MISSING: Any = dataclasses.MISSING

Choices = Sequence[str] | Callable[[], Sequence[str]]


def option(default: Any = _MISSING, help: str = "", *, flag: str | None = None, choices: Choices | None = None,
           experimental: bool = False, show_default: str | bool = True,
           default_factory: Callable[[], Any] = _MISSING, metavar: str | None = None, short: str | None = None,
           argument: bool = False) -> Any:
    """A dataclass field that is also a command-line option (no default: a required option).

    ``flag``: the option's name when it is not ``--<field-name>`` (``--restart-cost`` for ``restart_cost_s``);
    ``short``: a one-letter form (``-o``). ``choices``: the valid values (or a function returning them: a
    registry's names); a ``Literal`` type gives them too. ``show_default``: a text for defaults that are not a
    value (``"max(--round-s, 3 x start-up)"``). ``argument``: a positional argument rather than an option.
    """
    if not help:
        raise ValueError("an option needs a help text")
    metadata = {"help": help, "flag": flag, "choices": choices, "experimental": experimental,
                "show_default": show_default, "metavar": metavar, "short": short,
                "argument": argument}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def nested(factory: Callable[[], Any], help: str = "") -> Any:
    """A field holding another config whose options join the command's; ``factory`` builds its default."""
    return dataclasses.field(default_factory=factory, metadata={"nested": True, "help": help})


def is_option(field: dataclasses.Field) -> bool:
    return bool(field.metadata.get("help")) and not field.metadata.get("nested")


def is_nested(field: dataclasses.Field) -> bool:
    return bool(field.metadata.get("nested"))


def flag_of(field: dataclasses.Field) -> str:
    """The field's command-line flag."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def choices_of(field: dataclasses.Field, annotation: Any = None) -> tuple[str, ...] | None:
    """The field's valid values: declared, else a ``Literal`` annotation's, else None (any value of its type)."""
    from typing import Literal, get_args, get_origin

    declared = field.metadata.get("choices")
    if declared is not None:
        return tuple(declared() if callable(declared) else declared)
    if annotation is not None and get_origin(annotation) is Literal:
        return tuple(str(a) for a in get_args(annotation))
    return None


def set_options(config: Any, namespace: str) -> list[str]:
    """The command-line arguments that give ``config``'s options that differ from its class's defaults:
    ``--flag VALUE`` for options with a flag, ``--set NAMESPACE.FIELD=VALUE`` for experimental ones (what a
    report prints as the command that reproduces a run)."""
    out: list[str] = []
    for field in dataclasses.fields(config):
        if not is_option(field) or field.default is _MISSING:
            continue
        value = getattr(config, field.name)
        if value == field.default:
            continue
        if field.metadata.get("experimental"):
            out.append(f"--set {namespace}.{field.name}={value}")
        elif isinstance(value, bool):
            out.append(flag_of(field) if value else "--no-" + flag_of(field)[2:])
        else:
            out.append(f"{flag_of(field)} {value}")
    return out


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What many commands read and where they write: each idea has this one flag and this one help text. A
    command (:func:`colocate.cli_config.input_option`) or another config (:func:`shared_option`) takes the
    field with a default of its own; ``show_default`` says what that default is where it is not a value."""

    cluster: Any = option(None, "Cluster YAML: gpu_types: {NAME: {nodes, gpus_per_node, memory_gb}}.")
    profiles: Any = option(None, "Throughput profiles: a profile CSV (application,gpu_type,num_gpus,batch_size,"
                                 "throughput) or Sia's traces directory.")
    colocation: Any = option(None, "Pair ratios: a colocation table CSV (gpu_type,type_a,type_b,ratio_a,ratio_b), "
                                   "or a results directory (e.g. from import-pairs) whose measured pairs become one.")
    out: Any = option(None, "Where to write the output (a directory, or the file the command's description "
                            "names).", short="-o")
    as_json: bool = option(False, "Print the result as JSON instead of tables.", flag="--json")


def shared_field(name: str, of: type = Inputs) -> dataclasses.Field:
    """The field ``name`` of the shared declarations ``of`` (:class:`Inputs`, or another such as the executors'
    ``Runtime``): its flag, short form, choices and help."""
    return {f.name: f for f in dataclasses.fields(of)}[name]


def shared_option(name: str, default: Any = _MISSING, *, show_default: str | bool = True, of: type = Inputs) -> Any:
    """A field of another config that is ``of``'s ``name``: the same flag, choices and help, its own default."""
    meta = shared_field(name, of).metadata
    return option(default, meta["help"], flag=meta["flag"] or flag_of(shared_field(name, of)), short=meta["short"],
                  choices=meta["choices"], show_default=show_default)
