"""Hostile job files and state directories through the real CLI (``submit``, ``jobs``, ``cancel``, ``learned``,
``state check``): each ends in success or one ``error:`` line naming the file — never a traceback, never a
file created by a read-only command, never a change to a database that is not ours. Whatever ``submit``
accepts, the server can name, fill in and build a group for (the property of :func:`test_job_file`)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given

from scheduler.service.jobs.jobspec import spec_from_row
from tests.test_fuzz_inputs import BOMB, FUZZ, OPS, check, mutate, run_cli, snapshot, write

JOB = b"""name: fuzz
command: "python train.py --bs {batch_size} --gpus {gpus} --job {job}"
application: mine
steps: 100
batch_size: 8
min_batch_size: 4
max_batch_size: 16
min_gpus: 1
max_gpus: 2
adaptive: true
gpu_types: [t4]
max_retries: 1
"""
CLUSTER = "gpu_types: {t4: {nodes: 1, gpus_per_node: 2, memory_gb: 16}}\n"


def _server_builds(state: Path, name: str) -> None:
    """What the server does with a stored job at its largest: validate the row, build its group and document."""
    from scheduler.service.config import ServeConfig
    from scheduler.service.groups import build_group, group_document
    from scheduler.service.rounds import Slot
    from scheduler.service.state.store import StateStore

    store = StateStore(state, create=False, readonly=True)
    row = store.job(name)
    assert row is not None and not row.invalid, row
    spec = spec_from_row(name, _stored_spec(state, name), source="state.db")
    gpus = spec.max_gpus if spec.adaptive and spec.max_gpus else spec.min_gpus
    batch = (spec.max_batch_size or spec.batch_size) if spec.adaptive else spec.batch_size
    slot = Slot(name, (spec.gpu_types or ("t4",))[0], min(gpus, 2), batch, (), (0,), tuple(range(min(gpus, 2))))
    group = build_group((slot,), {name: row}, ServeConfig(device="cpu"))
    group_document("g00001", group, {name: row}, ServeConfig(device="cpu"), state)


def _stored_spec(state: Path, name: str) -> str:
    with sqlite3.connect(state / "state.db") as conn:
        return conn.execute("SELECT spec FROM jobs WHERE name = ?", (name,)).fetchone()[0]


@FUZZ
@given(ops=OPS)
def test_job_file(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    work = tmp_path_factory.mktemp("job")
    job = write(work / "fuzz.yaml", mutate(JOB, ops))
    cluster = write(work / "cluster.yaml", CLUSTER)
    state = work / "state"
    code, out, err = run_cli("submit", str(job), "--state", str(state), "--cluster", str(cluster))
    check((code, out, err), job, cluster)
    if code == 0:
        _server_builds(state, out.strip())
    else:
        assert not state.exists()  # a refused job creates no state
    assert not (work / "PWNED").exists()


HOSTILE_JOBS = {
    "name-dotdot": {"name": ".."}, "name-dash": {"name": "-rf"}, "name-slash": {"name": "a/b"},
    "batch-huge": {"batch_size": 1_000_000_000_000}, "format-type": {"command": "run {job:d}"},
    "format-width": {"command": "run {batch_size:>2000000000}"}, "format-nested": {"command": "{job:{batch_size}}"},
    "attribute": {"command": "{job.__class__}"}, "steps-huge": {"steps": 1e30}, "max-gpus-huge": {"max_gpus": 1e12},
    "image-huge": {"image_size": 1e9}, "retries-huge": {"max_retries": 1e18}, "gpus-million": {"min_gpus": 1e6},
    "command-long": {"command": "x" * 5000}, "unknown-key": {"colour": "red"}, "nan": {"steps": float("nan")},
    "model-unknown": {"command": None, "application": None, "model": "resnet1000"},
}


@pytest.mark.parametrize("case", sorted(HOSTILE_JOBS))
def test_hostile_job_files_are_refused_by_submit(tmp_path: Path, case: str) -> None:
    data = {**yaml.safe_load(JOB), **HOSTILE_JOBS[case]}
    job = write(tmp_path / "job.yaml", yaml.safe_dump({k: v for k, v in data.items() if v is not None}))
    code, _, err = run_cli("submit", str(job), "--state", str(tmp_path / "state"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(job) in err, err
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("text", [BOMB, "a: " + "[" * 3000 + "]" * 3000, "name: a\nname: b\n"])
def test_bombs_nesting_and_duplicates_are_refused_quickly(tmp_path: Path, text: str) -> None:
    job = write(tmp_path / "job.yaml", text)
    began = time.perf_counter()
    code, _, err = run_cli("submit", str(job), "--state", str(tmp_path / "state"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(job) in err, err
    assert time.perf_counter() - began < 10  # the bomb took minutes and 11.5 GB before


def test_latin1_job_file_is_refused(tmp_path: Path) -> None:
    job = write(tmp_path / "job.yaml", "name: caf\xe9\nmodel: tiny_cnn\n".encode("latin-1"))
    code, _, err = run_cli("submit", str(job), "--state", str(tmp_path / "state"))
    assert code == 2 and "UTF-8" in err and str(job) in err


@pytest.mark.parametrize("change, reason", [({"gpu_types": ["v100"]}, "v100"),
                                            ({"min_gpus": 64, "max_gpus": 64}, "needs 64 GPUs")])
def test_infeasible_jobs_are_refused_with_the_reason(tmp_path: Path, change: dict, reason: str) -> None:
    cluster = write(tmp_path / "cluster.yaml", CLUSTER)
    data = {**yaml.safe_load(JOB), **change}
    job = write(tmp_path / "job.yaml", yaml.safe_dump(data))
    for extra in (["--cluster", str(cluster)], []):  # given, or the one a server recorded
        if not extra:
            from scheduler.model.cluster import load_cluster
            from scheduler.service.admission import record_cluster
            from scheduler.service.state.store import StateStore

            record_cluster(StateStore(tmp_path / "state"), load_cluster(cluster))
        code, _, err = run_cli("submit", str(job), "--state", str(tmp_path / "state"), *extra)
        assert code == 2 and reason in err and len(err.strip().splitlines()) == 1, err


# -- state directories --------------------------------------------------------------------------------------
def _damage(state: Path, kind: str) -> None:
    """A state directory with one job submitted, then damaged in one way."""
    job = write(state.parent / "a.yaml", JOB.replace(b"name: fuzz", b"name: a"))
    assert run_cli("submit", str(job), "--state", str(state))[0] == 0
    db = state / "state.db"
    if kind == "garbage":
        db.write_bytes(b"this is not a database" * 100)
    elif kind == "truncated":
        with sqlite3.connect(db) as conn:  # fold the WAL in, then cut the file
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        data = db.read_bytes()
        for side in (state / "state.db-wal", state / "state.db-shm"):
            side.unlink(missing_ok=True)
        db.write_bytes(data[: len(data) // 2])
    elif kind == "directory":
        db.unlink()
        db.mkdir()
    elif kind == "foreign":
        db.unlink()
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE photos (id INTEGER)")
    elif kind == "version":
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")


COMMANDS = {"submit": ["submit", "{job}"], "jobs": ["jobs"], "jobs-json": ["jobs", "--json"], "cancel": ["cancel", "a"],
            "learned": ["learned"], "check": ["state", "check"]}


@pytest.mark.parametrize("kind", ["garbage", "truncated", "directory", "foreign", "version"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_damaged_state_databases_are_one_line_errors(tmp_path: Path, kind: str, command: str) -> None:
    state = tmp_path / "state"
    _damage(state, kind)
    before = (state / "state.db").read_bytes() if kind == "foreign" else None
    job = write(tmp_path / "b.yaml", JOB.replace(b"name: fuzz", b"name: b"))
    args = [a.replace("{job}", str(job)) for a in COMMANDS[command]]
    code, _, err = run_cli(*args, "--state", str(state))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "state.db" in err, err
    if before is not None:
        assert (state / "state.db").read_bytes() == before  # never a table added to another program's file


def test_a_row_with_an_unknown_key_is_shown_not_a_traceback(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _damage(state, "none")
    with sqlite3.connect(state / "state.db") as conn:
        conn.execute("""UPDATE jobs SET spec = json_set(spec, '$.colour', 'red')""")
    for command in (["jobs"], ["jobs", "--json"], ["learned"], ["cancel", "a"]):
        check(run_cli(*command, "--state", str(state)), state)
    code, out, _ = run_cli("state", "check", "--state", str(state))
    assert code == 1 and "colour" in out


@pytest.mark.parametrize("command", [["jobs"], ["jobs", "--json"], ["learned"], ["cancel", "x"], ["state", "check"]])
def test_read_only_commands_create_nothing(tmp_path: Path, command: list[str]) -> None:
    state = tmp_path / "state"
    state.mkdir()
    code, out, _ = run_cli(*command, "--state", str(state))
    assert snapshot(tmp_path) == {state}
    if command == ["jobs"]:  # an empty table says why it is empty
        assert code == 0 and "has no state.db yet" in " ".join(out.split()), out


@pytest.mark.parametrize("where", ["state.db", "x.csv", "sub/x.csv"])
def test_learned_out_refuses_the_state_directory(tmp_path: Path, where: str) -> None:
    state = tmp_path / "state"
    _damage(state, "none")
    before = (state / "state.db").read_bytes()
    code, _, err = run_cli("learned", "--state", str(state), "--out", str(state / where))
    assert code == 2 and "--out" in err and (state / "state.db").read_bytes() == before
    assert not (state / where).exists() or where == "state.db"


@pytest.mark.parametrize("bad", ["file", "under-file"])
def test_state_path_that_is_a_file(tmp_path: Path, bad: str) -> None:
    target = write(tmp_path / "f", "x") if bad == "file" else write(tmp_path / "f", "x") / "sub"
    job = write(tmp_path / "a.yaml", JOB)
    for command in (["submit", str(job)], ["jobs"], ["cancel", "a"]):
        code, _, err = run_cli(*command, "--state", str(target))
        assert code == 2 and "--state" in err and len(err.strip().splitlines()) == 1, err


def test_a_held_lock_is_waited_for_a_bounded_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    _damage(state, "none")
    monkeypatch.setenv("COLOCATE_STATE_LOCK_WAIT_S", "0.5")
    holder = sqlite3.connect(state / "state.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        job = write(tmp_path / "b.yaml", JOB.replace(b"name: fuzz", b"name: b"))
        began = time.monotonic()
        code, _, err = run_cli("submit", str(job), "--state", str(state))
        assert code == 2 and "locked" in err and "COLOCATE_STATE_LOCK_WAIT_S" in err, err
        assert time.monotonic() - began < 30
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert run_cli("submit", str(job), "--state", str(state))[0] == 0  # free again: it goes in


# -- import-pairs -------------------------------------------------------------------------------------------
PAIRS = b"""job_a,job_b,gpu_type,time_a,time_b,speed_a,speed_b
resnet18@32,vgg11@32,v100,0.05,0.08,0.7,0.6
resnet18@32,resnet50@16,v100,0.05,0.2,0.8,0.5
"""


@FUZZ
@given(ops=OPS)
def test_pair_table(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    work = tmp_path_factory.mktemp("pairs")
    table = write(work / "pairs.csv", mutate(PAIRS, ops))
    check(run_cli("import-pairs", str(table), "--out", str(work / "out"), "--no-matrices"), table, "--")


@pytest.mark.parametrize("row, line", [("resnet18@32,vgg11@32,v100,0.05,0.08,0.7,0.6,extra", 2),
                                       ("resnet18@32,vgg11@32,v100", 2)])
def test_ragged_rows_are_named_by_line(tmp_path: Path, row: str, line: int) -> None:
    header = PAIRS.splitlines()[0].decode()
    table = write(tmp_path / "pairs.csv", f"{header}\n{row}\n{PAIRS.decode().splitlines()[1]}\n")
    code, _, err = run_cli("import-pairs", str(table), "--out", str(tmp_path / "out"))
    assert code == 2 and f"line {line}" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_an_existing_results_directory_needs_force_which_clears_it(tmp_path: Path) -> None:
    table = write(tmp_path / "pairs.csv", PAIRS)
    out = tmp_path / "out"
    assert run_cli("import-pairs", str(table), "--out", str(out))[0] == 0
    stale = write(out / "matrices" / "stale.csv", "old")
    meta = (out / "meta.json").read_bytes()
    code, _, err = run_cli("import-pairs", str(table), "--out", str(out))
    assert code == 2 and "--force" in err and stale.exists() and (out / "meta.json").read_bytes() == meta
    assert run_cli("import-pairs", str(table), "--out", str(out), "--force")[0] == 0
    assert not stale.exists() and (out / "runs.parquet").exists()


@pytest.mark.parametrize("kind", ["other-directory", "file", "under-file", "state"])
def test_import_out_that_is_not_a_results_directory(tmp_path: Path, kind: str) -> None:
    table = write(tmp_path / "pairs.csv", PAIRS)
    out = {"other-directory": tmp_path / "home", "file": table, "under-file": table / "x",
           "state": tmp_path / "state" / "results"}[kind]
    if kind == "other-directory":
        keep = write(out.mkdir() or out / "thesis.tex", "precious")
    if kind == "state":
        _damage(tmp_path / "state", "none")
    code, _, err = run_cli("import-pairs", str(table), "--out", str(out), "--force")
    assert code == 2 and len(err.strip().splitlines()) == 1 and ("--out" in err or "--force" in err), err
    if kind == "other-directory":
        assert keep.read_text() == "precious"  # --force clears only an earlier import


def test_matrices_for_too_many_job_types_are_refused_with_the_reason(tmp_path: Path) -> None:
    from colocate.analysis.pairs_import import MAX_MATRIX_JOB_TYPES

    header = PAIRS.splitlines()[0].decode()
    rows = [f"m{i}@8,m{i + 1}@8,v100,0.1,0.1,0.5,0.5" for i in range(MAX_MATRIX_JOB_TYPES)]
    table = write(tmp_path / "pairs.csv", "\n".join([header, *rows]) + "\n")
    code, _, err = run_cli("import-pairs", str(table), "--out", str(tmp_path / "out"))
    assert code == 2 and "--no-matrices" in err and str(MAX_MATRIX_JOB_TYPES) in err, err
    assert run_cli("import-pairs", str(table), "--out", str(tmp_path / "out"), "--no-matrices")[0] == 0


# -- leftovers of the first round ---------------------------------------------------------------------------
def test_matrix_out_under_a_file(tmp_path: Path) -> None:
    table = write(tmp_path / "pairs.csv", PAIRS)
    assert run_cli("import-pairs", str(table), "--out", str(tmp_path / "res"), "--no-matrices")[0] == 0
    code, _, err = run_cli("matrix", str(tmp_path / "res"), "--out", str(table / "m"))
    assert code == 2 and "--out" in err and "under the file" in err and len(err.strip().splitlines()) == 1, err


def test_a_device_that_does_not_exist_is_refused_by_a_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    spec = write(tmp_path / "spec.yaml", "name: d\nmodels: [tiny_cnn]\nbatch_sizes: [4]\ndevice: cuda:99\n")
    code, _, err = run_cli("profile", str(spec), "--dry-run", "--out", str(tmp_path / "out"))
    assert code == 2 and "cuda:99" in err and "cpu, cuda:0" in err, err


def test_a_header_only_jobs_csv_is_refused(tmp_path: Path) -> None:
    from tests.test_fuzz_inputs import EXAMPLES

    jobs = write(tmp_path / "jobs.csv", (EXAMPLES / "jobs-small.csv").read_text().splitlines()[0] + "\n")
    code, _, err = run_cli("schedule", "--cluster", str(EXAMPLES / "cluster-small.yaml"), "--jobs", str(jobs))
    assert code == 2 and "header only" in err and str(jobs) in err, err


R18, R50 = "('ResNet-18 (batch size 64)', 1)", "('ResNet-50 (batch size 32)', 1)"


@pytest.mark.parametrize("data", [
    {"v100": {R18: {"null": 10.0, "('Unknown (batch size 1)', 1)": [5.0, 3.0]}, R50: {"null": 6.0}}},
    {"v100": {R18: {"null": 10.0, "(garbage": [5.0, 3.0]}, R50: {"null": 6.0}}},
    {"v100": {R18: {"null": 10.0}, "ResNet-18 (batch size 64)": {"null": 9.0}, R50: {"null": 6.0}}},
], ids=["unknown-partner", "broken-partner-key", "one-job-twice"])
def test_malformed_gavel_files_are_one_line_errors(tmp_path: Path, data: dict) -> None:
    import json

    source = write(tmp_path / "gavel.json", json.dumps(data))
    code, _, err = run_cli("import-gavel", str(source), "--out", str(tmp_path / "out"))
    assert code == 2 and str(source) in err and len(err.strip().splitlines()) == 1, err
