"""What an operator sees of a live scheduler: whether a server runs at all, why an adaptive job is not scaled up
while GPUs idle, learned pairs counted one way by ``learned`` and the metric, job output shown escaped."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from pathlib import Path

from click.testing import CliRunner

from colocate.cli import app
from scheduler.executor.registry import make_executor
from scheduler.model.cluster import cluster_from_dict
from scheduler.service.jobs.jobspec import job_from_dict
from scheduler.service.rounds import RoundStats
from scheduler.service.server import ServeConfig, Server
from scheduler.service.state import lock as server_lock
from scheduler.service.state.store import StateStore
from tests.serve_helpers import by_name, kill_groups, wait_until

CLUSTER = {"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}}}
# progress as a user command writes it: one step every 0.1 s, atomically
PROGRESS = ('i=0; while [ $i -lt 600 ]; do i=$((i+1)); printf "{{\\"step\\": %d, \\"samples\\": %d, \\"elapsed_s\\": %d}}" '
            '$i $((i*32)) $i > "$COLOCATE_PROGRESS_FILE.t"; mv "$COLOCATE_PROGRESS_FILE.t" "$COLOCATE_PROGRESS_FILE"; '
            'sleep 0.1; done')


def _jobs(state: Path, *extra: str) -> str:
    result = CliRunner().invoke(app, ["jobs", "--state", str(state), *extra])
    assert result.exit_code == 0, result.output
    return result.output


def test_jobs_says_whether_a_server_runs(tmp_path: Path) -> None:
    state = StateStore(tmp_path / "state")
    state.submit(job_from_dict({"name": "a", "command": "true", "steps": 1, "batch_size": 4}))
    with sqlite3.connect(state.path) as conn:
        conn.execute("INSERT INTO meta VALUES ('heartbeat', ?)", (str(time.time() - 60),))
    assert "no colocate serve is running on this state directory (its last round: " in _jobs(state.dir)
    assert json.loads(_jobs(state.dir, "--json"))["server"]["running"] is False
    held = server_lock.take(state.dir)  # what a live server holds (server.lock stays: only the flock tells)
    try:
        assert "colocate serve running" in _jobs(state.dir) and "no colocate serve" not in _jobs(state.dir)
        assert json.loads(_jobs(state.dir, "--json"))["server"]["running"] is True
    finally:
        held.close()
    assert "no colocate serve is running" in _jobs(state.dir)
    assert not (tmp_path / "fresh" / "server.lock").exists()
    (tmp_path / "fresh").mkdir()
    _jobs(tmp_path / "fresh")
    assert not (tmp_path / "fresh" / "server.lock").exists()  # the look creates nothing


def test_an_adaptive_job_kept_on_one_gpu_beside_an_idle_one_says_why(tmp_path: Path) -> None:
    state = StateStore(tmp_path / "state")
    server = Server(state, cluster_from_dict(CLUSTER), make_executor("local"),
                    ServeConfig(round_s=0.5, device="cpu", stop_grace_s=5))
    server.acquire()
    state.submit(job_from_dict({"name": "blocker", "command": "sleep 2", "application": "blk", "steps": 1,
                                "batch_size": 4}))
    state.submit(job_from_dict({"name": "wide", "command": PROGRESS, "application": "resnet18", "steps": 600,
                                "batch_size": 32, "min_batch_size": 16, "max_batch_size": 128, "max_gpus": 2,
                                "adaptive": True}))
    try:
        def step() -> bool:
            server.round()
            view = by_name(state.dir)
            return view["blocker"]["state"] == "completed" and view["wide"]["num_gpus"] == 1 and bool(
                view["wide"]["note"])

        wait_until(step, 90, "the blocker to end with the adaptive job still on one GPU", interval_s=0.5)
        note = by_name(state.dir)["wide"]["note"]
        assert note["code"] in ("held", "not-scaled") and "on 1 of up to 2 GPU(s), 1 idle" in note["text"], note
        cells = "".join(ch for ch in _jobs(state.dir) if not ch.isspace() and ch not in "│┃")  # wrapped in its cell
        assert "on1ofupto2GPU(s),1idle" in cells
    finally:
        kill_groups(state.dir)


def test_learned_and_the_metric_count_learned_pairs_alike(tmp_path: Path) -> None:
    from scheduler.service.metrics import ServeMetrics

    state = StateStore(tmp_path / "state")
    rows = [("a", "t4", 1, 8, "", 0.10, 3), ("b", "t4", 1, 8, "", 0.20, 3),  # both solo: a+b is learned
            ("a", "t4", 1, 8, "b@8", 0.15, 2), ("b", "t4", 1, 8, "a@8", 0.30, 2),
            ("c", "t4", 1, 8, "a@8", 0.40, 2), ("a", "t4", 1, 8, "c@8", 0.25, 2),  # c has no solo time: pending
            ("a", "t4", 1, 8, "b@8+c@8", 0.5, 1)]  # a group of three: no pair row
    with sqlite3.connect(state.path) as conn:
        conn.executemany("INSERT INTO measurements VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    metrics = ServeMetrics()
    server = Server(state, cluster_from_dict(CLUSTER), make_executor("local"), ServeConfig(device="cpu"))
    metrics.update(server, RoundStats(1, 0, 0.1, 0.0, 0.0, 0.0, 0, 0))
    gauge = metrics.registry.get_sample_value("colocate_learned_pairs")
    result = CliRunner().invoke(app, ["learned", "--state", str(state.dir)])
    assert result.exit_code == 0, result.output
    shown = re.search(r"(\d+) learned pair\(s\).*?(\d+) pending", " ".join(result.output.split()))
    assert shown is not None, result.output
    written = CliRunner().invoke(app, ["learned", "--state", str(state.dir), "--out", str(tmp_path / "l.csv")])
    assert written.exit_code == 0, written.output
    lines = (tmp_path / "l.csv").read_text().splitlines()[1:]
    assert gauge == int(shown.group(1)) == len(lines) == 1 and int(shown.group(2)) == 1


def test_job_output_is_shown_escaped_and_never_as_markup(tmp_path: Path) -> None:
    from colocate.commands._output import console
    from colocate.commands.jobs import _table

    state = StateStore(tmp_path / "state")
    state.submit(job_from_dict({"name": "a", "command": "true", "steps": 1, "batch_size": 4}))
    hostile = "exit status 1: \x1b[2J\x1b[31m[bold red]PWNED[/]\x1b]0;title\x07\r\u202eevil"
    with sqlite3.connect(state.path) as conn:
        conn.execute("UPDATE jobs SET state = 'failed', error = ?", (hostile,))
    from scheduler.service.front.views import job_views

    with console.capture() as captured:
        console.print(_table(job_views(StateStore(state.dir, readonly=True)), "t"))
    text = captured.get()
    assert not any(c in text for c in "\x1b\x07\r\u202e"), repr(text)
    assert all(part in text for part in ("\\x1b[2J\\x1b[31m[bold", "red]PWNED[/]", "\\u202eevil")), text  # as typed
    assert "\x1b" not in _jobs(state.dir) and "\x1b" not in _jobs(state.dir, "--json")
