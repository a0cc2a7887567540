"""Values of settings: ``--set`` text parsed to a field's type (:func:`parse_setting`), and a run's settings as one
JSON value: printed with the run (``simulate --json``: its ``config``), loaded again with ``--set @FILE``
(:func:`colocate.cli_config.config_command`).

The value is ``{namespace: {field: value, nested: {...}}}``, one namespace per config of the command (``run``,
``sim``, ``ilp``; a config that does not apply to the run is ``null``), every option field written out, so the
file reproduces the run even where a default changes later. Options given on the command line win over the
file's values.
"""

from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from common.errors import InputError

Entry = Any  # colocate.cli_config.Entry (that module imports this one)
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _optional_of(annotation: Any) -> tuple[Any, bool]:
    """(inner type, whether None is allowed) of ``X | None``."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)", re.IGNORECASE)


def parse_setting(entry: Entry, text: str) -> Any:
    """``--set`` text → a value of the field's type (the config checks its range)."""
    inner, optional = _optional_of(entry.annotation)
    word = text.strip()
    if optional and word.lower() in ("none", "null"):
        return None
    if get_origin(inner) is Literal or inner is str:
        return word
    if callable(getattr(inner, "parse", None)):  # a value with its own parser (BeliefSpec)
        try:
            return inner.parse(word)
        except InputError as err:
            raise InputError(err.detail, field=f"--set {entry.key}", valid=err.valid) from None
    if inner is bool:
        if word.lower() in _TRUE + _FALSE:
            return word.lower() in _TRUE
        raise InputError(f"{text!r} is not a boolean", field=f"--set {entry.key}", valid="true or false")
    if inner in (int, float):
        try:
            # ASCII only: Python's int()/float() also read '1_0' and other scripts' digits ('١٢'), which a
            # config file or another tool would not
            if not (_INTEGER if inner is int else _DECIMAL).fullmatch(word):
                raise ValueError(word)
            value = int(word) if inner is int else float(word)
        except ValueError:
            raise InputError(f"{text!r} is not a number", field=f"--set {entry.key}",
                             valid=("an integer" if inner is int else "a number")) from None
        return value
    if inner is Path:
        return Path(word)
    raise InputError(f"{entry.key} cannot be set from the command line", field="--set")




def config_json(sections: Mapping[str, tuple[Sequence[Entry], Any]]) -> dict[str, Any]:
    """The settings of a run: {namespace: (its field entries, its config or None)} → every option field of each
    config, JSON-ready (:func:`colocate.cli_config.printed_config` builds the argument)."""
    out: dict[str, Any] = {}
    for namespace, (fields, config) in sections.items():
        if config is None:
            out[namespace] = None
            continue
        section: dict[str, Any] = {}
        for entry in fields:
            value: Any = config
            for name in entry.path:
                value = getattr(value, name)
            node = section
            for name in entry.path[:-1]:
                node = node.setdefault(name, {})
            node[entry.path[-1]] = _plain(value)
        out[namespace] = section
    return out


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return str(value)  # a Path, a parsed value (its text is what parses back to it)


def read_config(path: Path, known: Mapping[str, Entry]) -> dict[str, Any]:
    """``--set @FILE`` → {``--set`` key: value}: the file's config (a ``--json`` output's ``config``, or the
    config itself); an unknown key or a value of the wrong type is an :class:`InputError` naming the file and key."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise InputError(f"cannot read it ({type(err).__name__})", source=str(path), field="--set @FILE",
                         valid="a JSON file: a run's --json output or its config") from None
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        data = data["config"]
    if not isinstance(data, dict):
        raise InputError("not a JSON object", source=str(path), field="--set @FILE",
                         valid="a JSON object {namespace: {field: value}}")
    flat: dict[str, Any] = {}
    _flatten(data, (), flat, path)
    out: dict[str, Any] = {}
    for key, value in flat.items():
        entry = known.get(key)
        if entry is None:
            raise InputError(f"unknown setting {key!r}", source=str(path), field=key,
                             valid="one of " + ", ".join(sorted(known)))
        out[key] = _typed(entry, value, path)
    return out


def _flatten(node: dict[str, Any], prefix: tuple[str, ...], out: dict[str, Any], path: Path) -> None:
    for name, value in node.items():
        key = (*prefix, str(name))
        if isinstance(value, dict):
            _flatten(value, key, out, path)
        elif value is None and not prefix:
            continue  # a config that did not apply to that run
        else:
            out[".".join(key)] = value


def _typed(entry: Entry, value: Any, path: Path) -> Any:
    """A JSON value as the field's type: the same parse as ``--set`` for text, numbers and booleans kept exact."""
    inner, optional = _optional_of(entry.annotation)
    if value is None:
        if optional:
            return None
    elif isinstance(value, bool):
        if inner is bool:
            return value
    elif isinstance(value, (int, float)):
        if inner is float and math.isfinite(value):
            return float(value)
        if inner is int and isinstance(value, int):
            return value
    elif isinstance(value, str):
        if inner not in (bool, int, float):
            try:
                return parse_setting(entry, value)
            except InputError as err:
                raise InputError(err.detail, source=str(path), field=entry.key, valid=err.valid) from None
    elif isinstance(value, list) and typing.get_origin(inner) is tuple:
        return tuple(value)
    raise InputError(f"{json.dumps(value)[:60]} is not a value of {entry.key}", source=str(path), field=entry.key,
                     valid=_kind(inner, optional))


def _kind(inner: Any, optional: bool) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", Path: "a path"}
    return names.get(inner, "a string") + (" or null" if optional else "")


__all__ = ["config_json", "read_config"]
