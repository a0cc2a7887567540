"""A process that starts Ray keeps its own SIGTERM handler: ``colocate serve --backend ray`` stops cleanly
instead of dying in Ray's native crash dump ("*** SIGTERM received ... PC: @")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import os, signal, time
from scheduler.executor.ray.backend import RayExecutor
stopped = []
signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
ray = RayExecutor(address=None)._connect()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(1.0)
print("stopped by", stopped)
ray.shutdown()
"""


def test_sigterm_reaches_the_python_handler_after_ray_init() -> None:
    pytest.importorskip("ray")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "stopped by [15]" in done.stdout
    assert "SIGTERM received" not in done.stderr and "PC: @" not in done.stderr
