"""The dependency arrows of ARCHITECTURE.md hold: rooms in layers, no import cycles, one input-error type.

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``) and are checked with import-linter, the
same check ``lint-imports`` runs in CI. A second test builds a tiny tree that breaks an arrow, so a
contract that no longer catches anything fails here too.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOMS = ("common", "models", "profiler", "scheduler", "colocate")


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter on the ``pyproject.toml`` in ``cwd`` with ``cwd`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_repository_keeps_its_import_contracts() -> None:
    pytest.importorskip("importlinter", reason="import-linter comes with the dev extra: pip install -e '.[dev]'")
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


def test_contracts_catch_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    pytest.importorskip("importlinter", reason="import-linter comes with the dev extra: pip install -e '.[dev]'")
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    packages = {a for c in config["contracts"] for a in c.get("ancestors", [])} | set(ROOMS)
    for package in sorted(packages):  # the same sub-packages, empty, so the contracts resolve
        (tmp_path / package.replace(".", "/")).mkdir(parents=True, exist_ok=True)
        (tmp_path / package.replace(".", "/") / "__init__.py").write_text("")
    (tmp_path / "colocate" / "cli.py").write_text("import scheduler.jobs\n")
    (tmp_path / "scheduler" / "jobs.py").write_text("from colocate import cli\n")  # the arrow upwards
    (tmp_path / "scheduler" / "a.py").write_text("import scheduler.b\n")
    (tmp_path / "scheduler" / "b.py").write_text("def f():\n    import scheduler.a\n")  # a lazy cycle counts
    section = (REPO / "pyproject.toml").read_text().split("[tool.importlinter]", 1)[1]
    (tmp_path / "pyproject.toml").write_text("[tool.importlinter]" + section)
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "0 kept, 2 broken" in done.stdout, done.stdout
    assert "scheduler.jobs -> colocate.cli" in done.stdout


def _project_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names & set(ROOMS)


def test_one_input_error_type_in_a_module_that_imports_nothing_of_the_project() -> None:
    assert _project_imports(REPO / "common" / "errors.py") == set()
    defined = [p for room in ROOMS for p in (REPO / room).rglob("*.py") if "class InputError" in p.read_text()]
    assert defined == [REPO / "common" / "errors.py"]


def test_the_bottom_layer_imports_no_other_room() -> None:
    """``common`` is below everything: none of its modules imports models, profiler, scheduler or colocate."""
    for path in (REPO / "common").glob("*.py"):
        assert _project_imports(path) <= {"common"}, path



def test_decision_checks_raise_a_named_exception_that_survives_python_O(tmp_path: Path) -> None:
    """check_decision must not rely on ``assert`` statements, which ``python -O`` removes."""
    script = textwrap.dedent("""
        from scheduler.model.cluster import Cluster, GpuType
        from scheduler.model.jobs import Job
        from scheduler.model.policy import Allocation, InvalidDecision, RoundDecision, SolverInfo, check_decision
        cluster = Cluster({"h100": GpuType("h100", nodes=1, gpus_per_node=1, memory_gb=80.0)})
        jobs = [Job("a", "cifar10"), Job("b", "cifar10")]
        two = (Allocation("a", "h100", 1, 64), Allocation("b", "h100", 1, 64))
        try:
            check_decision(RoundDecision(two, (), 0.0, SolverInfo("t", "ok", 0.0, 0.0)), jobs, cluster)
        except InvalidDecision as err:
            print("raised:", err)
    """)
    done = subprocess.run([sys.executable, "-O", "-c", script], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "raised: h100: 2 GPUs used > capacity 1" in done.stdout


def _main_guard_not_last(path: Path) -> bool:
    """Whether ``path`` has an ``if __name__ == "__main__":`` block with module statements after it: run as
    ``python -m``, the code after the block does not exist yet when the block runs (a supervisor once died with a
    NameError this way, on a path only a job that ignores SIGTERM reaches)."""
    body = ast.parse(path.read_text()).body
    for i, node in enumerate(body):
        test = node.test if isinstance(node, ast.If) else None
        if (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
                and i != len(body) - 1):
            return True
    return False


def test_a_modules_main_block_is_its_last_statement(tmp_path: Path) -> None:
    late = [str(p.relative_to(REPO)) for room in ROOMS for p in (REPO / room).rglob("*.py") if _main_guard_not_last(p)]
    assert late == [], f"code after `if __name__ == '__main__':` (move the block to the end): {late}"
    bad = tmp_path / "bad.py"
    bad.write_text('def a():\n    b()\n\n\nif __name__ == "__main__":\n    a()\n\n\ndef b():\n    pass\n')
    assert _main_guard_not_last(bad)  # the check sees the mistake it is for
