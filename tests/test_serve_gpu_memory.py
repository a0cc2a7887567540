"""GPU: a member of a group under MPS is held to its memory limit and fails alone past it; its partner completes.

Real thresholds: the MPS client limit (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, set by the group's supervisor beside
its private daemon) lets a client allocate below its limit and refuses it above, whatever the client's own
allocator does; and a ``colocate serve`` pair in which one job needs ~25 GB but declared 2 GB ends with that job's
``oom`` (its 2.7 GiB limit in force) while its partner completes without a restart. Skipped without CUDA or MPS.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from scheduler.model.colocation import ColocationTable
from scheduler.service.jobs.jobspec import job_from_dict
from tests.serve_helpers import kill_groups

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(shutil.which("nvidia-cuda-mps-control") is None,
                                                  reason="MPS control binary not installed")]
GIB = 2**30
ALLOCATE = ("import json, sys, torch\n"
            "try:\n"
            "    x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device='cuda'); torch.cuda.synchronize()\n"
            "    ok = True\n"
            "except Exception as err:\n"
            "    ok = str(err)[:200]\n"
            "json.dump({'ok': ok}, open(sys.argv[2], 'w'))\n")


def _wait(doc: dict, handle: dict, timeout_s: float = 180.0) -> None:
    from scheduler.executor.group_doc import GroupDoc
    from scheduler.executor.supervise import supervisor_alive

    deadline = time.monotonic() + timeout_s
    while supervisor_alive(GroupDoc.from_dict(doc), handle) and time.monotonic() < deadline:
        time.sleep(0.5)


def test_the_mps_client_limit_refuses_an_allocation_past_it_and_allows_one_below(tmp_path: Path) -> None:
    """Neither client caps its own allocator: the limit the supervisor set for the MPS client is what holds."""
    import sys

    from profiler.gpu.devices import resolve_device
    from scheduler.executor.supervise import spawn_supervisor

    target = resolve_device("cuda")
    runs = tmp_path / "runs"
    runs.mkdir()
    jobs = []
    for name, size in (("below", 3 * GIB), ("past", 5 * GIB)):
        result = tmp_path / f"{name}.json"
        jobs.append({"name": name, "argv": [sys.executable, "-c", ALLOCATE, str(size), str(result)], "env": {},
                     "dir": str(tmp_path / "jobs" / name), "memory_limit_bytes": 4 * GIB})
    doc = {"key": "g00001", "sharing": "mps", "cuda_visible_devices": target.uuid or target.physical, "grace_s": 10,
           "pid_file": str(runs / "g00001.pid"), "jobs": jobs}
    (runs / "g00001.json").write_text(json.dumps(doc))
    _wait(doc, spawn_supervisor(runs / "g00001.json"))
    assert json.loads((tmp_path / "below.json").read_text())["ok"] is True  # 3 GiB under a 4 GiB limit
    assert json.loads((tmp_path / "past.json").read_text())["ok"] is not True  # 5 GiB: refused in that client alone


def test_a_member_past_its_limit_fails_alone_and_its_partner_completes(tmp_path: Path) -> None:
    from profiler.gpu.devices import resolve_device
    from scheduler.executor.registry import make_executor
    from scheduler.model.cluster import cluster_from_dict
    from scheduler.service.config import ServeConfig
    from scheduler.service.server import Server
    from scheduler.service.state.store import StateStore

    target = resolve_device("cuda")
    memory = round((target.memory_total_mib or 81559) / 1024, 1)
    cluster = cluster_from_dict({"gpu_types": {"g": {"nodes": 1, "gpus_per_node": 1, "memory_gb": memory}}})
    pays = ColocationTable.from_rows([("g", "resnet18", "resnet50", 0.7, 0.7)])  # so the two are packed at once
    state = StateStore(tmp_path / "state")
    server = Server(state, cluster, make_executor("local"), ServeConfig(round_s=2.0, device="cuda", sharing="mps"),
                    colocation=pays)
    server.acquire()
    try:
        state.submit(job_from_dict({"name": "partner", "model": "resnet18", "batch_size": 64, "steps": 1500,
                                    "image_size": 224}))
        state.submit(job_from_dict({"name": "hog", "model": "resnet50", "batch_size": 256, "steps": 60,
                                    "image_size": 224, "memory_gb": 2}))
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not (state.job("partner").state == "completed"
                                                   and state.job("hog").state in ("completed", "failed")):
            server.round()
            end = time.monotonic()
            while time.monotonic() - end < server.config.round_s:
                server.between_rounds()
                time.sleep(0.2)
        ooms = [e["detail"] for e in state.events("hog") if e["kind"] == "oom"]
        assert ooms and "over its 2.70 GiB limit beside partner" in ooms[0]
        partner = state.job("partner")
        assert partner.state == "completed" and partner.crashes == 0
        assert not [e for e in state.events("partner") if e["kind"] in ("crashed", "oom")]
        first_group = next(e["detail"] for e in state.events("partner") if e["kind"] == "started")
        assert "with hog" in first_group
    finally:
        kill_groups(state.dir)
