"""The suite fails when a test leaves a process behind (tests/conftest.py): a pytest run of one test that starts
a detached ``sleep`` fails, naming it, and the sleeper is killed; the same test without it passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEST = '''
import os, subprocess

def test_maybe_leaves_a_sleeper():
    if os.environ.get("LEAVE"):
        subprocess.Popen(["sleep", "300"], start_new_session=True)  # detached: not even our child when we end
'''


@pytest.mark.parametrize("leave", [False, True])
def test_a_process_left_behind_fails_the_session(tmp_path: Path, leave: bool) -> None:
    (tmp_path / "test_inner.py").write_text(TEST)
    env = {k: v for k, v in os.environ.items() if k != "COLOCATE_TEST_SESSION"}  # a session of its own
    env.update(PYTHONPATH=str(REPO), COLOCATE_LEFTOVER_GRACE_S="1", LEAVE="1" if leave else "")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "-p", "tests.conftest", "test_inner.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    if not leave:
        assert done.returncode == 0, done.stdout + done.stderr
        return
    assert done.returncode == 1 and "1 process(es) left behind by the tests" in done.stdout, done.stdout
    pid = int(done.stdout.split("pid ")[1].split(":")[0])
    assert "sleep 300" in done.stdout
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().split(")")[1].split()[0] in ("Z", "X")  # killed


HELPERS = '''
import multiprocessing, os, subprocess, sys

def test_uses_the_fork_server():
    process = multiprocessing.get_context("forkserver").Process(target=os.getpid)  # starts a fork server and a tracker
    process.start()
    process.join()
    assert process.exitcode == 0
    if os.environ.get("LEAVE"):  # a child of the session that only looks like a fork server
        subprocess.Popen([sys.executable, "-c", "from multiprocessing.forkserver import main; import time; "
                          "time.sleep(300)"])
'''


@pytest.mark.slow
@pytest.mark.parametrize("leave", [False, True])
def test_the_sessions_own_multiprocessing_helpers_are_not_left_behind(tmp_path: Path, leave: bool) -> None:
    """Run without -n, a session whose test used the fork server still owns its fork server and resource tracker
    when it ends (they end with it): they are not counted; a look-alike the test started is."""
    (tmp_path / "test_inner.py").write_text(HELPERS)
    env = {k: v for k, v in os.environ.items() if k != "COLOCATE_TEST_SESSION"}
    env.update(PYTHONPATH=str(REPO), COLOCATE_LEFTOVER_GRACE_S="1", LEAVE="1" if leave else "")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "-p", "no:xdist", "-p", "tests.conftest", "test_inner.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    if not leave:
        assert done.returncode == 0, done.stdout + done.stderr
        return
    assert done.returncode == 1 and "1 process(es) left behind by the tests" in done.stdout, done.stdout
    assert "time.sleep(300)" in done.stdout
