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
from scheduler.service.jobs.jobspec import job_from_dict
from scheduler.service.state import lock as server_lock
from scheduler.service.state.store import StateStore
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


# -- one-line errors instead of tracebacks or silent acceptance; nothing written where they refuse ----------------
GAVEL = Path(__file__).resolve().parents[1] / "scheduler" / "data" / "gavel_throughputs_sf1.json"


def _gavel_with_worker(tmp_path: Path, worker: str) -> Path:
    import json

    data = json.loads(GAVEL.read_text())
    data[worker] = data.pop("v100")
    path = tmp_path / "gavel.json"
    path.write_text(json.dumps(data))
    return path


def _results(tmp_path: Path) -> Path:
    """A small results directory of imported pairs (one pair with a job named like a spreadsheet formula)."""
    table = tmp_path / "pairs.csv"
    table.write_text("job_a,job_b,time_a,time_b,colocated_time_a,colocated_time_b\n"
                     "\"=cmd|' /C calc'!A0\",vgg,0.1,0.2,0.15,0.3\n")
    code, _, err = run_cli("import-pairs", str(table), "--out", str(tmp_path / "res"), "--gpu-type", "t4",
                           "--no-matrices")
    assert code == 0, err
    return tmp_path / "res"


def _allocation(tmp_path: Path) -> list[str]:
    import json

    (tmp_path / "alloc.json").write_text(json.dumps({"allocations": [
        {"job": "a", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": None, "node": 0, "gpus": [0]}]}))
    (tmp_path / "jobs.csv").write_text("name,application\na,tiny_cnn\n")
    return ["launch", str(tmp_path / "alloc.json"), "--jobs", str(tmp_path / "jobs.csv")]


def _one_line(code: int, err: str, *expected: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert all(e in " ".join(lines[0].split()) for e in expected), (expected, lines[0])


CASES = {  # case -> (make the arguments under tmp_path, what the one line says)
    "compare-gpus-worker-type-with-slash": (lambda t: ["compare-gpus", "--gavel", str(_gavel_with_worker(t, "a/b")),
                                                       "--types", "a/b,k80", "--out", str(t / "out")],
                                            "'a/b' is not a valid worker type"),
    "compare-gpus-worker-type-300-chars": (lambda t: ["compare-gpus", "--gavel", str(_gavel_with_worker(t, "x" * 300)),
                                                      "--types", "x,k80", "--out", str(t / "out")],
                                           "is not a valid worker type"),
    "compare-gpus-gavel-twice": (lambda t: ["compare-gpus", "--gavel", str(GAVEL), "--gavel", str(GAVEL), "--types",
                                            "v100,k80", "--out", str(t / "out")], "given twice"),
    "learned-out-under-a-file": (lambda t: ["learned", "--state", str(t / "s"), "--out", str(t / "file" / "x.csv")],
                                 "lies under the file"),
    "learned-out-a-directory": (lambda t: ["learned", "--state", str(t / "s"), "--out", str(t / "dir")],
                                "is a directory"),
    "export-pairs-out-under-a-file": (lambda t: ["export-pairs", str(_results(t)), "--out", str(t / "file" / "x.csv")],
                                      "lies under the file"),
    "export-pairs-out-a-directory": (lambda t: ["export-pairs", str(_results(t)), "--out", str(t / "dir")],
                                     "is a directory"),
    "export-pairs-into-a-state-dir": (lambda t: ["export-pairs", str(_results(t)), "--out", str(t / "st" / "x.csv")],
                                      "inside a scheduler state directory"),
    "export-pairs-over-its-runs-csv": (lambda t: ["export-pairs", str(_results(t)), "--out",
                                                  str(t / "res" / "runs.csv")], "own inputs"),
    "launch-emit-a-file": (lambda t: [*_allocation(t), "--emit", "k8s", str(t / "file")], "'--emit': is a file"),
    "launch-emit-under-a-file": (lambda t: [*_allocation(t), "--emit", "slurm", str(t / "file" / "x")],
                                 "lies under the file"),
    "launch-log-dir-under-a-file": (lambda t: [*_allocation(t), "--device", "cpu", "--log-dir", str(t / "file" / "x")],
                                    "'--log-dir': lies under the file"),
    "launch-k8s-empty-image": (lambda t: [*_allocation(t), "--emit", "k8s", str(t / "k8s"), "--image", ""],
                               "'--image': '' is not a container image reference"),
    "launch-k8s-namespace-newline": (lambda t: [*_allocation(t), "--emit", "k8s", str(t / "k8s"), "--namespace",
                                                "a\nb"], "is not a Kubernetes namespace"),
    "import-pairs-quoted-newline": (lambda t: ["import-pairs", str(_text(t / "p.csv", "job_a,job_b,time_a,time_b,"
                                                                        "speed_a,speed_b\n\"res\nnet\",vgg,1,1,1,1\n")),
                                               "--out", str(t / "out"), "--gpu-type", "t4"],
                                    "line break inside a quoted cell"),
    "import-pairs-time-1e-320": (lambda t: ["import-pairs", str(_text(t / "p.csv", "job_a,job_b,time_a,time_b,speed_a,"
                                                                     "speed_b\nresnet,vgg,1e-320,1,1,1\n")),
                                            "--out", str(t / "out"), "--gpu-type", "t4"], "'1e-320' is not a number in"),
    "import-gavel-only-unconsolidated": (lambda t: ["import-gavel", str(_text(t / "g.json", '{"v100_unconsolidated": '
                                                                            '{"(\'ResNet-18 (batch size 16)\', 1)": '
                                                                            '{"null": 1.0}}}')), "--out", str(t / "out")],
                                         "no worker type to import"),
    "import-gavel-all-zero": (lambda t: ["import-gavel", str(_text(t / "g.json", '{"v100": {"(\'ResNet-18 (batch size '
                                                                 '16)\', 1)": {"null": 0.0}}}')), "--out",
                                         str(t / "out"), "--no-matrices"], "no usable measurement"),
    "import-gavel-no-pairs-for-matrices": (lambda t: ["import-gavel", str(_text(t / "g.json", '{"v100": {"(\'ResNet-18 '
                                                                              '(batch size 16)\', 1)": {"null": 2.0}}}')),
                                                      "--out", str(t / "out")], "no pairs to draw matrices of"),
    "submit-unknown-lr-scaling": (lambda t: ["submit", "--state", str(t / "s"), str(_text(
        t / "j.yaml", "name: j\ncommand: 'true'\nsteps: 1\nbatch_size: 4\nlr_scaling: cubic\n"))],
        "j.yaml: field 'lr_scaling': 'cubic' is not a learning-rate scaling (valid: one of adascale, linear, sqrt, "
        "none)"),
    "submit-sexagesimal-steps": (lambda t: ["submit", "--state", str(t / "s"), str(_text(
        t / "j.yaml", "name: j\ncommand: 'true'\nsteps: 1:30\nbatch_size: 4\n"))], "field 'steps': '1:30' is not"),
}


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_refused_command_says_one_line_and_writes_nothing(tmp_path: Path, case: str) -> None:
    make, expected = CASES[case]
    (tmp_path / "file").write_text("a file")
    (tmp_path / "dir").mkdir()
    (tmp_path / "st").mkdir()
    StateStore(tmp_path / "st").close()
    args = make(tmp_path)
    before = snapshot(tmp_path)
    code, _, err = run_cli(*args)
    _one_line(code, err, expected)
    assert snapshot(tmp_path) == before


def test_simulate_with_a_header_only_belief_table_says_so(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    table = _text(tmp_path / "belief.csv", "gpu_type,type_a,type_b,ratio_a,ratio_b\n")
    code, _, err = run_cli("simulate", "--cluster", str(root / "scheduler/data/cluster-default.yaml"), "--workload",
                           str(root / "scheduler/examples/demo-workload.csv"), "--belief", f"table:{table}")
    _one_line(code, err, "has a header but no pair rows")


def test_export_pairs_neutralises_formula_cells_and_import_reads_them_back(tmp_path: Path) -> None:
    results = _results(tmp_path)
    out = tmp_path / "export.csv"
    code, _, err = run_cli("export-pairs", str(results), "--out", str(out))
    assert code == 0, err
    rows = [line for line in out.read_text().splitlines() if not line.startswith("#")]
    cells = [cell for line in rows for cell in line.split(",")]
    assert not any(c[:1] in "=+-@" for c in cells) and any(c.startswith("'=cmd") for c in cells), rows
    code, _, err = run_cli("import-pairs", str(out), "--out", str(tmp_path / "back"), "--no-matrices")
    assert code == 0, err
    assert "=cmd|' /C calc'!A0" in set(pd.read_csv(tmp_path / "back" / "jobs.csv")["job_type"])


def test_yaml_base_60_is_text_not_a_number() -> None:
    from common.safe_load import parse_yaml

    assert parse_yaml("a: 1:30\nb: 190:20:30.15\nc: 90\nd: 1e3", source="x") == {
        "a": "1:30", "b": "190:20:30.15", "c": 90, "d": 1000.0}


def test_yaml_integers_read_as_yaml_1_2_reads_them() -> None:
    """A zero-padded count is decimal (YAML 1.1 would read ``0100`` as octal 64); octal is spelled ``0o``."""
    from common.safe_load import parse_yaml

    assert parse_yaml("a: 0100\nb: 08\nc: -012\nd: 0o17\ne: 0x1F\nf: 1_000\ng: 0\nh: 0o9", source="x") == {
        "a": 100, "b": 8, "c": -12, "d": 15, "e": 31, "f": 1000, "g": 0, "h": "0o9"}


def test_profile_on_cuda_with_a_torch_without_cuda_fails_in_one_line(tmp_path: Path) -> None:
    """Rather than run every cell, fail each and exit 0: one line, status 2, nothing written (planning with
    --dry-run still works)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine's torch can use CUDA")
    spec = _text(tmp_path / "spec.yaml", SPEC.decode().replace("name: fuzz", "name: fuzz\ndevice: cuda"))
    before = snapshot(tmp_path)
    code, _, err = run_cli("profile", str(spec), "--out", str(tmp_path / "out"))
    _one_line(code, err, "field 'device': 'cuda', but this machine's torch", "cannot use CUDA")
    assert snapshot(tmp_path) == before
    code, _, err = run_cli("profile", str(spec), "--out", str(tmp_path / "out"), "--dry-run")
    assert code == 0, err


def test_serve_on_cuda_with_a_torch_without_cuda_fails_in_one_line(tmp_path: Path) -> None:
    """Jobs started here on CUDA would each fail at start (an AttributeError in every log): refused up front, as
    profile does, with nothing written; auto (the CPU here) is accepted."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine's torch can use CUDA")
    cluster = write_cluster(tmp_path / "cluster.yaml", {"t4": 1})
    before = snapshot(tmp_path)
    code, _, err = run_cli("serve", "--cluster", str(cluster), "--state", str(tmp_path / "state"), "--backend",
                           "local", "--device", "cuda", "--max-rounds", "1")
    _one_line(code, err, "field '--device': 'cuda', but this machine's torch", "cannot use CUDA")
    assert snapshot(tmp_path) == before
