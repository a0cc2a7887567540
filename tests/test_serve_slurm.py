"""`colocate serve --backend slurm` on a real Slurm (tests/slurm_cluster.py): each GPU group one Slurm job running
the group's supervisor; user commands that follow the checkpoint contract (tests/test_serve_local.py) keep
the tests fast. Jobs complete exactly once; a pair is formed and measured; `kill -9` of the server mid-run
loses nothing (the restarted server re-adopts the Slurm job by id); cancel stops a job with a checkpoint; an
MPS pair gets the private daemon of the batch script; a group Slurm ends itself (an administrator's scancel,
the time limit) is recorded with Slurm's state and reason. A group Slurm keeps pending is submitted once and
no round waits for it; one pending past its start timeout is requeued (no crash) and tried again after a
backoff; a client whose controller does not answer is refused at start, and sbatch failing later is shown on
the job, retried after a backoff, and leaves no files."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.executor.slurm.live import SlurmExecutor
from scheduler.executor.slurm.settings import slurm_settings
from scheduler.model.cluster import cluster_from_dict
from scheduler.service import waiting
from scheduler.service.config import LIVE_ILP, ServeConfig
from scheduler.service.jobs.jobspec import job_from_dict
from scheduler.service.server import Server
from scheduler.service.state.store import StateStore
from tests.serve_helpers import ServeProcess, by_name, events, submit, wait_until
from tests.test_serve_local import CONTRACT

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(900)]
LONG = 300.0
CLUSTER = {"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}},
           "slurm": {"gpu_types": {"t4": {"partition": "t4"}}}}


def _server(tmp_path: Path, cluster: dict[str, Any] = CLUSTER, **options: Any) -> tuple[StateStore, Server]:
    state = StateStore(tmp_path / "state")
    # restarts of these commands cost about a second (the ILP's S; other policies ignore the ILP)
    config = ServeConfig(round_s=0.5, device="cpu", stop_grace_s=5, ilp=replace(LIVE_ILP, restart_cost_s=1.0),
                         **options)
    parsed = cluster_from_dict(cluster)
    # one instance name per test, as serve draws one per state directory: the jobs' names never meet
    executor = SlurmExecutor(slurm_settings(cluster.get("slurm"), parsed.type_names), instance=uuid.uuid4().hex[:8])
    server = Server(state, parsed, executor, config)
    server.acquire()
    return state, server


def _rounds_until(server: Server, predicate: Any, what: str, timeout_s: float = LONG) -> None:
    def step() -> bool:
        server.round()
        return predicate()

    wait_until(step, timeout_s, what, 0.3)


def _contract_job(tmp_path: Path, name: str, steps: int, **more: Any) -> Any:
    script = tmp_path / "train.py"
    script.write_text(CONTRACT)
    return job_from_dict({"name": name, "command": f"python {script}", "application": more.pop("application", name),
                          "steps": steps, "batch_size": 4, **more})


def _slurm_job(slurm: Any, server: Server, key: str) -> dict[str, str]:
    """Slurm's record of group ``key``'s job, found by its name as the server made it."""
    name = server.executor.job_name(key)  # type: ignore[attr-defined]
    (job_id,) = slurm.run("squeue", "-h", "-t", "all", "-n", name, "-o", "%i").stdout.split()
    return slurm.job(job_id)


def test_jobs_complete_exactly_once_and_a_pair_is_formed_and_measured(slurm: Any, tmp_path: Path) -> None:
    state, server = _server(tmp_path)
    state.submit(_contract_job(tmp_path, "a", 300, application="mine"))
    _rounds_until(server, lambda: state.job("a").step >= 60, "a to run alone (its solo time)")
    first = _slurm_job(slurm, server, state.job("a").group_key)
    assert first["JobState"] == "RUNNING" and first["Partition"] == "t4" and "gpu:t4:1" in first["TresPerNode"]
    state.submit(_contract_job(tmp_path, "b", 700, application="theirs"))
    _rounds_until(server, lambda: state.job("b").state == "completed", "b to complete")
    _rounds_until(server, lambda: state.job("a").state == "completed", "a to complete")
    for name, steps in (("a", 300), ("b", 700)):
        assert [e["kind"] for e in state.events(name)].count("completed") == 1
        assert state.job(name).step == steps and state.job(name).crashes == 0
    pair = [e for e in state.events("b") if " with a" in e["detail"]]
    assert pair, state.events("b")  # the pair was formed: one Slurm job ran both
    key = pair[0]["detail"].rsplit("group ", 1)[1]
    shared = _slurm_job(slurm, server, key)
    assert shared["JobState"] in ("COMPLETED", "RUNNING", "COMPLETING") and shared["NumTasks"] == "1"
    measured = {(m["application"], m["partner_type"]) for m in state.measurements()}
    assert ("mine", "theirs@4") in measured and ("theirs", "mine@4") in measured  # measured next to each other
    assert not server.state.groups()


def test_kill_9_of_the_server_mid_run_loses_nothing(slurm: Any, tmp_path: Path) -> None:
    state = tmp_path / "state"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER))
    script = tmp_path / "train.py"
    script.write_text(CONTRACT)
    server = ServeProcess(state, cluster, "--backend", "slurm", log=tmp_path / "serve.log").start()
    try:
        submit(state, tmp_path, name="u", command=f"python {script}", application="mine", steps=1200, batch_size=4)
        wait_until(lambda: by_name(state)["u"]["step"] > 50, LONG, f"u to train; log {server.output()}")
        server.kill9()
        key = StateStore(state, create=False).job("u").group_key
        job_id = slurm.run("squeue", "-h", "-n", f"colocate-{_instance(state)}-{key}", "-o", "%i").stdout.strip()
        assert job_id, "the Slurm job outlives its server"
        server = ServeProcess(state, cluster, "--backend", "slurm", log=tmp_path / "serve.log").start()
        wait_until(lambda: by_name(state)["u"]["state"] == "completed", LONG, f"u to complete; {server.output()}")
        row = by_name(state)["u"]
        assert (row["step"], row["restarts"], row["crashes"]) == (1200, 0, 0)
        assert [e["kind"] for e in events(state, "u")].count("completed") == 1
        assert slurm.wait_ended([job_id], 60)[job_id]["JobState"] == "COMPLETED"  # the same job ran to the end
        log = (state / "jobs" / "u" / "train.log").read_text()
        assert log.count("resumed at step") == 1  # started once, never rerun
    finally:
        server.stop()


def _instance(state: Path) -> str:
    return StateStore(state, create=False).meta("instance") or ""


def test_cancel_stops_the_job_with_a_checkpoint(slurm: Any, tmp_path: Path) -> None:
    from scheduler.service.front.client import cancel_job

    state, server = _server(tmp_path)
    state.submit(_contract_job(tmp_path, "c", 100000))
    _rounds_until(server, lambda: state.job("c").step >= 30, "c to train")
    key = state.job("c").group_key
    cancel_job(state.dir, "c")
    _rounds_until(server, lambda: state.job("c").state == "cancelled", "c to be cancelled", 120)
    checkpoint = int((state.dir / "jobs" / "c" / "checkpoint.pt").read_text())
    assert checkpoint >= 30  # it saved its step on SIGTERM
    job_id = _slurm_job(slurm, server, key)["JobId"]
    assert slurm.wait_ended([job_id], 60)[job_id]["JobState"] == "COMPLETED"  # stopped by us, not by Slurm


def test_an_mps_pair_gets_the_private_daemon_of_its_batch_script(slurm: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_launch_emit import _mps_stand_in

    bin_dir = _mps_stand_in(tmp_path)  # no GPU here: a stand-in nvidia-cuda-mps-control records its use
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")  # sbatch passes it to the job
    cluster = {"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}}
    state, server = _server(tmp_path, cluster, sharing="mps")
    pipe = 'echo "pipe=$CUDA_MPS_PIPE_DIRECTORY" > "$COLOCATE_JOB_DIR/pipe.txt"; env > "$COLOCATE_JOB_DIR/env.txt"; '
    for name in ("p", "q"):
        state.submit(job_from_dict({"name": name, "command": pipe + "sleep 2", "application": name, "steps": 1,
                                    "batch_size": 4}))
    _rounds_until(server, lambda: all(state.job(n).state == "completed" for n in "pq"), "the pair to complete")
    assert any(" with " in e["detail"] for e in state.events("p"))
    record = tmp_path / "mps-calls.txt"
    wait_until(lambda: "command quit" in record.read_text(), 60, "the batch script to quit its daemon", 0.3)
    calls = record.read_text().splitlines()
    assert calls[0].startswith("start ") and "mode=700" in calls[0] and calls[-1].startswith("command quit ")
    daemon_pipe = calls[0].split()[1].removeprefix("pipe=")
    assert calls[0].split()[-1] not in ("cvd=unset", "cvd=")  # Slurm's GPU for the daemon
    for name in "pq":
        assert (state.dir / "jobs" / name / "pipe.txt").read_text().strip() == f"pipe={daemon_pipe}"
        # what the client really got: the daemon's GPUs as its device 0, so no CUDA_VISIBLE_DEVICES of its own
        # (Slurm's index would name no device past GPU 0), and its memory limit on that device 0
        env = dict(line.split("=", 1) for line in (state.dir / "jobs" / name / "env.txt").read_text().splitlines()
                   if "=" in line)
        assert "CUDA_VISIBLE_DEVICES" not in env
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].startswith("0=") and "," not in env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]


def test_a_group_slurm_ends_itself_is_recorded_with_slurms_reason(slurm: Any, tmp_path: Path) -> None:
    cluster = {"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}},
               "slurm": {"time_limit": "1"}}  # one minute: Slurm ends the job within about 30 s after that
    state, server = _server(tmp_path, cluster, policy="fifo")  # nothing moves but what Slurm ends
    state.submit(_contract_job(tmp_path, "admin", 10**6, max_retries=0))
    state.submit(_contract_job(tmp_path, "late", 10**6, max_retries=0))
    _rounds_until(server, lambda: all(state.job(n).step >= 10 for n in ("admin", "late")), "both to train")
    assert state.job("admin").group_key != state.job("late").group_key
    victim = _slurm_job(slurm, server, state.job("admin").group_key)["JobId"]
    slurm.run("scancel", victim)  # an administrator
    _rounds_until(server, lambda: state.job("admin").state == "failed", "the cancelled job to be recorded", 120)
    assert state.job("admin").error == f"Slurm job {victim} CANCELLED", [(e["job"], e["kind"], e["detail"])
                                                                          for e in state.events()]
    _rounds_until(server, lambda: state.job("late").state == "failed", "the time limit", 240)
    assert "TIMEOUT (TimeLimit)" in state.job("late").error, state.job("late").error
    for name in ("admin", "late"):  # both checkpointed on Slurm's SIGTERM all the same
        assert int((state.dir / "jobs" / name / "checkpoint.pt").read_text()) >= 10


def test_a_batch_script_that_fails_fails_its_jobs_with_slurms_account(slurm: Any, tmp_path: Path) -> None:
    state, server = _server(tmp_path, policy="fifo")
    server.executor.python = str(tmp_path / "no-such-python")  # type: ignore[attr-defined]  # a broken node
    state.submit(_contract_job(tmp_path, "x", 100, max_retries=0))
    _rounds_until(server, lambda: state.job("x").state == "failed", "x to fail", 120)
    error = state.job("x").error
    assert "FAILED" in error and "exit code 127:0" in error and "no-such-python" in error, state.events()


def _block_t4(slurm: Any) -> list[str]:
    """Every t4 GPU of the test cluster held by someone else's job: a group asking for one waits (Resources)."""
    argv = ("sbatch", "--parsable", "-p", "t4", "--gres=gpu:t4:2", "--output=/dev/null", "--wrap", "sleep 600")
    ids = [slurm.run(*argv).stdout.strip() for _ in range(2)]
    wait_until(lambda: all(slurm.job(i)["JobState"] == "RUNNING" for i in ids), 60, "the blockers to run", 0.3)
    return ids


def _submitted(slurm: Any, server: Server) -> list[tuple[str, str]]:
    """(Slurm job id, state) of every job this server submitted, ended ones included (MinJobAge)."""
    prefix = f"colocate-{server.executor.instance}-"  # type: ignore[attr-defined]
    lines = slurm.run("squeue", "-h", "-t", "all", "-o", "%i|%j|%T").stdout.splitlines()
    return [(i, state) for i, name, state in (line.split("|") for line in lines) if name.startswith(prefix)]


def _reason(state: StateStore, name: str) -> dict[str, str]:
    return waiting.loads(state.meta(waiting.META_KEY)).get(name, {})


def test_a_pending_group_is_submitted_once_and_no_round_waits_for_it(slurm: Any, tmp_path: Path) -> None:
    blockers = _block_t4(slurm)
    # a start timeout no test outlives: a round that waited for Slurm to start the group would never end
    state, server = _server(tmp_path, {**CLUSTER, "slurm": {**CLUSTER["slurm"], "start_timeout_s": 86400}})
    state.submit(_contract_job(tmp_path, "p", 40))
    _rounds_until(server, lambda: "pending (Resources)" in _reason(state, "p").get("text", ""),
                  "p's note to say Slurm keeps its group pending", 120)
    for _ in range(5):
        server.round()
    (submitted,) = _submitted(slurm, server)
    assert submitted[1] == "PENDING" and state.job("p").state == "running"
    assert _reason(state, "p")["code"] == "backend-pending"
    slurm.run("scancel", *blockers)
    _rounds_until(server, lambda: state.job("p").state == "completed", "p to start once the GPUs are free")
    assert len(_submitted(slurm, server)) == 1  # the same job ran: submitted once
    assert (state.job("p").restarts, state.job("p").crashes) == (0, 0)


def test_a_group_pending_past_its_start_timeout_is_requeued_and_retried_after_a_backoff(slurm: Any,
                                                                                         tmp_path: Path) -> None:
    _block_t4(slurm)
    state, server = _server(tmp_path, {**CLUSTER, "slurm": {**CLUSTER["slurm"], "start_timeout_s": 1}})
    state.submit(_contract_job(tmp_path, "p", 40))
    _rounds_until(server, lambda: state.job("p").state == "queued" and state.job("p").group_key is None
                  and any(e["kind"] == "start-failed" for e in state.events("p")), "p to be requeued", 120)
    for _ in range(5):  # within the first backoff (10 s): not submitted again
        server.round()
    (cancelled,) = _submitted(slurm, server)
    assert cancelled[1] == "CANCELLED"
    (event,) = [e["detail"] for e in state.events("p") if e["kind"] == "start-failed"]
    assert "pending (" in event and "): not started within 1 s, cancelled; next try in 10 s" in event, event
    assert (state.job("p").crashes, state.job("p").restarts) == (0, 0)  # never ran: no crash, no restart
    assert _reason(state, "p")["code"] == "start-failed" and "next try in" in _reason(state, "p")["text"]


def _dead_controller(tmp_path: Path) -> Path:
    """A slurm.conf whose controller is not running (nothing listens on its port)."""
    if shutil.which("sbatch") is None or shutil.which("scontrol") is None:
        if os.environ.get("COLOCATE_REQUIRE_SLURM") == "1":
            pytest.fail("COLOCATE_REQUIRE_SLURM=1 but Slurm's commands are not installed")
        pytest.skip("Slurm's commands are not installed: apt-get install slurm-wlm munge (.ci/run does)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free again once closed: nothing answers there
    conf = tmp_path / "dead" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text("\n".join([
        "ClusterName=dead", "SlurmctldHost=localhost(127.0.0.1)", f"SlurmctldPort={port}", "AuthType=auth/munge",
        "GresTypes=gpu", "NodeName=t4-0 CPUs=1 Gres=gpu:t4:1 State=UNKNOWN", "PartitionName=t4 Nodes=t4-0", ""]))
    return conf


def test_serve_refuses_a_slurm_client_whose_controller_does_not_answer(tmp_path: Path) -> None:
    conf = _dead_controller(tmp_path)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER))
    done = subprocess.run([sys.executable, "-m", "colocate.cli", "serve", "--backend", "slurm", "--cluster",
                           str(cluster), "--state", str(tmp_path / "state")], capture_output=True, text=True,
                          env={**os.environ, "SLURM_CONF": str(conf)}, timeout=120)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "Slurm's controller does not answer" in line and "field '--backend'" in line
    assert not (tmp_path / "state").exists()  # refused before anything was written


def test_sbatch_failing_is_shown_on_the_job_retried_after_a_backoff_and_leaves_no_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(_dead_controller(tmp_path)))  # the controller went away after serve started
    state, server = _server(tmp_path)
    state.submit(_contract_job(tmp_path, "d", 40))
    for _ in range(4):  # the first round's sbatch fails (after Slurm's own retries); the next ones wait
        server.round()
    (event,) = [e["detail"] for e in state.events("d") if e["kind"] == "start-failed"]
    assert "Unable to contact slurm controller" in event and "next try in 10 s" in event, event
    reason = _reason(state, "d")
    assert reason["code"] == "start-failed" and "Unable to contact slurm controller" in reason["text"], reason
    assert state.job("d").state == "queued" and not list((state.dir / "runs").iterdir())
