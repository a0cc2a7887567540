"""The suite runs under pytest-xdist (``-n logical``); GPU tests must still run one at a time, because each starts
its own MPS daemon and fills the device. Checked here with two stand-in GPU tests on two workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent

CONFTEST = f"""
import importlib.util
spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS_DIR / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
_gpu_tests_take_turns = suite._gpu_tests_take_turns  # the fixture under test, without the suite's CUDA skip
"""

STAND_INS = """
import json, os, time
import pytest

def _hold(name):
    start = time.monotonic()
    time.sleep(1.0)
    with open(os.environ["SPANS"], "a") as out:
        out.write(json.dumps([name, start, time.monotonic()]) + "\\n")

@pytest.mark.gpu
def test_first():
    _hold("first")

@pytest.mark.gpu
def test_second():
    _hold("second")

def test_cpu_a():
    _hold("cpu_a")

def test_cpu_b():
    _hold("cpu_b")
"""


def _spans(tmp_path: Path, *args: str) -> dict[str, tuple[float, float]]:
    tmp_path.mkdir()
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_stand_ins.py").write_text(STAND_INS)
    spans = tmp_path / "spans.jsonl"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", *args,
                           "-o", "markers=gpu", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "SPANS": str(spans)})
    assert done.returncode == 0, done.stdout + done.stderr
    return {name: (start, end) for name, start, end in map(json.loads, spans.read_text().splitlines())}


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.mark.slow
def test_gpu_tests_on_two_workers_do_not_overlap_and_cpu_tests_do(tmp_path: Path) -> None:
    gpu = _spans(tmp_path / "gpu", "-m", "gpu")
    assert set(gpu) == {"first", "second"}
    assert not _overlap(gpu["first"], gpu["second"]), gpu
    cpu = _spans(tmp_path / "cpu", "-m", "not gpu")
    assert set(cpu) == {"cpu_a", "cpu_b"}
    assert _overlap(cpu["cpu_a"], cpu["cpu_b"]), cpu  # the control: without the lock, two workers do run at once
