"""State directories that are not what they seem: ``serve`` on a dangling or looping symlink, on a garbage
``state.db``, on a directory it may not write (as an unprivileged user) or whose ``server.lock`` is not a file
answers one line and writes nothing — not even a line on stdout; a refused ``simulate`` leaves no ``--out``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.serve_helpers import write_cluster
from tests.test_fuzz_inputs import run_cli

EXAMPLES = Path(__file__).resolve().parents[1] / "scheduler" / "examples"


def _dangling(state: Path) -> None:
    state.symlink_to(state.parent / "nowhere")


def _loop(state: Path) -> None:
    state.symlink_to(state.name)


def _garbage_db(state: Path) -> None:
    state.mkdir()
    (state / "state.db").write_bytes(bytes(range(256)) * 8)


def _lock_a_directory(state: Path) -> None:
    (state / "server.lock").mkdir(parents=True)


STATES: dict[str, tuple[Callable[[Path], None], str]] = {
    "dangling-symlink": (_dangling, "symbolic link to nothing"),
    "symlink-loop": (_loop, "symbolic link to nothing"),
    "garbage-state-db": (_garbage_db, "not a state database"),
    "server-lock-a-directory": (_lock_a_directory, "cannot open server.lock"),
}


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` (links not followed) with its content or where it points."""
    out = {}
    for path in sorted(root.rglob("*")):
        out[str(path)] = (f"-> {os.readlink(path)}" if path.is_symlink() else "dir" if path.is_dir()
                          else path.read_bytes().hex())
    return out


def _serve(tmp_path: Path, state: Path) -> tuple[int, str, str]:
    return run_cli("serve", "--cluster", str(tmp_path / "cluster.yaml"), "--state", str(state), "--backend", "local", "--device", "cpu",
                   "--max-rounds", "1", "--round-s", "1")


@pytest.fixture
def request_cleanup() -> object:
    done: list[Callable[[], None]] = []
    yield done
    for step in done:
        step()


@pytest.mark.parametrize("case", sorted(STATES))
def test_serve_on_a_state_directory_that_is_not_what_it_seems_says_one_line_and_writes_nothing(
        tmp_path: Path, case: str) -> None:
    make, expected = STATES[case]
    state = tmp_path / "state"
    make(state)
    write_cluster(tmp_path / "cluster.yaml", {"t4": 1})
    before = snapshot(tmp_path)
    code, out, err = _serve(tmp_path, state)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:") and expected in lines[0], err
    assert out == ""  # nothing announced before the refusal
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to the user nobody: needs root")
@pytest.mark.parametrize("where", ["state", "state/sub"])
def test_serve_as_an_unprivileged_user_on_a_read_only_state_directory_says_one_line(
        request_cleanup: list[Callable[[], None]], where: str) -> None:
    """As ``nobody`` (a forked child drops root; the interpreter's own files stay loaded), a state directory it
    may not write is refused in one line, not a PermissionError traceback on ``server.lock``."""
    import shutil
    import tempfile

    import scheduler.service.serve  # noqa: F401 - loaded before the child drops root
    from scheduler.executor import local, registry  # noqa: F401
    from scheduler.model import cluster  # noqa: F401

    tmp_path = Path(tempfile.mkdtemp(prefix="colocate-ro-"))  # under /tmp, which nobody may enter (pytest's is not)
    request_cleanup.append(lambda: shutil.rmtree(tmp_path))
    tmp_path.chmod(0o755)
    (tmp_path / "state").mkdir(mode=0o555)
    (tmp_path / "state").chmod(0o555)
    write_cluster(tmp_path / "cluster.yaml", {"t4": 1})
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nobody, then the command
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            answer = _serve(tmp_path, tmp_path / where)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            import traceback

            answer = (99, "", repr(exc) + traceback.format_exc())
        os.write(write, json.dumps(answer).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        code, out, err = json.loads(pipe.read())
    os.waitpid(pid, 0)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "cannot write to" in lines[0] and "Traceback" not in err, err
    assert out == "" and list((tmp_path / "state").iterdir()) == []


def test_a_refused_simulate_leaves_no_out_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, err = run_cli("simulate", "--cluster", str(EXAMPLES / "cluster-small.yaml"), "--workload",
                           str(EXAMPLES / "demo-workload.csv"), "--profiles", str(tmp_path / "nosuch"),
                           "--out", str(out))
    assert code == 2 and "throughput profiles not found" in err, err
    assert not out.exists()
