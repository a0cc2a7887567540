"""Plain text and path parameters without pydantic: what keeps ``colocate submit`` and ``jobs`` fast.

Typer 0.29 converts every parameter's value through a pydantic ``TypeAdapter``; importing pydantic and
building the adapters costs ≈ 0.15 s of CPU per process, more than the rest of a ``submit``. For a ``str`` or
``Path`` parameter (or a list of either) that conversion cannot fail on a command-line string — pydantic's
``Path`` is ``Path(text)``, its ``str`` is the text — and a flag's value is a ``bool`` already, so
:func:`install` converts those values without pydantic, through Typer's own path checks (``exists``,
``file_okay``, ``resolve_path``, ...). Every other annotation, a custom ``parser``, any other value: Typer's
own conversion, unchanged.

The seam is Typer's conversion layer (``typer.core.build_runtime_param``, ``typer._coercion.RuntimeParam``),
found by what it offers rather than by a release number: a Typer with another shape is left alone (its own
conversion, slower but correct), and both CI lanes run a test that checks the two conversions agree on every
such parameter of every command.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin


def _plain_leaf(annotation: Any) -> bool:
    return annotation is str or annotation is Path


def plain(annotation: Any, parameter_info: Any) -> bool:
    """True for the annotations converted here: ``str``, ``Path``, ``list[str]``, ``list[Path]`` and ``bool``
    (a flag's value is a bool already; ``--help`` is one), with no custom parser."""
    if getattr(parameter_info, "parser", None) is not None:
        return False
    if get_origin(annotation) is list:
        args = get_args(annotation)
        return len(args) == 1 and _plain_leaf(args[0])
    return _plain_leaf(annotation) or annotation is bool


def install() -> None:
    """Route plain parameters around pydantic where Typer converts through it; otherwise change nothing."""
    try:
        from typer import _coercion, core
        from typer._param_types import coerce_cli_path
    except ImportError:  # pragma: no cover  (a Typer of another shape)
        return
    original = getattr(core, "build_runtime_param", None)
    if original is None or getattr(original, "plain_params", False) or not _has_layer(_coercion):
        return

    @dataclass(frozen=True)
    class PlainRuntimeParam(_coercion.RuntimeParam):
        """Converts command-line strings itself; anything else goes to Typer's conversion."""

        fallback: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            annotation = self.annotation
            if get_origin(annotation) is list:
                leaf = get_args(annotation)[0]
                if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
                    return [self._leaf(leaf, v, param, ctx) for v in value]
            elif annotation is bool:
                if isinstance(value, bool):
                    return value
            elif isinstance(value, str):
                return self._leaf(annotation, value, param, ctx)
            return self.fallback()._coerce_value(value, param=param, ctx=ctx)

        def _leaf(self, leaf: Any, text: str, param: Any, ctx: Any) -> Any:
            if leaf is str:
                return text
            return coerce_cli_path(Path(text), self.parameter_info, path_type=Path, param=param, ctx=ctx)

    def build_runtime_param(descriptor: Any) -> Any:
        if descriptor.file_annotation is None and plain(descriptor.annotation, descriptor.parameter_info):
            return PlainRuntimeParam(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation,
                                     fallback=lambda: original(descriptor))
        return original(descriptor)

    build_runtime_param.plain_params = True  # type: ignore[attr-defined]
    build_runtime_param.original = original  # type: ignore[attr-defined]  # the test compares both
    core.build_runtime_param = build_runtime_param


def _has_layer(coercion: Any) -> bool:
    """Whether Typer's conversion layer has the shape this bypass was written against: a frozen
    ``RuntimeParam`` dataclass of ``parameter_info`` and ``annotation`` whose subclasses implement
    ``_coerce_value(value, param, ctx)``."""
    import dataclasses
    import inspect

    base = getattr(coercion, "RuntimeParam", None)
    if base is None or not dataclasses.is_dataclass(base):
        return False
    names = {f.name for f in dataclasses.fields(base)}
    method = getattr(base, "_coerce_value", None)
    return {"parameter_info", "annotation"} <= names and method is not None and \
        list(inspect.signature(method).parameters) == ["self", "value", "param", "ctx"]
