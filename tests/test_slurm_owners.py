"""``colocate serve --backend slurm --users multi`` (root): each group's batch job is submitted under its owner's
uid, so Slurm's record names the owner (``squeue -o %u``, ``scontrol show job`` UserId) and the batch job — its
supervisor, hence its jobs — runs with the owner's uid and gid (``/proc/PID/status``), in the owner's job
directory, with the owner's group file and output file; a group of two owners is refused (one batch job, one uid).

The supervisor here is a stand-in ``sh`` script (the executor's ``python``): the test user cannot run root's
Python (CI's lives in a 0700 directory), and what is checked is who Slurm runs the batch job as.
"""

from __future__ import annotations

import os
import stat
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from scheduler.executor.group_doc import GroupDoc
from scheduler.executor.plan import GpuGroup, JobLaunch
from scheduler.executor.slurm.live import SlurmExecutor, owner_submission
from scheduler.executor.slurm.settings import slurm_settings
from tests.unix_users import shared_dir, unix_users

STUB = """#!/bin/sh
echo $$ > supervisor.pid
cat "$3" > /dev/null && echo yes > group-file-readable
echo "$HOME $USER" > whoami
touch started
sleep 300
"""


def _doc(state: Path, owners: dict[str, Any]) -> GroupDoc:
    return GroupDoc.from_dict({"key": "g00001", "sharing": "timeslice", "gpu": False, "grace_s": 2,
            "pid_file": str(state / "runs" / "g00001.pid"),
            "jobs": [{"name": name, "dir": str(state / "jobs" / name), "argv": ["/bin/sh", "-c", "sleep 1"],
                      "env": {}, "memory_limit_bytes": None, **({"owner": o.to_dict()} if o else {})}
                     for name, o in owners.items()]})


def _group(names: list[str]) -> GpuGroup:
    jobs = tuple(JobLaunch(n, "t4", 1, 4, None, command="sleep 1") for n in names)
    return GpuGroup(1, "t4", (0,), (0,), jobs, "timeslice")


def test_a_group_of_two_owners_is_refused() -> None:
    from common.owners import Owner

    one, two = Owner(1001, 1001, "a", (1001,)), Owner(1002, 1002, "b", (1002,))
    with pytest.raises(RuntimeError, match="a Slurm job runs as one user"):
        owner_submission(_doc(Path("/nonexistent"), {"x": one, "y": two}))
    owner, doc = owner_submission(_doc(Path("/s"), {"x": one}))
    assert owner == one and doc.pid_record is False
    assert doc.jobs[0].owner is None and doc.jobs[0].env["USER"] == "a"
    assert owner_submission(_doc(Path("/s"), {"x": None})) == (None, _doc(Path("/s"), {"x": None}))


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_batch_job_is_the_owners(slurm: Any) -> None:
    with unix_users("alice") as users, shared_dir() as base:
        alice = users["alice"]
        stub = base / "python"
        stub.write_text(STUB)
        stub.chmod(0o755)
        state = base / "state"
        (state / "runs").mkdir(parents=True)
        state.chmod(0o711)
        doc = _doc(state, {"a": alice})
        executor = SlurmExecutor(slurm_settings({"gpu_types": {"t4": {"partition": "t4"}}}, ("t4",)),
                                 instance=uuid.uuid4().hex[:8], python=str(stub))
        handle = executor.start(_group(["a"]), doc)
        job_dir = state / "jobs" / "a"
        try:
            deadline = time.monotonic() + 120
            while not (job_dir / "started").exists():
                out = state / "runs" / "g00001.slurm.out"
                assert time.monotonic() < deadline, (out.read_text() if out.exists() else "") + slurm.logs()
                time.sleep(0.2)
            record = slurm.job(handle["job_id"])
            assert record["UserId"] == f"{alice.name}({alice.uid})"
            assert record["GroupId"].endswith(f"({alice.gid})")
            listed = slurm.run("squeue", "-h", "-j", handle["job_id"], "-o", "%u").stdout.split()
            assert listed == [alice.name]
            pid = int((job_dir / "supervisor.pid").read_text())
            status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
            assert status["Uid"].split() == [str(alice.uid)] * 4
            assert status["Gid"].split() == [str(alice.gid)] * 4
            assert (job_dir / "group-file-readable").read_text().strip() == "yes"
            st = job_dir.stat()
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (alice.uid, 0o700)
            assert (state / "runs" / "g00001.slurm.out").stat().st_uid == alice.uid
            poll = executor.poll(handle, doc)
            assert poll is not None and poll.alive  # root's server sees its owner's job (no squeue --me)
        finally:
            executor.release(handle, doc)
            os.system(f"pkill -u {alice.uid} 2>/dev/null")  # noqa: S605  # only the test user's processes
