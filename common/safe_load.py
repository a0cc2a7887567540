"""Reading user files safely: UTF-8 text (BOM allowed), YAML and JSON with limits.

Every reader of a user file goes through here, so that all of them refuse the same hostile or broken
inputs with a one-line :class:`~common.errors.InputError` naming the file:

* text that is not UTF-8 (a UTF-8 byte-order mark is accepted and dropped), or larger than
  :data:`MAX_TEXT_BYTES`;
* YAML or JSON nested deeper than :data:`MAX_DEPTH` (no ``RecursionError``);
* duplicate keys in a mapping (the last one would silently win);
* YAML aliases beyond :data:`MAX_ALIASES`, or whose expansion adds more than :data:`MAX_ALIAS_EXPANSION`
  values (an "alias bomb": a few lines that expand to billions of values);
* JSON ``NaN`` / ``Infinity`` (not JSON; Python's reader accepts them by default).

YAML numbers with an exponent (``1e6``, ``1.5e3``) are numbers, as in YAML 1.2 (PyYAML follows YAML 1.1,
where an exponent needs a dot and a sign, and these are strings); YAML 1.1's base-60 numbers (``1:30`` = 90)
are text, and a leading zero is decimal (``0100`` = 100, not YAML 1.1's octal 64; octal is ``0o100``), as in
YAML 1.2.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from common.errors import InputError

MAX_TEXT_BYTES = 256 * 1024 * 1024  # traces run to tens of MB; a config of 256 MB is a mistake
MAX_DEPTH = 64
MAX_ALIASES = 100
MAX_ALIAS_EXPANSION = 10_000  # values that aliases may add when expanded
# digits of one integer: every range the project checks ends far below 10^30, so a longer number is refused as it
# is read (Python refuses to convert one of more than 4,300 digits, and a float cannot hold one beyond 10^308)
MAX_INT_DIGITS = 100
# 1e6, 1.5e3, -2E-3, .5e1: YAML 1.2 floats with an exponent that YAML 1.1 (sign required, a dot) reads as strings
# integers YAML 1.2 reads and YAML 1.1 does not: zero-padded decimals with an 8 or 9 (``08``), and ``0o`` octal
_INT_1_2 = re.compile(r"^(?:[-+]?0[0-9_]+|0o[0-7]+)$")
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$")


def read_text(path: str | Path, *, field: str | None = None, what: str = "file") -> str:
    """The file's text, decoded as UTF-8 (a leading BOM dropped)."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_TEXT_BYTES:
            raise InputError(f"{what} is larger than {MAX_TEXT_BYTES // 2**20} MiB", source=p, field=field,
                             valid="a smaller file")
        data = p.read_bytes()
    except IsADirectoryError:
        raise InputError(f"{what} is a directory", source=p, field=field, valid="a file path") from None
    except OSError as err:
        raise InputError(f"cannot read the {what} ({err.strerror or err})", source=p, field=field,
                         valid="a readable file") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})", source=p,
                         field=field, valid="a UTF-8 text file") from None


@lru_cache(maxsize=1)
def _limited_loader() -> type:
    """The loader class, built on first use: readers of JSON only (``colocate jobs``) never import yaml."""
    import yaml

    class _LimitedLoader(yaml.SafeLoader):
        """SafeLoader that counts aliases and nesting while composing and refuses duplicate keys."""

        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._aliases = 0
            self._depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self._aliases += 1
                if self._aliases > MAX_ALIASES:
                    raise _Refused(f"more than {MAX_ALIASES} YAML aliases (*name)", self.peek_event().start_mark)
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH:
                    raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def get_single_node(self) -> Any:
            node = super().get_single_node()
            if node is not None and self._aliases and _expanded_size(node) > MAX_ALIAS_EXPANSION + _unique_size(node):
                raise _Refused(f"aliases expand to more than {MAX_ALIAS_EXPANSION} values", node.start_mark)
            return node

        def construct_yaml_int(self, node: Any) -> int:
            # YAML 1.1 reads `steps: 0100` as 64 (octal): a zero-padded count must not silently shrink
            text = str(self.construct_scalar(node))
            digits = text.replace("_", "").lstrip("+-")
            base = {"0o": 8, "0x": 16, "0b": 2}.get(digits[:2], 10)
            digits = digits[2:] if base != 10 else digits
            if len(digits) > MAX_INT_DIGITS:
                raise _Refused(f"an integer of {len(digits)} digits (at most {MAX_INT_DIGITS})", node.start_mark)
            try:
                value = int(digits, base)
            except ValueError:  # `!!int "12abc"`, `0x_`: a tag or a prefix without a number behind it
                raise _Refused(f"{text[:40]!r} is not an integer", node.start_mark) from None
            return -value if text.startswith("-") else value

        def construct_yaml_float(self, node: Any) -> float:
            text = str(self.construct_scalar(node))
            try:
                return float(super().construct_yaml_float(node))
            except (ValueError, TypeError):  # `!!float "abc"`
                raise _Refused(f"{text[:40]!r} is not a number", node.start_mark) from None

        def construct_yaml_bool(self, node: Any) -> bool:
            text = str(self.construct_scalar(node))
            if text.lower() not in self.bool_values:  # `!!bool "maybe"`: PyYAML would raise a KeyError
                raise _Refused(f"{text[:40]!r} is not true or false", node.start_mark)
            return bool(self.bool_values[text.lower()])

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":  # '<<' merges may be overridden
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        duplicate = key in seen
                        seen.add(key)
                    except TypeError:  # unhashable key: the base class reports it
                        continue
                    if duplicate:
                        raise _Refused(f"duplicate key {str(key)[:60]!r}", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    # YAML 1.2 floats: PyYAML resolves YAML 1.1, where `1e6` is a string, so `steps: 1e6` would be refused as
    # "not a number"; numbers with an exponent read as numbers here, as every YAML 1.2 reader reads them
    _LimitedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+.0123456789"))
    _LimitedLoader.add_constructor("tag:yaml.org,2002:int", _LimitedLoader.construct_yaml_int)
    _LimitedLoader.add_constructor("tag:yaml.org,2002:float", _LimitedLoader.construct_yaml_float)
    _LimitedLoader.add_constructor("tag:yaml.org,2002:bool", _LimitedLoader.construct_yaml_bool)
    _LimitedLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_1_2, list("-+0"))
    # YAML 1.1 reads `1:30` as 90 (base 60), YAML 1.2 as the text "1:30": a typo of a time or a ratio must not
    # become a silent number, so numbers here hold no ':' (a field that wants a number then refuses the text)
    for resolvers in _LimitedLoader.yaml_implicit_resolvers.values():
        resolvers[:] = [(tag, re.compile(r"^(?!.*:)" + regexp.pattern, regexp.flags)
                         if tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float") else regexp)
                        for tag, regexp in resolvers]
    return _LimitedLoader


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _unique_size(root: Any) -> int:
    seen, stack = {id(root)}, [root]
    while stack:
        for child in _children(stack.pop()):
            if id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    return len(seen)


def _expanded_size(root: Any) -> int:
    """Values the document holds once every alias is copied out (shared nodes counted each time)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        if done:
            sizes[id(node)] = min(1 + sum(sizes[id(c)] for c in _children(node)), 10 ** 12)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
    return sizes[id(root)]


class _Refused(Exception):
    def __init__(self, message: str, mark: Any) -> None:
        super().__init__(message)
        self.mark = mark


def parse_yaml(text: str, *, source: str | Path, field: str | None = None) -> Any:
    """Parse YAML text with the limits of the module docstring."""
    import yaml

    try:
        return yaml.load(text, Loader=_limited_loader())  # noqa: S506 - a SafeLoader subclass
    except _Refused as err:
        where = f" at line {err.mark.line + 1}" if err.mark is not None else ""
        raise InputError(f"refused{where}: {err}", source=source, field=field,
                         valid="plain YAML without duplicate keys or alias chains") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = str(getattr(err, "problem", None) or err).splitlines()[0][:120]
        raise InputError(f"not valid YAML{where}: {problem}", source=source, field=field,
                         valid="a YAML document") from None
    except RecursionError:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", source=source, field=field,
                         valid="a YAML document") from None


def load_yaml(path: str | Path, *, field: str | None = None, what: str = "YAML file") -> Any:
    """Read and parse a YAML file (UTF-8, limits of the module docstring)."""
    return parse_yaml(read_text(path, field=field, what=what), source=path, field=field)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"duplicate key {key[:60]!r}", None)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number", None)


def _bounded_int(text: str) -> int | float:
    """An integer of at most :data:`MAX_INT_DIGITS` digits; a longer one reads as ±inf, as a JSON number beyond a
    float (``1e400``) does: Python refuses to convert 4,300 digits, and every field's range check then refuses the
    value by its field's name (``field 'step': inf is not a finite number``)."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return -math.inf if text.startswith("-") else math.inf
    return int(text)


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def parse_json(text: str, *, source: str | Path, field: str | None = None, valid: str = "a JSON document") -> Any:
    """Parse JSON text: no duplicate keys, no NaN/Infinity, nesting at most :data:`MAX_DEPTH`."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant,
                          parse_int=_bounded_int)
    except _Refused as err:
        raise InputError(f"refused: {err}", source=source, field=field, valid=valid) from None
    except json.JSONDecodeError as err:
        raise InputError(f"not valid JSON at line {err.lineno}: {err.msg}", source=source, field=field,
                         valid=valid) from None
    except RecursionError:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", source=source, field=field, valid=valid) from None
    if _depth(data) > MAX_DEPTH:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", source=source, field=field, valid=valid)
    return data


def load_json(path: str | Path, *, field: str | None = None, what: str = "JSON file",
              valid: str = "a JSON document") -> Any:
    """Read and parse a JSON file (UTF-8, limits of the module docstring)."""
    return parse_json(read_text(path, field=field, what=what), source=path, field=field, valid=valid)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        try:
            return _finite(value.item())
        except (TypeError, ValueError):
            return value
    return value


def json_text(data: Any, **options: Any) -> str:
    """``json.dumps`` that writes real JSON: NaN and ±inf become ``null`` (Python would write ``NaN``)."""
    return json.dumps(_finite(data), allow_nan=False, **options)


def stored_json(text: str | None, kind: type[dict] | type[list]) -> Any:
    """A JSON value this program stored itself (a state database's meta entry): the value when it parses and is
    a ``kind``, else an empty ``kind`` — a missing, damaged or older entry reads as nothing, never an error."""
    if not text:
        return kind()
    try:
        data = json.loads(text)
    except ValueError:
        return kind()
    return data if isinstance(data, kind) else kind()

