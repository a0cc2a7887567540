"""Command-line options generated from config fields: one pattern for every command that takes a config.

A command declares the configs it takes with :func:`config_command`; each field declared with
:func:`common.options.option` becomes a command-line option with the field's default (from the config's default
instance), help, flag and choices, so nothing is restated in the command. A command then receives each config
built and checked::

    @config_command(ConfigSpec("sim", SimConfig, panel="Simulator"))
    def simulate(cluster: Path = cli_kit.Option(...), *, sim: SimConfig) -> None: ...

Two options join every such command: ``--set NAMESPACE.FIELD=VALUE`` (repeatable) sets any field, the
experimental ones included, and ``--help-experimental`` lists the fields that have no flag of their own. A
config's own check
(``__post_init__``) names a field; the error the user sees names that field's flag.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, get_args, get_origin, get_type_hints

from colocate import cli_kit
from colocate.config_file import _optional_of, parse_setting
from common.errors import InputError
from common.options import choices_of, flag_of, is_nested, is_option, shared_field

_MISSING: Any = dataclasses.MISSING
_SET = "set_options"
_CONTEXT = "cli_context"  # the command's context is passed to a parameter annotated cli_kit.Context
_HELP_EXPERIMENTAL = "help_experimental"


@dataclass(frozen=True)
class ConfigSpec:
    """A config a command takes.

    ``name``: the keyword the command function receives it as, and its ``--set`` namespace. ``base``: the
    default instance (None: the class's own defaults; a request with required fields has no other).
    ``flags``: the dotted field paths shown as flags (None: every option that is not experimental); the others
    are set with ``--set``. ``panel``: the heading of its options in ``--help``. ``defaults``: when the config's
    defaults depend on another choice of the run (an ILP policy's own settings), ``defaults(built, others)``
    gets the config built over ``base`` and the command's other arguments and says them (:class:`Defaults`); the
    user's values are then applied over those.
    """

    name: str
    cls: type
    base: Callable[[], Any] | None = None
    flags: tuple[str, ...] | None = None
    panel: str | None = None
    defaults: Callable[[Any, dict[str, Any]], Defaults] | None = None


@dataclass(frozen=True)
class Defaults:
    """A config's defaults for this run (:attr:`ConfigSpec.defaults`).

    ``value``: one default instance (the command receives one config), a dict of them (it receives a config per
    key, each with the user's values), or None (the config does not apply: the command receives None).
    ``unused``: the dotted field prefixes that do not apply (``("",)``: all; implied by an empty ``value``).
    Setting a field that does not apply is refused: ``{flag} with {why}``, ``valid`` saying what would apply.
    ``pinned``: dotted field → (what it is, valid): fields the choice decides (a policy's packing), refused when
    set to anything but the default's value.
    """

    value: Any
    why: str = ""
    valid: str = ""
    unused: tuple[str, ...] = ()
    pinned: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Entry:
    """One option field of a config, reached through ``path`` from the config at the top."""

    spec: ConfigSpec
    path: tuple[str, ...]
    field: dataclasses.Field
    annotation: Any
    default: Any  # _MISSING: required

    @property
    def key(self) -> str:
        """Its ``--set`` key: ``sim.substeps``, ``serve.stability.min_run_s``."""
        return ".".join((self.spec.name, *self.path))

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    @property
    def flag(self) -> str:
        return flag_of(self.field)

    @property
    def param(self) -> str:
        return "__".join(("cfg", self.spec.name, *self.path))

    @property
    def has_flag(self) -> bool:
        if self.spec.flags is not None:
            return self.dotted in self.spec.flags
        return not self.field.metadata.get("experimental")

    @property
    def choices(self) -> tuple[str, ...] | None:
        return choices_of(self.field, self.annotation)

    @property
    def help(self) -> str:
        return str(self.field.metadata["help"])

    @property
    def shown_as(self) -> str:
        """How a user sets it on this command: its argument, its flag, or ``--set KEY``."""
        if self.field.metadata.get("argument"):
            return self.field.metadata.get("metavar") or self.field.name.upper()
        return self.flag if self.has_flag else f"--set {self.key}"


def _default_of(field: dataclasses.Field, base: Any) -> Any:
    if base is not None:
        return getattr(base, field.name)
    if field.default is not _MISSING:
        return field.default
    if field.default_factory is not _MISSING:
        return _new(field)
    return _MISSING


def _new(field: dataclasses.Field) -> Any:
    """The default value of a nested-config field."""
    factory: Any = field.default_factory
    return factory()


def entries(spec: ConfigSpec) -> list[Entry]:
    """Every option field of ``spec``'s config, nested configs included, in declaration order."""
    base = spec.base() if spec.base is not None else None
    return _walk(spec, spec.cls, base, ())


def _walk(spec: ConfigSpec, cls: type, base: Any, prefix: tuple[str, ...]) -> list[Entry]:
    hints = get_type_hints(cls)
    out: list[Entry] = []
    for field in dataclasses.fields(cls):
        if is_nested(field):
            child = getattr(base, field.name) if base is not None else _new(field)
            out += _walk(spec, type(child), child, (*prefix, field.name))
        elif is_option(field):
            out.append(Entry(spec, (*prefix, field.name), field, hints[field.name], _default_of(field, base)))
    return out


def _cli_type(entry: Entry) -> Any:
    """The annotation the command line converts the option's value to."""
    inner, optional = _optional_of(entry.annotation)
    if get_origin(inner) is Literal:
        inner = str
    if get_origin(inner) in (list, Sequence) or (get_origin(inner) is tuple and get_args(inner)[-1] is Ellipsis):
        inner = list[str]  # repeatable
    elif get_origin(inner) is tuple and all(a in (str, int, float, Path) for a in get_args(inner)):
        pass  # an option of several values (--emit slurm DIR)
    elif _parsed(entry):
        return str  # a value with its own parser (BeliefSpec.parse): the text, parsed in _collect
    elif inner not in (bool, int, float, str, Path, list[str]):
        raise TypeError(f"{entry.key}: no command-line form for {entry.annotation!r}")
    if _none_or_number(entry):
        return Optional[str]  # noqa: UP045  (a number, or "none": parsed by parse_setting in _collect)
    return Optional[inner] if optional or entry.default is None else inner  # noqa: UP045  (cli_kit reads it)


def _parsed(entry: Entry) -> bool:
    """A field of a type that parses its own text (a classmethod ``parse``), such as ``--belief``'s."""
    return callable(getattr(_optional_of(entry.annotation)[0], "parse", None))


def _none_or_number(entry: Entry) -> bool:
    """A number whose default is set but that may be None too (``--max-slowdown none``): the flag takes text."""
    inner, optional = _optional_of(entry.annotation)
    return optional and inner in (int, float) and entry.default is not None and entry.default is not _MISSING


def _parameter(entry: Entry) -> inspect.Parameter:
    kind = _cli_type(entry)
    inner, _ = _optional_of(kind)
    flag = entry.flag
    decls = [f"{flag}/--no-{flag[2:]}"] if inner is bool and entry.default is not False else [flag]
    if entry.field.metadata.get("short"):
        decls.append(entry.field.metadata["short"])
    choices = entry.choices
    default = ... if entry.default is _MISSING else entry.default
    if _parsed(entry) and default is not ...:
        default = str(default)
    if isinstance(default, tuple):
        default = list(default)
    if entry.field.metadata.get("argument"):
        argument = cli_kit.Argument(default, metavar=entry.field.metadata.get("metavar"), help=entry.help,
                                  show_default=entry.field.metadata.get("show_default", True))
        return inspect.Parameter(entry.param, inspect.Parameter.KEYWORD_ONLY, default=argument, annotation=kind)
    option = cli_kit.Option(default, *decls, help=entry.help, show_default=entry.field.metadata.get("show_default", True),
                          metavar=entry.field.metadata.get("metavar") or ("|".join(choices) if choices else None),
                          panel=entry.spec.panel)
    return inspect.Parameter(entry.param, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)


def input_option(name: str, default: Any = None, *, show_default: str | bool = True) -> Any:
    """A hand-written option that is :class:`common.options.Inputs`' ``name`` (``--cluster``, ``--profiles``,
    ``--colocation``, ``--out``, ``--json``): its one flag and help, with this command's default (``...``:
    required)."""
    field = shared_field(name)
    decls = [flag_of(field), *([field.metadata["short"]] if field.metadata.get("short") else [])]
    return cli_kit.Option(default, *decls, help=field.metadata["help"], show_default=show_default)


def _settings(specs: Sequence[ConfigSpec], texts: Sequence[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` texts → {key: value}; a key given twice is refused (no silent winner)."""
    known = {e.key: e for spec in specs for e in entries(spec)}
    out: dict[str, Any] = {}
    for text in texts:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or key not in known:
            valid = ", ".join(sorted(known)) or "none (this command has no settings)"
            problem = f"{text!r} is not KEY=VALUE" if not sep else f"unknown setting {key!r}"
            raise InputError(problem, field="--set", valid=f"KEY=VALUE with KEY one of {valid} (see --help-experimental)")
        if key in out:
            raise InputError(f"{key} given twice", field="--set", valid="each setting once")
        out[key] = parse_setting(known[key], value)
    return out


def _check_choices(entry: Entry, value: Any, how: str) -> None:
    choices = entry.choices
    if choices is not None and value is not None and str(value) not in choices:
        raise InputError(f"{value!r}", field=how, valid=", ".join(choices))


def _check_finite(entry: Entry, value: Any, how: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{value!r}", field=how, valid="a finite number")


def _build(spec: ConfigSpec, values: dict[tuple[str, ...], Any], base: Any = _MISSING,
           how: dict[tuple[str, ...], str] | None = None) -> Any:
    """The config of ``spec`` with ``values`` (by field path) over ``base`` (default: the spec's); its checks name
    the flag (``how`` the user gave the value: a flag, ``--set``, a file)."""
    by_name = {e.path: e for e in entries(spec)}

    def make(cls: type, base: Any, prefix: tuple[str, ...]) -> Any:
        kwargs: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            path = (*prefix, field.name)
            if is_nested(field):
                child = getattr(base, field.name) if base is not None else _new(field)
                kwargs[field.name] = make(type(child), child, path)
            elif path in values:
                kwargs[field.name] = values[path]
        try:
            return dataclasses.replace(base, **kwargs) if base is not None else cls(**kwargs)
        except InputError as err:
            entry = by_name.get((*prefix, err.field or ""))
            if entry is None:
                raise
            shown = (how or {}).get(entry.path, entry.shown_as)
            raise InputError(err.detail, source=err.source, field=shown, valid=err.valid) from None

    if base is _MISSING:
        base = spec.base() if spec.base is not None else None
    return make(spec.cls, base, ())


def _for_run(spec: ConfigSpec, values: dict[tuple[str, ...], Any], built: Any, others: dict[str, Any],
             how: dict[tuple[str, ...], str]) -> Any:
    """The config of ``spec`` over this run's defaults (:attr:`ConfigSpec.defaults`): one, one per key, or None;
    a value the user set (``how``: where) for a field that does not apply is refused."""
    if spec.defaults is None:
        return built
    run = spec.defaults(built, others)
    unused = ("",) if run.value is None or run.value == {} else run.unused
    by_path = {e.path: e for e in entries(spec)}
    for path in values:
        dotted = ".".join(path)
        if any(dotted == u or dotted.startswith(u + ".") or u == "" for u in unused):
            raise InputError(f"{how[path]} with {run.why}", field=by_path[path].shown_as, valid=run.valid)
    bases = list(run.value.values()) if isinstance(run.value, dict) else [run.value]
    for path, value in values.items():
        dotted = ".".join(path)
        if dotted in run.pinned and any(_at(base, path) != value for base in bases):
            what, valid = run.pinned[dotted]
            shown = str(value).lower() if isinstance(value, bool) else value
            raise InputError(f"{spec.name}.{dotted}={shown} with a policy that decides {what} itself",
                             field=how[path], valid=valid)
    if run.value is None:
        return None
    if isinstance(run.value, dict):
        return {key: _build(spec, values, base, how) for key, base in run.value.items()}
    return _build(spec, values, run.value, how)


def _at(config: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        config = getattr(config, name)
    return config


def _explicit(ctx: Any, name: str) -> bool:
    """Whether the option of parameter ``name`` was given on the command line (not left at its default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def _given(ctx: Any, entry: Entry, kwargs: dict[str, Any], settings: dict[str, Any],
           filed: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every way the user set ``entry`` on this command line: (how, value) for its flag and ``--set``;
    else the value of ``--set @FILE`` (``filed``), if it has one."""
    found: list[tuple[str, Any]] = []
    if entry.has_flag:
        value = kwargs.pop(entry.param)
        if _explicit(ctx, entry.param):
            found.append((entry.flag, value))
    if entry.key in settings:
        found.append((f"--set {entry.key}", settings[entry.key]))
    if not found and entry.key in filed:
        value, path = filed[entry.key]
        found.append((f"{entry.key} of --set @{path}", value))
    return found


def _collect(ctx: Any, spec: ConfigSpec, kwargs: dict[str, Any], settings: dict[str, Any],
             filed: dict[str, Any]) -> Any:
    """The config of ``spec`` from the command line (and ``--set @FILE``) over this run's defaults."""
    values: dict[tuple[str, ...], Any] = {}
    how: dict[tuple[str, ...], str] = {}
    for entry in entries(spec):
        found = _given(ctx, entry, kwargs, settings, filed)
        if len(found) > 1:
            raise InputError(f"both {found[0][0]} and {found[1][0]} given", field=entry.shown_as,
                             valid="one of them")
        if not found:
            continue
        value = found[0][1]
        if isinstance(value, list) and get_origin(_optional_of(entry.annotation)[0]) is tuple:
            value = tuple(value)
        if isinstance(value, str) and _parsed(entry):
            try:
                value = parse_setting(entry, value)
            except InputError as err:
                raise InputError(err.detail, field=found[0][0], valid=err.valid) from None
        if isinstance(value, str) and _none_or_number(entry):
            try:
                value = parse_setting(entry, value)
            except InputError as err:
                raise InputError(err.detail, field=found[0][0], valid=f"{err.valid} or none") from None
        _check_choices(entry, value, found[0][0])
        _check_finite(entry, value, found[0][0])
        values[entry.path], how[entry.path] = value, found[0][0]
    return _for_run(spec, values, _build(spec, values, how=how), kwargs, how)


def printed_config(specs: Sequence[ConfigSpec], configs: dict[str, Any]) -> dict[str, Any]:
    """A run's settings as one JSON value (:mod:`colocate.config_file`): what ``--set @FILE`` loads again."""
    from colocate.config_file import config_json

    return config_json({s.name: (entries(s), configs.get(s.name)) for s in specs})


def _print_experimental(specs: Sequence[ConfigSpec]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Settings without a flag: --set KEY=VALUE", title_justify="left")
    for column in ("KEY", "default", "what it does"):
        table.add_column(column, overflow="fold")
    for spec in specs:
        for entry in entries(spec):
            if entry.has_flag:
                continue
            choices = f" ({', '.join(entry.choices)})" if entry.choices else ""
            table.add_row(entry.key, escape(repr(entry.default)), escape(entry.help + choices))
    Console().print(table)


def config_command(*specs: ConfigSpec) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command function whose keyword parameters named after ``specs`` receive the built configs:
    their fields' options, ``--set`` and ``--help-experimental`` are added to its signature. ``--set @FILE``
    loads a run's printed config (:mod:`colocate.config_file`): its values stand for the settings not given
    otherwise on the command line."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        names = {s.name for s in specs}
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(func).parameters.values() if p.name not in names]
        generated: list[inspect.Parameter] = []
        unflagged = False
        for spec in specs:
            for entry in entries(spec):
                if entry.has_flag:
                    generated.append(_parameter(entry))
                unflagged = unflagged or not entry.has_flag

        def show_experimental(value: bool) -> None:
            if value:
                _print_experimental(specs)
                raise cli_kit.Exit()

        settable = [
            inspect.Parameter(_SET, inspect.Parameter.KEYWORD_ONLY, annotation=list[str], default=cli_kit.Option(
                [], "--set", metavar="KEY=VALUE", show_default=False,
                help="Set any setting, those without a flag included (repeatable; --help-experimental lists them); "
                     "@FILE: every setting of a run's printed config (its --json output).")),
            inspect.Parameter(_HELP_EXPERIMENTAL, inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                              default=cli_kit.Option(False, "--help-experimental", is_eager=True,
                                                   callback=show_experimental,
                                                   help="List the settings without a flag (ablations, solver "
                                                        "internals) and exit.")),
        ]
        # a command whose every setting has its flag needs neither
        extra = [inspect.Parameter(_CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=cli_kit.Context),
                 *(settable if unflagged else [])]

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            ctx = kwargs.pop(_CONTEXT)
            texts = kwargs.pop(_SET, None) or []
            settings = _settings(specs, [t for t in texts if not t.startswith("@")])
            kwargs.pop(_HELP_EXPERIMENTAL, None)
            filed: dict[str, Any] = {}
            for text in (t for t in texts if t.startswith("@")):  # a later file's value wins
                from colocate.config_file import read_config

                read = read_config(Path(text[1:]), {e.key: e for spec in specs for e in entries(spec)})
                filed.update({key: (value, text[1:]) for key, value in read.items()})
            for spec in specs:
                kwargs[spec.name] = _collect(ctx, spec, kwargs, settings, filed)
            return func(**kwargs)

        wrapper.__signature__ = inspect.Signature(own + generated + extra)  # type: ignore[attr-defined]
        wrapper.config_specs = specs  # type: ignore[attr-defined]  # the consistency test reads them
        return wrapper

    return decorate
