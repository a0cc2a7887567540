"""A multi-GPU job stopped by the scheduler leaves one line in its log, not torchrun's SignalException traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WORKER = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("worker checkpointed", flush=True), sys.exit(0)))
print("worker up", flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_sigterm_to_torchrun_stops_the_workers_in_one_line(tmp_path: Path) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    log = tmp_path / "train.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "scheduler.executor.quiet_torchrun", "--standalone",
                                 "--nproc-per-node=2", str(worker)], stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=tmp_path)
        deadline = time.monotonic() + 120
        while log.read_text().count("worker up") < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert log.read_text().count("worker up") == 2, log.read_text()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    text = log.read_text()
    assert code == 128 + signal.SIGTERM
    assert "Traceback" not in text and "SignalException" not in text, text
    assert text.count("stopped by SIGTERM") == 1
    assert text.count("worker checkpointed") == 2  # each worker had its SIGTERM to checkpoint
