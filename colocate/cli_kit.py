"""Commands as plain functions, built into Click commands through Click's public API.

A command is a function whose keyword parameters default to :func:`Option` or :func:`Argument`; its annotation
gives the value's type (``str``, ``int``, ``float``, ``Path``, ``bool`` for a flag, ``list[X]`` for a repeatable
option or a variadic argument, ``tuple[A, B]`` for an option of several values, ``X | None``) and a parameter
annotated :data:`Context` receives Click's context. :class:`App` is a ``click.Group`` whose ``command(name)``
builds such a function into a subcommand::

    @app.command("jobs")
    def jobs(state: Path = Option(..., "--state", help="State directory."),
             as_json: bool = Option(False, "--json", help="JSON.")) -> None: ...

Why Click and not Typer: Typer 0.29 converts every value through a pydantic ``TypeAdapter`` (≈ 0.12 s of CPU a
process to import) and offers no public way around it; light commands (``submit``, ``jobs``) must start in
under 0.25 s. Click converts a ``str``, an ``int`` or a path itself. See docs/development.md.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import click
from click.exceptions import Exit

from common.errors import InputError

Context = click.Context
echo = click.echo
__all__ = ["App", "Argument", "Context", "Exit", "Option", "echo"]

_PATH_KEYS = ("exists", "file_okay", "dir_okay", "writable", "readable", "resolve_path")


@dataclass
class _Declared:
    """An option or argument as a command function declares it (the default of its parameter)."""

    kind: str  # "option" or "argument"
    default: Any
    decls: tuple[str, ...]
    settings: dict[str, Any] = field(default_factory=dict)


def Option(default: Any = ..., *decls: str, **settings: Any) -> Any:  # noqa: N802  (reads as a declaration)
    """An option: ``default`` (``...``: required), its flags (none: ``--<name>``), and ``help``, ``metavar``,
    ``show_default`` (True, False or a text), ``hidden``, ``min``/``max``, path checks (``exists``, ``file_okay``,
    ``dir_okay``, ...), ``callback`` (called with the value), ``is_eager``, ``panel`` (the heading it
    is listed under in ``--help``)."""
    return _Declared("option", default, decls, settings)


def Argument(default: Any = ..., **settings: Any) -> Any:  # noqa: N802
    """A positional argument: ``default`` (``...``: required), ``metavar``, ``help`` and the path checks."""
    return _Declared("argument", default, (), settings)


def _unwrap_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _leaf_type(annotation: Any, settings: dict[str, Any]) -> Any:
    """The Click type of one value of ``annotation``."""
    low, high = settings.get("min"), settings.get("max")
    if annotation is int:
        return click.IntRange(low, high) if low is not None or high is not None else click.INT
    if annotation is float:
        return click.FloatRange(low, high) if low is not None or high is not None else click.FLOAT
    if annotation is Path:
        return click.Path(path_type=Path, **{k: settings[k] for k in _PATH_KEYS if k in settings})
    if annotation is str:
        return click.STRING
    raise TypeError(f"no command-line form for {annotation!r}")


@dataclass(frozen=True)
class _Shape:
    """How a parameter's annotation reads from the command line."""

    type: Any = None
    flag: bool = False
    many: bool = False  # repeatable option / variadic argument
    nargs: int = 1


def _shape(annotation: Any, settings: dict[str, Any]) -> _Shape:
    inner = _unwrap_optional(annotation)
    if inner is bool:
        return _Shape(flag=True)
    origin = get_origin(inner)
    if origin is list:
        return _Shape(type=_leaf_type(get_args(inner)[0], settings), many=True)
    if origin is tuple:
        leaves = get_args(inner)
        return _Shape(type=click.Tuple([_leaf_type(a, settings) for a in leaves]), nargs=len(leaves))
    return _Shape(type=_leaf_type(inner, settings))


class _Option(click.Option):
    """An option with the heading it is listed under in ``--help`` (``panel``; None: Options)."""

    def __init__(self, *args: Any, panel: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.panel = panel


class _Command(click.Command):
    """Lists its options under their headings: Options first, then each panel in order of appearance."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and isinstance(param, click.Option):
                sections.setdefault(getattr(param, "panel", None) or "Options", []).append(record)
        for title, rows in sections.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _value_callback(callback: Callable[[Any], Any] | None) -> Any:
    if callback is None:
        return None
    return lambda _ctx, _param, value: callback(value)


def _click_param(name: str, annotation: Any, declared: _Declared) -> click.Parameter:
    settings = declared.settings
    shape = _shape(annotation, settings)
    required = declared.default is ...
    default = None if required else declared.default
    if shape.many and default is None and not required:
        default = []
    # a required parameter gets no default at all: Click reads an explicit None as a value (never missing)
    given: dict[str, Any] = {} if required else {"default": default}
    if declared.kind == "argument":
        return click.Argument([name], type=shape.type, required=required, nargs=-1 if shape.many else shape.nargs,
                              metavar=settings.get("metavar"), help=settings.get("help"), **given)
    decls = list(declared.decls) or ["--" + name.replace("_", "-")]
    if shape.flag and not declared.decls and default is not False:
        decls = [f"{decls[0]}/--no-{decls[0][2:]}"]
    common: dict[str, Any] = dict(
        help=settings.get("help"), hidden=settings.get("hidden", False), metavar=settings.get("metavar"),
        show_default=settings.get("show_default", True), callback=_value_callback(settings.get("callback")),
        is_eager=settings.get("is_eager", False), expose_value=settings.get("expose_value", True),
        panel=settings.get("panel"))
    if shape.flag:
        return _Option([*decls, name], is_flag=True, required=required, **given, **common)
    return _Option([*decls, name], type=shape.type, required=required, multiple=shape.many,
                        nargs=shape.nargs, **given, **common)


def _names(field: str, param: click.Parameter) -> bool:
    """Whether the library's field name ``field`` is this parameter's (``cfg__serve__sharing`` is ``sharing``)."""
    return isinstance(param, click.Option) and bool(param.name) and str(param.name).split("__")[-1] == field


def _about(source: str | None, value: Any) -> bool:
    """Whether an error's ``source`` is the parameter's value, or a file inside it (a state directory's
    database): no source, or a source of some other file (a job file's ``cluster`` key), is not."""
    if source is None:
        return True
    if value is None or isinstance(value, (bool, list, tuple)):
        return False
    given, at = Path(str(value)).absolute(), Path(source).absolute()
    return at == given or given in at.parents


def flag_named(err: InputError, params: list[click.Parameter], values: dict[str, Any]) -> InputError:
    """The library names a field of its config (``state``, ``sharing``); the user typed a flag: the same error
    naming the command's flag for that field (``--state``), or ``err`` itself where no parameter is that field."""
    if type(err) is not InputError or not err.field or err.field.startswith("-"):
        return err
    for param in params:
        if _names(err.field, param) and _about(err.source, values.get(str(param.name))):
            return InputError(err.detail, source=err.source, field=param.opts[0], valid=err.valid)
    return err


def _annotations(func: Callable[..., Any]) -> dict[str, Any]:
    """Each parameter's annotation, as an object (a module with ``from __future__ import annotations`` holds
    them as text)."""
    signature = inspect.signature(func)
    try:
        hints = get_type_hints(inspect.unwrap(func))
    except (NameError, TypeError):  # pragma: no cover  (an annotation that names nothing importable)
        hints = {}
    return {name: (hints.get(name, p.annotation) if isinstance(p.annotation, str) else p.annotation)
            for name, p in signature.parameters.items()}


def build_command(func: Callable[..., Any], name: str | None = None, help: str | None = None,
                  **settings: Any) -> click.Command:
    """The Click command of a command function (see the module's docstring)."""
    annotations = _annotations(func)
    params: list[click.Parameter] = []
    context_name: str | None = None
    for pname, parameter in inspect.signature(func).parameters.items():
        if annotations[pname] is Context:
            context_name = pname
            continue
        declared = parameter.default
        if not isinstance(declared, _Declared):
            raise TypeError(f"{func.__name__}: parameter {pname} is neither an Option nor an Argument")
        params.append(_click_param(pname, annotations[pname], declared))

    many = [str(p.name) for p in params if getattr(p, "multiple", False) or p.nargs == -1]

    def invoke(**kwargs: Any) -> Any:
        for key in many:  # Click gives a tuple; the function's annotation says list
            if isinstance(kwargs.get(key), tuple):
                kwargs[key] = list(kwargs[key])
        if context_name is not None:
            kwargs[context_name] = click.get_current_context()
        try:
            return func(**kwargs)
        except InputError as err:
            named = flag_named(err, params, kwargs)
            if named is err:
                raise
            raise named from None

    text = help if help is not None else inspect.getdoc(func)
    return _Command(name or func.__name__.replace("_", "-"), callback=invoke, params=params, help=text,
                         **settings)


class App(click.Group):
    """A group of commands; :meth:`command` builds a command function into one (:func:`build_command`)."""

    def __init__(self, name: str | None = None, help: str | None = None, no_args_is_help: bool = True,
                 **settings: Any) -> None:
        super().__init__(name=name, help=help, no_args_is_help=no_args_is_help, **settings)

    def command(self, name: str | None = None, *, help: str | None = None,  # type: ignore[override]
                **settings: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Add the decorated function as the subcommand ``name``; the function is returned unchanged."""

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            self.add_command(build_command(func, name, help, **settings))
            return func

        return decorate

    def list_commands(self, ctx: click.Context) -> list[str]:
        """In the order they were added (the order of ``COMMAND_MODULES``), not sorted."""
        return list(self.commands)

    def options(self, func: Callable[..., Any]) -> None:
        """The group's own options (``colocate --version``): ``func``'s parameters, run before a subcommand."""
        built = build_command(func)
        self.params.extend(built.params)
        self.callback = built.callback
