"""A refused command changes nothing: each refusal path below compares the state directory (or the output path)
before and after the command — every file's bytes, and the state database by its rows (SQLite's side files
may be touched by a reader without any change of content)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
import yaml

from common.errors import InputError
from scheduler.service import admission
from scheduler.service import lock as server_lock
from scheduler.service.jobspec import job_from_dict
from scheduler.service.store import StateStore
from tests.serve_helpers import write_cluster
from tests.test_fuzz_inputs import SPEC, run_cli


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` with its content's digest; ``state.db`` as its rows."""
    out = {}
    for path in sorted(root.rglob("*")) if root.exists() else ():
        name = str(path.relative_to(root))
        if path.name.startswith("state.db-"):
            continue  # WAL/shared-memory side files: their content is the database's, compared below
        if path.name == "state.db":
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
                out[name] = "\n".join(conn.iterdump())
        elif path.is_file():
            out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[name] = "dir"
    return out


def test_a_second_serve_refused_by_the_lock_changes_nothing(tmp_path: Path) -> None:
    """The first server recorded its 2×t4 cluster; a second one on 8×v100 is refused by the lock before it
    records its own, so submit still refuses the 8-GPU v100 job it could never run."""
    from scheduler.model.cluster import load_cluster
    from scheduler.service.config import ServeConfig
    from scheduler.service.serve import ServeRequest, serve_forever

    state = StateStore(tmp_path / "state")
    admission.record_cluster(state, load_cluster(write_cluster(tmp_path / "t4.yaml", {"t4": 2})))
    state.submit(job_from_dict({"name": "a", "command": "true", "steps": 1, "batch_size": 4}))
    held = server_lock.take(state.dir)  # the first server
    try:
        before = snapshot(state.dir)
        with pytest.raises(InputError, match="another colocate serve runs"):
            serve_forever(ServeRequest(cluster=write_cluster(tmp_path / "v100.yaml", {"v100": 8}), state=state.dir,
                                       backend="local", max_rounds=1, config=ServeConfig(device="cpu", round_s=1.0)))
        assert snapshot(state.dir) == before
        job = tmp_path / "big.yaml"
        job.write_text(yaml.safe_dump({"name": "big", "command": "true", "steps": 1, "batch_size": 4,
                                       "min_gpus": 8, "gpu_types": ["v100"]}))
        code, _, err = run_cli("submit", "--state", str(state.dir), str(job))
        assert code == 2 and "no GPU of type v100" in err, err
    finally:
        held.close()


@pytest.mark.parametrize("exists", [False, True])
def test_submit_refusing_a_job_the_cluster_cannot_run_creates_nothing(tmp_path: Path, exists: bool) -> None:
    state = tmp_path / "state"
    if exists:
        StateStore(state).close()
    job = tmp_path / "big.yaml"
    job.write_text(yaml.safe_dump({"name": "big", "command": "true", "steps": 1, "batch_size": 4, "min_gpus": 8}))
    cluster = write_cluster(tmp_path / "t4.yaml", {"t4": 2})
    before = {k: v for k, v in snapshot(tmp_path).items() if k.startswith("state")}
    code, _, err = run_cli("submit", "--state", str(state), "--cluster", str(cluster), str(job))
    assert code == 2 and "needs 8 GPUs of one type" in err, err
    assert {k: v for k, v in snapshot(tmp_path).items() if k.startswith("state")} == before
    assert state.exists() == exists


def test_profile_dry_run_repairs_no_results_file(tmp_path: Path) -> None:
    from profiler.results.schema import RUN_COLUMNS

    spec = tmp_path / "spec.yaml"
    spec.write_bytes(SPEC)
    out = tmp_path / "res"
    out.mkdir()
    frame = pd.DataFrame([{c: None for c in RUN_COLUMNS} | {"run_id": "x#r0", "status": "ok"}])
    frame.to_parquet(out / "runs.parquet", index=False)
    frame.to_csv(out / "runs.csv", index=False)
    (out / "runs.parquet").write_bytes((out / "runs.parquet").read_bytes()[:50])  # damaged; the CSV is intact
    (out / "only-csv").mkdir()
    frame.to_csv(out / "only-csv" / "runs.csv", index=False)  # a directory written without a Parquet engine
    for directory in (out, out / "only-csv"):
        before = snapshot(out)
        code, stdout, err = run_cli("profile", str(spec), "--out", str(directory), "--dry-run")
        assert code == 0, err
        assert snapshot(out) == before
