"""ARCHITECTURE.md is the map of the code, and a map that cannot drift: every module is on it under its package,
every path it names exists, and no package keeps more than twelve modules side by side.

The rooms block (the first code block under "## The rooms") lists each package as ``name/`` at the start of a
line, nested by indentation, followed by its modules (``name.py``) on that line and the lines after it.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAP = REPO / "ARCHITECTURE.md"
ROOMS = ("common", "models", "profiler", "scheduler", "colocate")
# One module per command (accelerate's layout): the command list grows with the CLI, not with a package's ideas.
FLAT_BY_DESIGN = {"colocate/commands"}
MAX_FLAT = 12


def _rooms_block(text: str) -> str:
    section = text.split("## The rooms", 1)[1]
    return section.split("```", 2)[1]


def mapped_modules(block: str) -> set[str]:
    """``package/module.py`` for every module the rooms block lists under a package."""
    found: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        header = re.match(r"^( *)([a-z_]+)/(?=\s|$)", line)
        rest = line
        if header:
            indent = len(header.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, (stack[-1][1] if stack else "") + header.group(2) + "/"))
            rest = line[header.end():]
        if stack:
            found.update(stack[-1][1] + name for name in re.findall(r"(?<![\w/.-])([a-z_0-9]+\.py)\b", rest))
    return found


def code_modules() -> set[str]:
    return {str(p.relative_to(REPO)) for room in ROOMS for p in (REPO / room).rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def test_every_module_is_on_the_map_under_its_package_and_the_map_names_no_other() -> None:
    mapped, actual = mapped_modules(_rooms_block(MAP.read_text())), code_modules()
    assert not actual - mapped, f"modules missing from ARCHITECTURE.md: {sorted(actual - mapped)}"
    assert not mapped - actual, f"ARCHITECTURE.md lists modules that do not exist: {sorted(mapped - actual)}"


def test_every_path_the_map_names_exists() -> None:
    text = MAP.read_text()
    paths = set(re.findall(r"(?<![\w/.-])((?:common|models|profiler|scheduler|colocate|tests|scripts|docs|results|"
                           r"\.ci)/[\w./-]*[\w/])", text))
    missing = sorted(p for p in paths if "<" not in p and not (REPO / p).exists())
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_no_package_keeps_more_than_twelve_modules_side_by_side() -> None:
    crowded = {}
    for room in ROOMS:
        for package in [REPO / room, *(p for p in (REPO / room).rglob("*") if p.is_dir())]:
            name = str(package.relative_to(REPO))
            modules = [p for p in package.glob("*.py") if p.name != "__init__.py"]
            if "__pycache__" not in name and name not in FLAT_BY_DESIGN and len(modules) > MAX_FLAT:
                crowded[name] = len(modules)
    assert not crowded, f"packages with more than {MAX_FLAT} modules: {crowded}"


def test_the_map_reader_finds_nesting_modules_and_ignores_paths() -> None:
    block = "a/  x.py (see b/c.py)\n  b/  y.py\n      z.py\n  c/\nd/  w.py\n"
    assert mapped_modules(block) == {"a/x.py", "a/b/y.py", "a/b/z.py", "d/w.py"}
