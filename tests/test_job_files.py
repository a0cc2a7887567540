"""Whatever a job leaves in its directory is read bounded and checked (common/untrusted.py,
scheduler/executor/job_files.py): real pipes, links, devices and huge sparse files on the real filesystem. A
read that would block is run in a thread, so a regression fails here instead of hanging the suite."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common.untrusted import UntrustedFile, printable, read_regular
from scheduler.executor.group_doc import GroupMember
from scheduler.executor.job_files import check_exit, check_progress, job_records, last_line
from scheduler.executor.supervise import LOG_FILE, open_log, read_json, request_job_stop, superseded

GOOD = {"step": 12, "samples": 384, "restored_step": 4, "elapsed_s": 3.5, "state": "running", "loss": None}


def _bounded(call: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    """Run ``call`` in a thread: it must return (or raise) within ``timeout_s``, never block."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            out["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), "the read blocked"
    if "error" in out:
        raise out["error"]
    return out["value"]


def _write(directory: Path, name: str, text: str) -> None:
    (directory / name).write_text(text)


HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (lambda d: os.mkfifo(d / "progress.json"), "is a named pipe (not a regular file)"),
    "link-to-dev-zero": (lambda d: (d / "progress.json").symlink_to("/dev/zero"), "is a symbolic link"),
    "link-inside": (lambda d: (_write(d, "real.json", json.dumps(GOOD)), (d / "progress.json").symlink_to(
        d / "real.json")), "is a symbolic link"),
    "directory": (lambda d: (d / "progress.json").mkdir(), "is a directory (not a regular file)"),
    "huge-sparse": (lambda d: os.truncate(_touch(d / "progress.json"), 50 * 2**30), "bytes (at most 65536)"),
    "deep": (lambda d: _write(d, "progress.json", "[" * 30000 + "]" * 30000), "nested deeper than 64 levels"),
    "nan": (lambda d: _write(d, "progress.json", '{"step": NaN}'), "NaN is not a JSON number"),
    "step-1e300": (lambda d: _write(d, "progress.json", '{"step": 1e300}'), "field 'step'"),
    "step-negative": (lambda d: _write(d, "progress.json", '{"step": -5}'), "field 'step'"),
    "step-text": (lambda d: _write(d, "progress.json", '{"step": "many"}'), "field 'step'"),
    "samples-huge": (lambda d: _write(d, "progress.json", '{"step": 1, "samples": 10000000000000000000}'),
                     "field 'samples'"),
    "elapsed-inf": (lambda d: _write(d, "progress.json", '{"step": 1, "elapsed_s": 1e999}'), "field 'elapsed_s'"),
    "restored-beyond-step": (lambda d: _write(d, "progress.json", '{"step": 1, "restored_step": 9}'),
                             "more than step"),
    "state-unknown": (lambda d: _write(d, "progress.json", '{"step": 1, "state": "\\u001b[2J"}'), "field 'state'"),
    "not-an-object": (lambda d: _write(d, "progress.json", "[1, 2]"), "is not a JSON object"),
    "not-utf8": (lambda d: (d / "progress.json").write_bytes(b'{"step": "\xff"}'), "is not UTF-8 text"),
    "duplicate-key": (lambda d: _write(d, "progress.json", '{"step": 1, "step": 2}'), "duplicate key"),
    "exit-forged": (lambda d: _write(d, "exit.json", '{"returncode": 1e300}'), "exit.json: field 'returncode'"),
    "exit-fifo": (lambda d: os.mkfifo(d / "exit.json"), "exit.json: is a named pipe"),
}


def _touch(path: Path) -> Path:
    path.touch()
    return path


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_job_file_is_a_named_problem_and_never_blocks(tmp_path: Path, case: str) -> None:
    make, problem = HOSTILE[case]
    make(tmp_path)
    files = _bounded(lambda: job_records(tmp_path, "progress.json", "exit.json"))
    assert files["problem"] and problem in files["problem"], files
    name = "exit.json" if case.startswith("exit") else "progress.json"
    assert files["problem"].startswith(f"{name}: ")
    assert files["exit" if name == "exit.json" else "progress"] is None


def test_good_records_are_read_with_their_numbers(tmp_path: Path) -> None:
    _write(tmp_path, "progress.json", json.dumps(GOOD))
    _write(tmp_path, "exit.json", json.dumps({"returncode": 0, "stop_requested": False, "last_line": "done",
                                              "generation": "g00001"}))
    files = job_records(tmp_path, "progress.json", "exit.json")
    assert files["problem"] is None
    assert files["progress"]["step"] == 12 and files["progress"]["elapsed_s"] == 3.5
    assert files["exit"]["returncode"] == 0
    assert job_records(tmp_path / "missing", "progress.json", "exit.json") == {"progress": None, "exit": None,
                                                                            "oom": None, "problem": None}


def test_an_out_of_memory_record_is_read_bounded_and_checked(tmp_path: Path) -> None:
    """oom.json is written by the job (the built-in trainer; a command may): numbers in range or a named problem."""
    from scheduler.executor.job_files import check_oom

    _write(tmp_path, "oom.json", json.dumps({"reached_bytes": 3 * 2**30, "limit_bytes": 2 * 2**30, "local_batch": 64,
                                             "message": "CUDA out of memory"}))
    files = job_records(tmp_path, "progress.json", "exit.json", "oom.json")
    assert files["problem"] is None and files["oom"]["reached_bytes"] == 3 * 2**30 and files["oom"]["local_batch"] == 64
    for bad, field in (({"reached_bytes": -1}, "reached_bytes"), ({"limit_bytes": 1e30}, "limit_bytes"),
                       ({"local_batch": 0}, "local_batch"), ({"message": "x" * 5000}, "message"),
                       ({"reached_bytes": "lots"}, "reached_bytes")):
        with pytest.raises(Exception, match=field):
            check_oom(bad)
    (tmp_path / "oom.json").unlink()
    os.mkfifo(tmp_path / "oom.json")  # a job may leave a pipe there: named, never waited on
    files = job_records(tmp_path, "progress.json", "exit.json", "oom.json")
    assert files["oom"] is None and "oom.json" in files["problem"]


def test_check_progress_accepts_the_trainers_records_and_bounds() -> None:
    assert check_progress({})["step"] == 0
    assert check_progress({"step": 10**12, "samples": 10**16})["samples"] == 10**16
    assert check_progress({"step": 1.0})["step"] == 1 and isinstance(check_progress({"step": 1.0})["step"], int)
    for bad in ({"step": True}, {"step": 10**12 + 1}, {"samples": -1}, {"iter_time_s": float("inf")},
                {"steps": 10**10}):
        with pytest.raises(Exception, match="field"):
            check_progress(bad)
    with pytest.raises(Exception, match="stop_requested"):
        check_exit({"returncode": 0, "stop_requested": "yes"})


def test_gradient_statistics_are_optional_bounded_and_named_when_bad() -> None:
    """The contract's grad_sqr/grad_var (≥ 0) and lr (> 0): absent reads as None, a bad value names its field."""
    from scheduler.executor.job_files import BadRecord

    assert {k: check_progress({})[k] for k in ("grad_sqr", "grad_var", "lr")} == dict.fromkeys(
        ("grad_sqr", "grad_var", "lr"))
    good = check_progress({"grad_sqr": 0.5, "grad_var": 0, "lr": 0.1})
    assert (good["grad_sqr"], good["grad_var"], good["lr"]) == (0.5, 0.0, 0.1)
    for key, bad in (("grad_sqr", -1e-9), ("grad_var", float("nan")), ("grad_var", 1e31), ("lr", 0),
                     ("lr", -0.1), ("grad_sqr", "1.0"), ("lr", True), ("grad_sqr", float("inf"))):
        with pytest.raises(BadRecord, match=f"field '{key}'"):
            check_progress({key: bad})


def test_bad_gradient_statistics_in_a_job_file_are_a_named_problem(tmp_path: Path) -> None:
    (tmp_path / "progress.json").write_text('{"step": 3, "grad_var": -2.0}')
    files = job_records(tmp_path, "progress.json", "exit.json")
    assert files["progress"] is None and "field 'grad_var'" in files["problem"]


def test_the_job_directory_itself_a_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    _write(real, "progress.json", json.dumps(GOOD))
    (tmp_path / "job").symlink_to(real)
    with pytest.raises(UntrustedFile, match="its directory is a symbolic link"):
        read_regular(tmp_path / "job", "progress.json", max_bytes=1024)


def test_a_logs_last_line_is_read_from_its_tail_only(tmp_path: Path) -> None:
    with (tmp_path / LOG_FILE).open("wb") as log:
        log.write(b"x" * (20 * 2**20) + b"\nthe end \x1b[2J\n")
    assert last_line(tmp_path / LOG_FILE) == "the end \x1b[2J"
    os.unlink(tmp_path / LOG_FILE)
    os.mkfifo(tmp_path / LOG_FILE)
    assert "named pipe" in _bounded(lambda: last_line(tmp_path / LOG_FILE))


@pytest.mark.parametrize("kind", ["fifo", "link", "directory"])
def test_the_supervisor_replaces_a_log_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("not the job's\n")
    log = tmp_path / LOG_FILE
    {"fifo": lambda: os.mkfifo(log), "link": lambda: log.symlink_to(target), "directory": log.mkdir}[kind]()
    fd = _bounded(lambda: open_log(log))
    os.write(fd, b"hello\n")
    os.close(fd)
    assert log.is_file() and not log.is_symlink() and log.read_text() == "hello\n"
    assert target.read_text() == "not the job's\n"


def test_a_generation_file_that_is_not_a_small_file_fences_the_copy(tmp_path: Path) -> None:
    job = GroupMember("j", str(tmp_path), ("true",))
    _write(tmp_path, "generation", "g00001")
    assert not superseded(job, "g00001") and superseded(job, "g00002")
    os.unlink(tmp_path / "generation")
    os.mkfifo(tmp_path / "generation")
    assert _bounded(lambda: superseded(job, "g00001"))


def test_a_stop_request_follows_no_link(tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("keep")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "stop").symlink_to(target)
    request_job_stop(job_dir)
    assert target.read_text() == "keep" and (job_dir / "stop").is_symlink()
    os.unlink(job_dir / "stop")
    request_job_stop(job_dir)
    assert (job_dir / "stop").is_file()


def test_pid_files_are_read_bounded(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "g1.pid")
    assert _bounded(lambda: read_json(tmp_path / "g1.pid")) is None
    (tmp_path / "g2.pid").symlink_to("/dev/zero")
    assert _bounded(lambda: read_json(tmp_path / "g2.pid")) is None


def test_printable_escapes_control_and_format_characters() -> None:
    assert printable("ok [bold]x[/]") == "ok [bold]x[/]"  # markup is the printer's business (Text)
    assert printable("\x1b[2J\x1b]0;title\x07\r\u202eevil\x00") == "\\x1b[2J\\x1b]0;title\\x07\\r\\u202eevil\\x00"
    assert printable("é 日本") == "é 日本"
