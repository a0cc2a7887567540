"""Every shell example of README.md and docs/ runs on a clean copy of this checkout, or says why it cannot.

A ```` ```bash ```` block is runnable on the bundled data unless the line before it is a marker:

* ``<!-- example: slow -->`` — runnable, in the full suite only (minutes of CPU: a campaign, a simulation);
* ``<!-- needs: shared-data sia|gavel (...) -->`` — needs public data not shipped (docs/data.md says how to get
  it): skipped, with the reason, when that data is absent; when present, its data paths must exist;
* ``<!-- needs: gpu|ray|your-files ... (...) -->`` or ``<!-- example: skip (reason) -->`` — not run here.

Every block is checked by ``bash -n``; an unmarked block that names ``../shared/data`` fails the test.
Runnable blocks of one file run in order in one temporary copy of the checkout (tracked and untracked,
not ignored files), as a new user would run them from the repository root.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scheduler.formats.shared_data import shared_data_dir

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>example|needs):\s*(?P<what>[\w-]+)(?P<rest>.*?)-->\s*$")
SHELL = {"bash", "sh", "shell", "console"}
NOT_RUN = {"gpu", "ray", "your-files", "skip"}


@dataclass(frozen=True)
class Example:
    document: Path
    line: int
    code: str
    kind: str  # run | slow | needs | skip
    what: str  # for needs/skip: what (gpu, ray, shared-data, your-files, skip)
    detail: str

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"


def examples(document: Path) -> list[Example]:
    """The shell blocks of one Markdown file, with the marker on the line before each (if any)."""
    lines = document.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None or not fence.group("lang"):
            i += 1
            continue
        indent, lang, start = fence.group("indent"), fence.group("lang"), i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        if lang not in SHELL:
            continue
        previous = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.match(previous)
        if marker is None:
            kind, what, detail = "run", "", ""
        elif marker.group("kind") == "example":
            what, detail = marker.group("what"), marker.group("rest").strip()
            kind = {"slow": "slow", "skip": "skip"}.get(what, "bad-marker")
        else:
            kind, what, detail = "needs", marker.group("what"), marker.group("rest").strip()
        found.append(Example(document, start + 1, "\n".join(body) + "\n", kind, what, detail))
    return found


ALL = [e for d in DOCUMENTS for e in examples(d)]


def test_the_documents_have_runnable_examples() -> None:
    """The extraction finds the README tour (so a broken parser cannot pass every test by finding nothing)."""
    readme = [e for e in ALL if e.document.name == "README.md"]
    assert sum(e.kind in ("run", "slow") for e in readme) >= 5
    assert any(e.kind == "run" for e in readme), "the fast lane runs at least one README example"


@pytest.mark.parametrize("example", ALL, ids=lambda e: e.name)
def test_example_is_marked_and_valid_bash(example: Example) -> None:
    assert example.kind != "bad-marker", f"{example.name}: unknown marker 'example: {example.what}'"
    if example.kind == "needs":
        assert example.what in {"shared-data", "gpu", "ray", "your-files"}, f"{example.name}: needs {example.what}?"
        assert example.detail, f"{example.name}: a needs marker says what is needed and where to get it"
    if example.kind == "skip":
        assert example.detail.startswith("("), f"{example.name}: 'example: skip' gives its reason"
    if example.kind in ("run", "slow"):
        assert "../shared/data" not in example.code, (
            f"{example.name} reads ../shared/data: mark it <!-- needs: shared-data ... -->")
    done = subprocess.run(["bash", "-n"], input=example.code, capture_output=True, text=True)
    assert done.returncode == 0, f"{example.name}: {done.stderr}"


def test_gitignore_covers_what_the_readme_writes() -> None:
    """Every path the README's examples write (``--out``, ``--state``, ``--log-dir``, ``mkdir -p``, ``>``; after a
    ``cd``, relative to it) is ignored by git: a new user who ran the tour has no untracked results, and the copy
    ``clean_copy`` makes for the tests below never carries the tour's outputs (a state directory with its jobs)."""
    written: set[str] = set()
    for example in (e for e in ALL if e.document.name == "README.md"):  # run or not here: a user runs them
        cwd = Path(".")
        for command in re.split(r"&&|\n", example.code.replace("\\\n", " ")):
            words = command.split("#")[0].split()
            if words[:1] == ["cd"] and len(words) > 1:
                cwd = cwd / words[1]
            for i, word in enumerate(words[:-1]):
                target = words[i + 1]
                if word in ("--out", "-o", "--state", "--log-dir", ">") or (word == "-p" and words[0] == "mkdir"):
                    written.add(os.path.normpath(cwd / target))
    assert {"results/tour/pairs", "results/tour/serve/sched", "results/demo"} <= written, written
    def ignored(path: str) -> bool:  # as a file, or as a directory (a pattern `dir/` matches directories only)
        return any(subprocess.run(["git", "check-ignore", "-q", p], cwd=REPO).returncode == 0 for p in (path, path + "/"))

    kept = [p for p in sorted(written) if not ignored(p)]
    assert not kept, f"the README writes {kept}, which .gitignore does not cover"


def test_a_failing_block_leaves_nothing_running(tmp_path: Path) -> None:
    """A block that started a server in the background and then failed (as the tour's serve block did on a copy
    holding an earlier tour's state) ends with everything it started."""
    import random

    sleeper = f"sleep {random.randrange(100_000, 1_000_000)}"  # its own: no other run's sleeper matches
    example = Example(REPO / "README.md", 0, f"{sleeper} &\nfalse\nkill $!\n", "run", "", "")
    done = run_block(example, tmp_path)
    assert done.returncode == 1
    left = subprocess.run(["pgrep", "-f", sleeper], capture_output=True, text=True).stdout.split()
    assert not left, left


def clean_copy(destination: Path) -> Path:
    """The checkout as a clean clone would have it: the files git tracks or would track, nothing ignored."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Path]:
    """One clean copy per document, shared by its blocks (later blocks use what earlier ones wrote)."""
    return {}


def _copy_for(example: Example, checkouts: dict[Path, Path], factory: pytest.TempPathFactory) -> Path:
    if example.document not in checkouts:
        checkouts[example.document] = clean_copy(factory.mktemp(example.document.stem))
    return checkouts[example.document]


def run_block(example: Example, root: Path) -> subprocess.CompletedProcess[str]:
    """The block under ``bash -e`` from the copy's root, with its ``colocate`` importing the copy. The block runs in
    a process group of its own: whatever it started in the background (a ``colocate serve &``) is ended with it,
    and so are the job groups of every state directory it made, even when a line of it failed."""
    scripts = str(Path(sys.executable).parent)
    env = {**os.environ, "PYTHONPATH": str(root), "PATH": scripts + os.pathsep + os.environ.get("PATH", ""),
           "COLUMNS": "120", "COLOCATE_SHARED_DATA": os.environ.get("COLOCATE_SHARED_DATA", str(shared_data_dir()))}
    import tempfile

    # output to files, not pipes: a background process keeps a pipe open, and reading it to its end would wait
    # for that process rather than for the block
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", example.code], cwd=root, env=env,
                                   stdout=out, stderr=err, text=True, start_new_session=True)
        try:
            process.wait(timeout=1700)
        finally:
            _end_what_it_started(process, root)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(process.args, process.returncode, out.read(), err.read())


def _end_what_it_started(process: subprocess.Popen[Any], root: Path) -> None:
    """SIGTERM the block's process group (a server stops cleanly), then SIGKILL what is left, then the detached
    job groups of the state directories under ``root`` (they run in sessions of their own)."""
    import signal
    import time

    from tests.serve_helpers import kill_groups

    for signum, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_alive(process.pid):
            time.sleep(0.1)
    if process.poll() is None:
        process.kill()
    process.wait()
    for lock in root.rglob("server.lock"):
        kill_groups(lock.parent, wait_s=1.0)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _runnable(kind: str) -> list[Example]:
    return [e for e in ALL if e.kind == kind]


@pytest.mark.parametrize("example", _runnable("run"), ids=lambda e: e.name)
def test_fast_example_runs(example: Example, checkouts: dict[Path, Path],
                           tmp_path_factory: pytest.TempPathFactory) -> None:
    done = run_block(example, _copy_for(example, checkouts, tmp_path_factory))
    assert done.returncode == 0, f"{example.name} failed:\n{example.code}\n--- stderr ---\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a CPU campaign: about a minute on a quiet 2-core machine, much more on a busy one
@pytest.mark.parametrize("example", _runnable("slow"), ids=lambda e: e.name)
def test_slow_example_runs(example: Example, checkouts: dict[Path, Path],
                           tmp_path_factory: pytest.TempPathFactory) -> None:
    done = run_block(example, _copy_for(example, checkouts, tmp_path_factory))
    assert done.returncode == 0, f"{example.name} failed:\n{example.code}\n--- stderr ---\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("example", [e for e in ALL if e.kind == "needs" and e.what == "shared-data"],
                         ids=lambda e: e.name)
def test_shared_data_example_names_data_that_exists(example: Example) -> None:
    """Skipped (with the reason) without the public data; with it, every data path the block names exists.
    The blocks themselves are long reproductions (minutes to hours) and are not run here."""
    base = shared_data_dir()
    sets = example.detail.split("(")[0].split() or ["sia"]
    absent = [s for s in sets if not (base / s).is_dir()]
    if absent:
        pytest.skip(f"{example.name} needs {', '.join(absent)} under {base} (docs/data.md: how to get it)")
    for path in re.findall(r"\.\./shared/data/[^\s'\",)]+", example.code):
        resolved = str(base / path[len("../shared/data/"):])
        assert glob.glob(resolved), f"{example.name}: {path} not found under {base}"


def python_blocks(document: Path) -> list[tuple[str, str]]:
    """The ```` ```python ```` blocks of one Markdown file: (name, code)."""
    lines, found, i = document.read_text().splitlines(), [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None or fence.group("lang") != "python":
            i += 1
            continue
        start, body, i = i, [], i + 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        found.append((f"{document.relative_to(REPO)}:{start + 1}", "\n".join(body) + "\n"))
    return found


PYTHON_BLOCKS = [block for document in [*DOCUMENTS, REPO / "ARCHITECTURE.md"] for block in python_blocks(document)]


@pytest.mark.parametrize("name,code", PYTHON_BLOCKS, ids=[name for name, _ in PYTHON_BLOCKS])
def test_python_example_parses_and_its_imports_resolve(name: str, code: str) -> None:
    """Python examples are not run (they read results a user has), but each parses and imports what exists."""
    import ast

    tree = ast.parse(code, filename=name)
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            exec(compile(ast.Module(body=[node], type_ignores=[]), name, "exec"), {})


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_serve_tour_shows_its_job_running_and_cancels_it(tmp_path: Path) -> None:
    """The README's serve tour is not a race with its own job: `jobs` shows it running and `cancel` stops it
    (a job that ends before the tour looks at it shows nothing running, and `cancel` says "already completed")."""
    (tour,) = [e for e in ALL if e.document.name == "README.md" and "colocate serve " in e.code]
    done = run_block(tour, clean_copy(tmp_path / "copy"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "job-a: cancel requested" in done.stdout, done.stdout
    table = [line for line in done.stdout.splitlines() if line.startswith("│ job-a")]
    assert len(table) == 1 and "│ running " in table[0], done.stdout
