"""NVIDIA MPS control-daemon lifecycle for one co-located group.

We only ever stop a daemon we started: it gets private pipe and log directories (mode 0700) that are
exported to the daemon and to every client, so it cannot collide with a site-wide daemon, and ``quit`` is
sent to exactly that pipe directory in a ``finally``. No GPU setting (compute mode, clocks, MIG) is changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from profiler.errors import SharingUnavailable

CONTROL_BINARY = "nvidia-cuda-mps-control"


class MpsUnavailable(SharingUnavailable):
    """MPS cannot be used here; the message says why (recorded as the cells' skip reason)."""


@dataclass(frozen=True)
class MpsDaemon:
    pipe_dir: Path
    log_dir: Path

    def client_env(self, thread_percentage: int | None = None) -> dict[str, str]:
        env = {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}
        if thread_percentage is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(thread_percentage)
        return env


def mps_unavailable_reason(device: str) -> str | None:
    """None when MPS can be tried on ``device``; otherwise the reason it cannot."""
    if not device.startswith("cuda"):
        return f"MPS needs a CUDA device (spec device is '{device}')"
    if shutil.which(CONTROL_BINARY) is None:
        return f"{CONTROL_BINARY} not found on PATH"
    return None


@contextmanager
def mps_daemon(physical_gpu: str, *, start_timeout_s: float = 10.0) -> Iterator[MpsDaemon]:
    """Start a private MPS control daemon for ``physical_gpu`` (a CUDA_VISIBLE_DEVICES entry); always quit it."""
    binary = shutil.which(CONTROL_BINARY)
    if binary is None:
        raise MpsUnavailable(f"{CONTROL_BINARY} not found on PATH")
    root = Path(tempfile.mkdtemp(prefix="colocate-mps-"))
    pipe_dir, log_dir = root / "pipe", root / "log"
    for folder in (root, pipe_dir, log_dir):
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)
    daemon = MpsDaemon(pipe_dir, log_dir)
    env = {**os.environ, **daemon.client_env(), "CUDA_VISIBLE_DEVICES": physical_gpu}
    started = False
    try:
        result = subprocess.run([binary, "-d"], env=env, capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise MpsUnavailable(f"{CONTROL_BINARY} -d failed: {(result.stderr or result.stdout).strip()}")
        started = True
        deadline = time.monotonic() + start_timeout_s
        while not any(pipe_dir.iterdir()):  # the daemon creates its control pipe once it is up
            if time.monotonic() > deadline:
                raise MpsUnavailable(f"MPS daemon did not create its pipe in {pipe_dir}")
            time.sleep(0.05)
        yield daemon
    finally:
        if started:
            subprocess.run([binary], input="quit\n", env=env, capture_output=True, text=True, timeout=30)
            # quit is asynchronous; wait briefly for the control pipe to disappear before removing dirs
            deadline = time.monotonic() + 10
            while (pipe_dir / "control").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        shutil.rmtree(root, ignore_errors=True)
