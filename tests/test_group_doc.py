"""The group document (:mod:`scheduler.executor.group_doc`): one type written and read by the server, the backends
and the supervisor; its JSON as every server wrote it still reads (a server restarted on an older state directory
re-adopts its running groups), and a damaged one is refused in one line naming the file and the field."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from common.errors import InputError
from common.owners import Owner
from scheduler.executor.group_doc import GroupDoc, GroupMember, Placement
from tests.serve_helpers import kill_groups, wait_until

REPO = Path(__file__).resolve().parents[1]


def _today(state: Path, argv: list[str] | None = None) -> dict[str, Any]:
    """A group document as ``colocate serve`` wrote it before the type existed (local backend, on a GPU; the key
    order and every key of ``group_document`` and ``LocalExecutor.start`` then)."""
    job = state / "jobs" / "a"
    return {"key": "g00001", "sharing": "mps", "gpu": True, "grace_s": 30.0, "pid_file": str(state / "runs/g00001.pid"),
            "placement": {"gpu_type": "t4", "nodes": [0], "gpus": [1]},
            "jobs": [{"name": "a", "dir": str(job), "env": {"COLOCATE_JOB": "a", "COLOCATE_MEMORY_LIMIT_BYTES": "1024"},
                      "memory_limit_bytes": 1024, "argv": argv or ["python", "-m", "x"],
                      "owner": {"uid": 1001, "gid": 1001, "name": "alice", "groups": [1001, 27], "home": "/home/alice"}},
                     {"name": "b", "dir": str(state / "jobs" / "b"), "env": {}, "memory_limit_bytes": None,
                      "argv": ["sleep", "1"]}],
            "sharing_why": "MPS across owners", "cuda_visible_devices": "1"}


def test_a_document_in_todays_format_reads_and_writes_back_the_same_keys(tmp_path: Path) -> None:
    data = _today(tmp_path)
    path = tmp_path / "g00001.json"
    path.write_text(json.dumps(data))
    doc = GroupDoc.read(path)
    assert doc.names == ["a", "b"] and doc.gpu and doc.sharing == "mps" and doc.grace_s == 30.0
    assert doc.placement == Placement("t4", (0,), (1,)) and doc.sharing_why == "MPS across owners"
    assert doc.jobs[0].owner == Owner(1001, 1001, "alice", (1001, 27), "/home/alice")
    assert doc.jobs[0].memory_limit_bytes == 1024 and doc.jobs[1].memory_limit_bytes is None
    assert doc.member("b").argv == ("sleep", "1") and doc.group_file == tmp_path / "runs/g00001.json"
    assert doc.to_dict() == data and json.loads(doc.to_json()) == data  # the same keys and values on disk


def test_the_first_servers_documents_still_read(tmp_path: Path) -> None:
    """Before placement, memory limits and owners were recorded (and a probe's document, a Slurm batch job's)."""
    first = {"key": "p0001", "sharing": "none", "gpu": False, "grace_s": 5, "pid_file": str(tmp_path / "s.pid"),
             "jobs": [{"name": "probe-p0001", "dir": str(tmp_path), "env": {}, "argv": ["python", "-m", "probe"]}]}
    doc = GroupDoc.from_json(json.dumps(first), "p.json")
    assert doc.placement is None and doc.jobs[0].memory_limit_bytes is None and doc.jobs[0].owner is None
    slurm = GroupDoc.from_dict({**first, "cuda_visible_devices": None, "sharing_ready": True, "pid_record": False})
    assert slurm.sharing_ready and not slurm.pid_record and slurm.cuda_visible_devices is None


def test_round_trip_through_json_and_a_file(tmp_path: Path) -> None:
    member = GroupMember("a", str(tmp_path / "jobs/a"), ("python", "-c", "pass"), {"X": "1"}, 2**30,
                         Owner(1001, 1002, "alice", (1002,), "/home/alice"))
    doc = GroupDoc("g00042", "timeslice", str(tmp_path / "g00042.pid"),
                   (member, GroupMember("b", str(tmp_path / "jobs/b"), ("true",))), gpu=True, grace_s=2.5,
                   placement=Placement("a100", (0, 1), (2, 3)), sharing_why="why", cuda_visible_devices="2,3",
                   sharing_ready=True, pid_record=False)
    assert GroupDoc.from_json(doc.to_json()) == doc
    path = doc.write()
    assert path == tmp_path / "g00042.json" and GroupDoc.read(path) == doc
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # its jobs' commands and environments are theirs
    path.write_text("left by an earlier start")
    doc.write()
    assert GroupDoc.read(path) == doc and [p.name for p in tmp_path.iterdir()] == ["g00042.json"]


def _damaged(data: dict[str, Any], change: str) -> str:
    """The JSON text of ``data`` with one defect."""
    job = data["jobs"][0]
    if change == "no-key":
        del data["key"]
    elif change == "no-dir":
        del job["dir"]
    elif change == "gpu-text":
        data["gpu"] = "yes"
    elif change == "argv-text":
        job["argv"] = "python -m x"
    elif change == "env-number":
        job["env"] = {"X": 1}
    elif change == "owner-uid-text":
        job["owner"]["uid"] = "root"
    elif change == "placement-negative":
        data["placement"]["gpus"] = [-1]
    elif change == "unknown-key":
        data["memory_limit"] = 5
    elif change == "twice":
        data["jobs"][1]["name"] = "a"
    elif change == "no-jobs":
        data["jobs"] = []
    elif change == "key-path":
        data["key"] = "../g1"
    text = json.dumps(data)
    if change == "limit-huge":
        text = text.replace('"memory_limit_bytes": 1024', '"memory_limit_bytes": 1' + "0" * 400)
    elif change == "grace-inf":
        text = text.replace('"grace_s": 30.0', '"grace_s": 1e999')
    return text


@pytest.mark.parametrize(("change", "field"), [
    ("no-key", "key"), ("no-dir", "jobs[0].dir"), ("gpu-text", "gpu"), ("argv-text", "jobs[0].argv"),
    ("env-number", "jobs[0].env"), ("owner-uid-text", "jobs[0].owner.uid"), ("placement-negative", "placement.gpus"),
    ("unknown-key", "memory_limit"), ("twice", "jobs"), ("no-jobs", "jobs"), ("key-path", "key"),
    ("limit-huge", "jobs[0].memory_limit_bytes"), ("grace-inf", "grace_s"),
])
def test_a_damaged_document_is_refused_in_one_line_naming_file_and_field(tmp_path: Path, change: str,
                                                                         field: str) -> None:
    path = tmp_path / "g00001.json"
    path.write_text(_damaged(_today(tmp_path), change))
    with pytest.raises(InputError) as caught:
        GroupDoc.read(path)
    message = str(caught.value)
    assert caught.value.field == field and f"field '{field}'" in message and str(path) in message, message
    assert "\n" not in message and len(message) < 400, message


@pytest.mark.parametrize("text", ["{oops", "[]", '{"key": "g1", "key": "g2"}'])
def test_a_document_that_is_no_json_object_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "g00001.json"
    path.write_text(text)
    with pytest.raises(InputError, match="g00001.json"):
        GroupDoc.read(path)


def test_the_supervisor_refuses_a_damaged_document_in_one_line_and_starts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "g00001.json"
    ran = tmp_path / "ran"
    data = _today(tmp_path, ["touch", str(ran)])
    del data["jobs"][0]["owner"], data["cuda_visible_devices"]
    data["jobs"][1]["argv"] = "touch elsewhere"
    path.write_text(json.dumps(data))
    done = subprocess.run([sys.executable, "-m", "scheduler.executor.supervise", str(path)], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "field 'jobs[1].argv'" in done.stderr and str(path) in done.stderr
    assert not ran.exists() and not (tmp_path / "runs").exists()


def test_a_server_restarted_on_an_older_state_directory_re_adopts_its_running_group(tmp_path: Path) -> None:
    """A group started by a server before the type existed: its row (document as that server stored it) and its
    ``runs/KEY.json`` in that format; the restarted server polls it as running, then stops it as usual."""
    from scheduler.executor.registry import make_executor
    from scheduler.executor.supervise import spawn_supervisor
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.service.jobs.jobspec import job_from_dict
    from scheduler.service.server import ServeConfig, Server
    from scheduler.service.state.store import RUNNING, StateStore

    state = StateStore(tmp_path / "state")
    state.submit(job_from_dict({"name": "a", "command": "sleep 60", "application": "mine", "steps": 1,
                                "batch_size": 4}))
    data = _today(state.dir, ["sleep", "60"])
    del data["jobs"][1], data["jobs"][0]["owner"], data["sharing_why"], data["cuda_visible_devices"]
    data.update(sharing="timeslice", gpu=False, placement={"gpu_type": "t4", "nodes": [0], "gpus": [0]})
    (state.dir / "runs").mkdir(exist_ok=True)
    group_file = state.dir / "runs" / "g00001.json"
    group_file.write_text(json.dumps(data))
    try:
        handle = spawn_supervisor(group_file)
        with state.transaction() as db:
            db.put_group("g00001", "local", {"doc": data, "handle": handle}, ["a"])
            db.update_job("a", state=RUNNING, group_key="g00001", gpu_type="t4", num_gpus=1, batch_size=4,
                          nodes=(0,), gpus=(0,))
        (record,) = state.groups().values()
        assert record.doc.to_dict() == data and record.gpus == {("t4", 0, 0)}
        cluster = cluster_from_dict({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 1, "memory_gb": 16}}})
        server = Server(state, cluster, make_executor("local"), ServeConfig(round_s=0.5, device="cpu",
                                                                            stop_grace_s=2))
        server.acquire()
        wait_until(lambda: (state.dir / "runs" / "g00001.pid").exists(), 60, "the supervisor's pid file", 0.1)
        server.collect()
        assert state.job("a").state == RUNNING and "g00001" in state.groups() and not state.set_aside
        server.stop_groups(("g00001",))
        assert "g00001" not in state.groups() and state.job("a").state != "failed"
    finally:
        kill_groups(state.dir)
