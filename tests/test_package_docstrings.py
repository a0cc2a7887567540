"""Every module a docstring names with ``:mod:`` exists: package docstrings list their modules, and a module
that moves or goes must take its name out of them (as ``ARCHITECTURE.md``, tests/test_architecture_map.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "models", "profiler", "scheduler", "colocate")
MOD = re.compile(r":mod:`~?(\.*[A-Za-z_][A-Za-z0-9_.]*)`")


def _exists(dotted: str) -> bool:
    """A module or package of the project (another library's name is not checked)."""
    parts = dotted.split(".")
    if parts[0] not in PACKAGES:
        return True  # another library's module: not ours to check
    path = ROOT.joinpath(*parts)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def named_modules(doc: str, package: str) -> list[str]:
    """The modules ``doc`` names, relative names resolved against ``package``."""
    out = []
    for name in MOD.findall(doc):
        if name.startswith("."):
            name = package + name
        out.append(name)
    return out


def test_package_docstrings_name_only_modules_that_exist() -> None:
    inits = [p for top in PACKAGES for p in sorted((ROOT / top).rglob("__init__.py"))]
    assert len(inits) > 20
    missing = []
    for init in inits:
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        package = ".".join(init.parent.relative_to(ROOT).parts)
        missing += [f"{init.relative_to(ROOT)}: {name}" for name in named_modules(doc, package) if not _exists(name)]
    assert not missing, missing


def test_a_module_that_is_gone_is_found() -> None:
    """The check itself: a name the package lacks is caught, relative or absolute; other libraries are not ours."""
    doc = "* :mod:`.job_state` — kept; :mod:`.state` — gone; :mod:`scheduler.ilp.warm`; :mod:`~scheduler.nope`; :mod:`torch`"
    names = named_modules(doc, "scheduler.sim")
    assert names == ["scheduler.sim.job_state", "scheduler.sim.state", "scheduler.ilp.warm", "scheduler.nope", "torch"]
    assert [_exists(n) for n in names] == [True, False, True, False, True]
