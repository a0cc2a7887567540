"""Chaos: a live ``colocate serve`` (local backend, ``--device cpu``, six logical GPUs, 1-s rounds) runs good
jobs beside jobs that misbehave through everything they can write — their progress file (1e300, NaN, a
named pipe, a link to /dev/zero, a 50 GiB sparse file, JSON nested 30,000 deep, a directory), a forged exit
record, their log and generation files replaced by pipes, escape sequences and Rich markup in their last log
line — or by how they run (exiting at once, ignoring SIGTERM when cancelled). Over at least ten rounds every
good job completes exactly once, every bad job is stopped and failed after its retry (the ignoring one is
cancelled), no round fails, ``colocate jobs`` shows the hostile text escaped, and the server's peak memory
stays under :data:`PEAK_RSS_BOUND_MIB`, growing by less than :data:`GROWTH_BOUND_MIB` after its first rounds
(measured: see docs/hardening.md). About 20 s."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import yaml
from click.testing import CliRunner

from colocate.cli import app
from tests.serve_helpers import ServeProcess, by_name, events, kill_groups, wait_until, write_cluster

PEAK_RSS_BOUND_MIB = 512  # the server's own peak resident memory (VmHWM) over the whole run
GROWTH_BOUND_MIB = 64  # how much of it the run may add after the first rounds (its imports are the rest)
GOOD_JOBS = 4

GOOD = textwrap.dedent("""
    i=0
    while [ $i -lt 6 ]; do
        i=$((i + 1))
        printf '{"step": %d, "samples": %d, "elapsed_s": %d, "state": "running"}' $i $((i * 4)) $i > "$P.tmp"
        mv "$P.tmp" "$P"
        sleep 0.3
    done
    echo "$COLOCATE_JOB" >> "$LEDGER"
""")
# what each bad job does (then it lingers, so the server must notice it while it runs)
BAD = {
    "progress-1e300": """printf '{"step": 1e300}' > "$P"; sleep 60""",
    "progress-nan": """printf '{"step": NaN}' > "$P"; sleep 60""",
    "progress-negative": """printf '{"step": -7, "elapsed_s": 1}' > "$P"; sleep 60""",
    "progress-fifo": """rm -f "$P"; mkfifo "$P"; sleep 60""",
    "progress-link-dev-zero": """ln -sf /dev/zero "$P"; sleep 60""",
    "progress-sparse-50g": """truncate -s 50G "$P"; sleep 60""",
    "progress-deep": """python3 -c "import sys; sys.stdout.write('['*30000 + ']'*30000)" > "$P"; sleep 60""",
    "progress-directory": """rm -f "$P"; mkdir "$P"; sleep 60""",
    "exit-forged": """printf '{"returncode": 99999999999999999999}' > "$COLOCATE_JOB_DIR/exit.json"; sleep 60""",
    "log-fifo": """rm -f "$COLOCATE_JOB_DIR/train.log"; mkfifo "$COLOCATE_JOB_DIR/train.log"; exit 1""",
    "generation-fifo": """rm -f "$COLOCATE_JOB_DIR/generation"; mkfifo "$COLOCATE_JOB_DIR/generation"; sleep 60""",
    "escapes-in-log": r"""printf '\033[2J\033[31m[bold red]PWNED[/] \033]0;title\007\n'; exit 1""",
    "exits-at-once": """exit 3""",
}
IGNORES_SIGTERM = """trap '' TERM; sleep 600"""


def _job(directory: Path, name: str, script: str, **fields: object) -> Path:
    body = directory / f"{name}.sh"
    body.write_text('P="$COLOCATE_PROGRESS_FILE"\n' + script + "\n")
    spec = {"name": name, "command": f"sh {body}", "application": "mine" if name.startswith("good") else name,
            "steps": 6, "batch_size": 4, **fields}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def test_good_jobs_complete_exactly_once_beside_misbehaving_jobs(tmp_path: Path) -> None:
    state, jobs = tmp_path / "state", tmp_path / "jobs"
    jobs.mkdir()
    ledger = tmp_path / "ledger.txt"
    os.environ["LEDGER"] = str(ledger)  # the server's environment reaches its jobs
    cluster = write_cluster(tmp_path / "cluster.yaml", {"t4": 6})
    files = [_job(jobs, f"good-{i}", GOOD) for i in range(GOOD_JOBS)]
    files += [_job(jobs, name, script, max_retries=1) for name, script in BAD.items()]
    files.append(_job(jobs, "ignores-sigterm", IGNORES_SIGTERM, steps=1000, max_retries=0))
    result = CliRunner().invoke(app, ["submit", "--state", str(state), *map(str, files)])
    assert result.exit_code == 0, result.output
    server = ServeProcess(state, cluster, log=tmp_path / "serve.log")
    server.argv = [*server.argv[:server.argv.index("--round-s")], "--backend", "local", "--round-s", "1",
                   "--device", "cpu", "--grace", "2"]
    try:
        server.start()
        assert server.popen is not None
        wait_until(lambda: by_name(state)["ignores-sigterm"]["state"] == "running", 120, "the SIGTERM-ignorer to run")
        first = _status(server.popen.pid)
        result = CliRunner().invoke(app, ["cancel", "--state", str(state), "ignores-sigterm"])
        assert result.exit_code == 0, result.output

        def settled() -> bool:
            view = by_name(state)
            return (all(view[f"good-{i}"]["state"] == "completed" for i in range(GOOD_JOBS))
                    and all(view[name]["state"] == "failed" for name in BAD)
                    and view["ignores-sigterm"]["state"] == "cancelled"
                    and json.loads(CliRunner().invoke(app, ["jobs", "--state", str(state), "--json"]).output)[
                        "rounds"] >= 10)

        try:
            wait_until(settled, 300, "every job to settle after ten rounds", interval_s=1.0)
        except AssertionError as err:  # say which job did not settle, and what the server said
            states = {name: (row["state"], row.get("error")) for name, row in by_name(state).items()}
            raise AssertionError(f"{err}: {states}\n{server.output()[-4000:]}") from None
        peak = _status(server.popen.pid)
        assert server.popen.poll() is None, server.output()
        assert json.loads(CliRunner().invoke(app, ["jobs", "--state", str(state), "--json"]).output)["server"][
            "running"] is True
    finally:
        server.stop()
        kill_groups(state)
        os.environ.pop("LEDGER", None)
    assert server.popen.returncode == 0, server.output()  # SIGTERM: a clean stop, however the jobs behaved
    assert "no colocate serve is running" in " ".join(CliRunner().invoke(app, ["jobs", "--state", str(state)]).output
                                                      .split())
    log = server.output()
    assert "Traceback" not in log and "round failed" not in log, log
    assert not [e for e in events(state) if e["kind"] == "round-failed"]
    assert sorted(ledger.read_text().split()) == [f"good-{i}" for i in range(GOOD_JOBS)]  # each exactly once
    for i in range(GOOD_JOBS):
        assert [e["kind"] for e in events(state, f"good-{i}")].count("completed") == 1
    view = by_name(state)
    for name in ("progress-1e300", "progress-nan", "progress-negative", "progress-fifo", "progress-link-dev-zero",
                 "progress-sparse-50g", "progress-deep", "progress-directory", "exit-forged"):
        assert view[name]["error"].startswith("misbehaved: "), (name, view[name])
        assert view[name]["crashes"] == 2, (name, view[name])  # stopped, retried once, failed
    shown = CliRunner().invoke(app, ["jobs", "--state", str(state)]).output
    assert "\x1b" not in shown and "\x07" not in shown and "PWNED" in shown and "[bold" in shown  # not run
    peak_mib = peak["VmHWM"] / 1024
    print(f"server RSS after its first rounds {first['VmRSS'] / 1024:.0f} MiB, peak {peak_mib:.0f} MiB")
    assert peak_mib < PEAK_RSS_BOUND_MIB and peak_mib - first["VmRSS"] / 1024 < GROWTH_BOUND_MIB, (first, peak)
