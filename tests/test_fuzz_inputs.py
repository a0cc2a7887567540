"""Property-based fuzzing of every reader through the real CLI entry point (``colocate.cli.main``).

Each case starts from a valid input file, mutates it (hostile values, truncation, broken encodings, deep
nesting, alias bombs, duplicate keys, injected newlines and path parts) and runs the command. The property:
the command either succeeds, or exits with status 2 and prints exactly one line that starts with
``error:`` and names the file or option at fault — never a traceback — and nothing is written outside
the directories the command was given. Hypothesis runs derandomized (fixed examples, no example database)
so CI sees the same cases every time.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colocate.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "scheduler" / "examples"
FUZZ = settings(max_examples=25, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Values a careless or hostile user puts into a field.
HOSTILE = [
    "nan", ".nan", "NaN", ".inf", "-.inf", "inf", "Infinity", "-1", "0", "1e12", "1.0e+12", "1e-9", "",
    "x\ntouch PWNED\n#", "a100 --output=/x", "../../x", "/abs", "é", "\u202e", "resnet18@abc", "[]", "{}",
    "null", "true", "'", '"', "*a", "&a", "9" * 40, "-", "..", "a b", "$(touch PWNED)", "`touch PWNED`",
    # numbers beyond a float, beyond Python's 4,300-digit limit, rounding to zero, and YAML no reader can build
    "1" + "0" * 400, "1" + "0" * 5000, "1e400", "-0", "1e-400", '!!int "1e400"', '!!int "12abc"', "0x_", "0b_",
    '!!bool "maybe"',
]
BOMB = ("a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")))


def mutate(seed: bytes, ops: list[tuple[int, int, str]]) -> bytes:
    """Apply (kind, position, value) edits to ``seed``: replace a token, insert, truncate, re-encode."""
    data = seed
    for kind, pos, value in ops:
        text = data.decode("utf-8", "replace")
        at = pos % (len(text) + 1)
        if kind == 0:  # replace the token (run of non-separators) at `at`
            start = at
            while start > 0 and text[start - 1] not in ",:\n{}[] ":
                start -= 1
            end = at
            while end < len(text) and text[end] not in ",:\n{}[] ":
                end += 1
            data = (text[:start] + value + text[end:]).encode()
        elif kind == 1:
            data = (text[:at] + value + text[at:]).encode()
        elif kind == 2:
            data = data[: pos % (len(data) + 1)]
        elif kind == 3:
            data = b"\xef\xbb\xbf" + data
        elif kind == 4:
            data = data[: pos % (len(data) + 1)] + b"\xff\xfe\x80" + data[pos % (len(data) + 1):]
        elif kind == 5:
            data = data + ("\n" + value + ": 1").encode() + (b"\n" + data.splitlines()[0] if data else b"")
    return data


OPS = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10_000), st.sampled_from(HOSTILE)), min_size=1,
               max_size=3)


def run_cli(*args: str) -> tuple[int, str, str]:
    """``colocate ARGS`` in this process through the console-script entry point; (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(sys, "argv", ["colocate", *args]), redirect_stdout(out), redirect_stderr(err):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def snapshot(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def check(result: tuple[int, str, str], *names: object) -> None:
    """Success, or status 2 with one ``error:`` line naming one of ``names`` (files or options)."""
    code, _, err = result
    assert "Traceback" not in err, err
    if code == 0:
        return
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert any(str(n) in lines[0] for n in names), (names, lines[0])


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


SPEC = b"""name: fuzz
models: [tiny_cnn]
batch_sizes: [4, 8]
group_sizes: [1, 2]
repeats: 1
min_window_iters: 2
warmup_iters: 1
run_timeout_s: 60
"""


@FUZZ
@given(ops=OPS)
def test_campaign_spec(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    work = tmp_path_factory.mktemp("spec")
    spec = write(work / "spec.yaml", mutate(SPEC, ops))
    before = snapshot(work)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        result = run_cli("profile", str(spec), "--dry-run")
    finally:
        os.chdir(cwd)
    check(result, spec)
    assert not (work / "PWNED").exists()
    assert snapshot(work) == before  # a dry run writes nothing, anywhere


@pytest.mark.parametrize("name", ["../../escape", "/tmp/escape-abs", "a/b", "x\ntouch PWNED\n#", ".."])
def test_campaign_names_cannot_leave_the_results_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      name: str) -> None:
    monkeypatch.chdir(tmp_path)
    spec = write(tmp_path / "spec.yaml", SPEC.replace(b"name: fuzz", b"name: " + json.dumps(name).encode()))
    code, _, err = run_cli("profile", str(spec))
    assert code == 2 and "field 'name'" in err and len(err.strip().splitlines()) == 1
    assert snapshot(tmp_path) == {tmp_path / "spec.yaml"}
    assert not Path("/tmp/escape-abs").exists()


def schedule_args(work: Path, **files: Path) -> list[str]:
    paths = {"cluster": EXAMPLES / "cluster-small.yaml", "jobs": EXAMPLES / "jobs-small.csv",
             "profiles": EXAMPLES / "profiles-generic.csv", "colocation": EXAMPLES / "colocation-small.csv",
             **files}
    return ["schedule", "--json", "--time-limit", "5", *[a for k, v in paths.items() for a in (f"--{k}", str(v))]]


@FUZZ
@given(which=st.sampled_from(["cluster", "jobs", "profiles", "colocation"]), ops=OPS)
def test_schedule_inputs(tmp_path_factory: pytest.TempPathFactory, which: str, ops: list) -> None:
    work = tmp_path_factory.mktemp("sched")
    seed = {"cluster": "cluster-small.yaml", "jobs": "jobs-small.csv", "profiles": "profiles-generic.csv",
            "colocation": "colocation-small.csv"}[which]
    bad = write(work / seed, mutate((EXAMPLES / seed).read_bytes(), ops))
    result = run_cli(*schedule_args(work, **{which: bad}))
    check(result, bad, EXAMPLES / "jobs-small.csv", "--")
    if result[0] == 0:
        json.loads(result[1])  # real JSON (no NaN)


@pytest.mark.parametrize("option, value", [("--power", "nan"), ("--power", "inf"), ("--restart-cost", "-1"),
                                           ("--min-benefit", "nan"), ("--set", "ilp.mip_gap=nan"),
                                           ("--time-limit", "1e12")])
def test_schedule_options_out_of_range(tmp_path: Path, option: str, value: str) -> None:
    code, _, err = run_cli(*schedule_args(tmp_path), option, value)
    named = f"--set {value.partition('=')[0]}" if option == "--set" else option
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1


WORKLOAD = (EXAMPLES / "demo-workload.csv").read_bytes().splitlines(keepends=True)
SIA = b"".join(WORKLOAD[:4])
GAVEL_TRACE = (b"ResNet-50 (batch size 64)\tpython3 main.py -b 64\t--num_minibatches\t1\t89952\t0.000000\t1\n"
               b"LM (batch size 40)\tpython main.py --batch_size 40\t--steps\t1\t11907\t6.000000\t1\n")
PHILLY = (b"timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-03 10:00:00,600,1,600,c1\n"
          b"2017-10-03 10:05:00,7200,2,14400,c1\n")


@FUZZ
@given(kind=st.sampled_from(["sia", "philly", "gavel"]), ops=OPS)
def test_workload_readers(tmp_path_factory: pytest.TempPathFactory, kind: str, ops: list) -> None:
    """Rejected workloads (Sia, Philly, Gavel trace) fail in ``simulate`` with one line; accepted ones hold
    only bounded values."""
    from common.errors import InputError
    from scheduler.formats.workloads import MAX_WORKLOAD_SECONDS, read_workload

    work = tmp_path_factory.mktemp("wl")
    seed = {"sia": SIA, "philly": PHILLY, "gavel": GAVEL_TRACE}[kind]
    path = write(work / f"w-{kind}.{'trace' if kind == 'gavel' else 'csv'}", mutate(seed, ops))
    try:
        workload = read_workload(path)
    except InputError:
        out = work / "sim"
        check(run_cli("simulate", "--cluster", str(EXAMPLES / "sia-64gpu.yaml"), "--workload", str(path),
                      "--policy", "fifo", "--out", str(out)), path)
        assert not out.exists() or not any(out.iterdir())
        return
    for job in workload.jobs:
        assert 0 <= job.arrival <= MAX_WORKLOAD_SECONDS and 1 <= job.num_gpus <= 100_000
        assert job.duration_s is None or 0 < job.duration_s <= MAX_WORKLOAD_SECONDS


@pytest.mark.parametrize("option, value", [("--round-s", "1e-9"), ("--round-s", "nan"), ("--seed", "-1"),
                                           ("--set", "sim.colocation_strength=inf")])
def test_simulate_options_out_of_range(tmp_path: Path, option: str, value: str) -> None:
    path = write(tmp_path / "w.csv", SIA)
    out = tmp_path / "out"
    code, _, err = run_cli("simulate", "--cluster", str(EXAMPLES / "sia-64gpu.yaml"), "--workload", str(path),
                           "--policy", "fifo", "--out", str(out), option, value)
    named = f"--set {value.partition('=')[0]}" if option == "--set" else option
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1
    assert not out.exists()  # refused before anything is written


def test_simulate_with_a_bad_workload_leaves_no_output_directory(tmp_path: Path) -> None:
    path = write(tmp_path / "w.csv", b"name,time,application,num_replicas,batch_size\na,0,cifar10,two,64\n")
    out = tmp_path / "out"
    code, _, err = run_cli("simulate", "--cluster", str(EXAMPLES / "sia-64gpu.yaml"), "--workload", str(path),
                           "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and not out.exists()


def test_the_old_round_flag_is_gone_and_the_error_points_at_round_s(tmp_path: Path, monkeypatch) -> None:
    """Its release as a hidden alias has passed: refused in one line that offers --round-s, which works. On a
    cluster of the bundled profiles' GPU types, so that it needs no shared data (CI has none)."""
    monkeypatch.setenv("COLOCATE_SHARED_DATA", str(tmp_path / "absent"))
    path = write(tmp_path / "w.csv", SIA)
    cluster = write(tmp_path / "c.yaml", b"name: tv\ngpu_types:\n  t4: {nodes: 1, gpus_per_node: 4, memory_gb: 16}\n"
                                         b"  v100: {nodes: 1, gpus_per_node: 4, memory_gb: 32}\n")
    code, out, err = run_cli("simulate", "--cluster", str(cluster), "--workload", str(path),
                             "--policy", "fifo", "--round", "30", "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'--round'" in err and "--round-s" in err, err
    code, out, err = run_cli("simulate", "--cluster", str(cluster), "--workload", str(path),
                             "--policy", "fifo", "--round-s", "30", "--json")
    assert code == 0 and json.loads(out)["completed"] >= 1, err


ALLOCATION = json.dumps({"allocations": [
    {"job": "a", "gpu_type": "a100", "num_gpus": 1, "batch_size": 8, "partner": "b", "node": 0, "gpus": [1],
     "application": "tiny_cnn"},
    {"job": "b", "gpu_type": "a100", "num_gpus": 1, "batch_size": 8, "partner": "a", "node": 0, "gpus": [1],
     "application": "tiny_cnn"},
    {"job": "c", "gpu_type": "t4", "num_gpus": 1, "batch_size": 4, "partner": None, "node": 1, "gpus": [0],
     "application": "tiny_cnn"}], "unallocated": []}).encode()


@FUZZ
@given(ops=OPS)
def test_allocation_json(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    work = tmp_path_factory.mktemp("alloc")
    alloc = write(work / "alloc.json", mutate(ALLOCATION, ops))
    out = work / "emit"
    check(run_cli("launch", str(alloc), "--emit", "slurm", str(out), "--cluster",
                  str(EXAMPLES / "cluster-small.yaml")), alloc)
    assert {p.parent for p in work.rglob("*") if p.is_file()} <= {work, out}


def fake_tools(bin_dir: Path, log: Path) -> dict[str, str]:
    """``sbatch`` and the job's Python replaced by scripts that record their arguments and do nothing else."""
    bin_dir.mkdir()
    for tool in ("sbatch", "python-recorder"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\nprintf "%s\\n" "{tool} $*" >> {log}\n')
        script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "COLOCATE_PYTHON": str(bin_dir / "python-recorder")}


@settings(max_examples=15, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.one_of(st.sampled_from(HOSTILE), st.text(min_size=1, max_size=20)),
       gpu_type=st.one_of(st.just("a100"), st.sampled_from(HOSTILE)))
def test_emitted_slurm_scripts_run_nothing_extra(tmp_path_factory: pytest.TempPathFactory, name: str,
                                                 gpu_type: str) -> None:
    """Hostile job names and GPU types are refused, or the script parses and runs exactly the jobs."""
    work = tmp_path_factory.mktemp("slurm")
    doc = {"allocations": [
        {"job": name, "gpu_type": gpu_type, "num_gpus": 1, "batch_size": 8, "partner": "other", "node": 0,
         "gpus": [0], "application": "tiny_cnn"},
        {"job": "other", "gpu_type": gpu_type, "num_gpus": 1, "batch_size": 8, "partner": name, "node": 0,
         "gpus": [0], "application": "tiny_cnn"}]}
    alloc = write(work / "alloc.json", json.dumps(doc))
    out = work / "emit"
    result = run_cli("launch", str(alloc), "--emit", "slurm", str(out))
    check(result, alloc)
    if result[0] != 0:
        assert not out.exists()
        return
    log = work / "calls.log"
    env = fake_tools(work / "bin", log)
    scripts = sorted(out.glob("*.sbatch"))
    for script in [*scripts, out / "submit_all.sh"]:
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    subprocess.run(["bash", str(out / "submit_all.sh")], env=env, cwd=work, check=True, capture_output=True)
    for script in scripts:
        subprocess.run(["bash", str(script)], env={**env, "COLOCATE_LOG_DIR": str(work / "logs")}, cwd=work,
                       capture_output=True, timeout=60)
    calls = log.read_text().splitlines()
    assert sorted(c for c in calls if c.startswith("sbatch")) == [f"sbatch {s.name}" for s in scripts]
    assert len([c for c in calls if c.startswith("python-recorder")]) == 2
    assert not (work / "PWNED").exists() and not Path("/x").exists()


GAVEL = json.dumps({"v100": {
    "('ResNet-18 (batch size 64)', 1)": {"null": 10.0, "('ResNet-18 (batch size 64)', 1)": [6.0, 6.0]}}}).encode()


@FUZZ
@given(ops=OPS)
def test_gavel_json(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    work = tmp_path_factory.mktemp("gavel")
    path = write(work / "tput.json", mutate(GAVEL, ops))
    out = work / "imported"
    check(run_cli("import-gavel", str(path), "--out", str(out), "--no-matrices"), path)
    assert {p for p in work.iterdir()} <= {path, out}


@pytest.mark.parametrize("damage", ["truncate-runs", "meta-list", "meta-latin1", "meta-nested", "meta-nan"])
def test_damaged_results_directories(tmp_path: Path, damage: str) -> None:
    """A campaign directory with damaged files: recovered from the CSV copy, or one line saying what to do."""
    import pandas as pd

    from profiler.results.schema import RUN_COLUMNS

    spec = write(tmp_path / "spec.yaml", SPEC)
    out = tmp_path / "res"
    out.mkdir()
    frame = pd.DataFrame([{c: None for c in RUN_COLUMNS} | {"run_id": "x#r0", "status": "ok"}])
    frame.to_parquet(out / "runs.parquet", index=False)
    frame.to_csv(out / "runs.csv", index=False)
    (out / "meta.json").write_text("{}")
    data = (out / "runs.parquet").read_bytes()
    if damage == "truncate-runs":
        (out / "runs.parquet").write_bytes(data[: len(data) // 2])
    elif damage == "meta-list":
        (out / "meta.json").write_text("[1, 2]")
    elif damage == "meta-latin1":
        (out / "meta.json").write_bytes(b'{"host": "caf\xe9"}')
    elif damage == "meta-nested":
        (out / "meta.json").write_text("[" * 5000 + "]" * 5000)
    elif damage == "meta-nan":
        (out / "meta.json").write_text('{"x": NaN}')
    dry = ["--dry-run"] if damage == "truncate-runs" else []  # a real run reads meta.json before measuring
    code, stdout, err = run_cli("profile", str(spec), "--out", str(out), *dry)
    if damage == "truncate-runs":  # the intact CSV copy is read; a dry run changes nothing, a run rebuilds it
        assert code == 0 and "is damaged; read runs.csv instead" in err
        assert len((out / "runs.parquet").read_bytes()) < len(data)
        from profiler.results.store import ResultsStore

        assert len(ResultsStore(out).runs()) == 1 and len(pd.read_parquet(out / "runs.parquet")) == 1  # rebuilt
        (out / "runs.csv").write_text("garbage")
        data = (out / "runs.parquet").read_bytes()
        (out / "runs.parquet").write_bytes(data[:100])
        code, stdout, err = run_cli("profile", str(spec), "--out", str(out), "--dry-run")
        assert code == 2 and "move runs.parquet and runs.csv away" in err
    else:
        check((code, stdout, err), "meta.json")
        assert code == 2


def test_yaml_alias_bomb_and_nesting_are_refused_quickly(tmp_path: Path) -> None:
    for text in (BOMB, "a: " + "[" * 3000 + "]" * 3000, "name: a\nname: b\n"):
        spec = write(tmp_path / "spec.yaml", text)
        code, _, err = run_cli("profile", str(spec), "--dry-run")
        assert code == 2 and len(err.strip().splitlines()) == 1 and len(err) < 400, err


def test_second_campaign_on_one_directory_fails_naming_the_holder(tmp_path: Path) -> None:
    from profiler.campaign.outdir import directory_lock

    spec = write(tmp_path / "spec.yaml", SPEC)
    out = tmp_path / "res"
    with directory_lock(out):
        code, _, err = run_cli("profile", str(spec), "--out", str(out))
    assert code == 2 and f"pid {os.getpid()}" in err and "--out" in err


@pytest.mark.parametrize("bad", ["file", "under-file"])
def test_out_that_is_a_file(tmp_path: Path, bad: str) -> None:
    spec = write(tmp_path / "spec.yaml", SPEC)
    target = spec if bad == "file" else spec / "sub"
    code, _, err = run_cli("profile", str(spec), "--out", str(target))
    assert code == 2 and "--out" in err and len(err.strip().splitlines()) == 1


def test_result_files_are_group_readable(tmp_path: Path) -> None:
    from profiler.results.store import ResultsStore

    store = ResultsStore(tmp_path)
    store.write_meta({"a": 1})
    store.append_run({"run_id": "x#r0", "status": "ok"}, [{"run_id": "x#r0", "job_index": 0}])
    for name in ("meta.json", "runs.parquet", "runs.csv", "jobs.parquet", "jobs.csv"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name


@pytest.mark.slow
def test_ctrl_c_prints_one_line_and_no_worker_traceback(tmp_path: Path) -> None:
    import signal
    import time

    spec = write(tmp_path / "spec.yaml", SPEC.replace(b"repeats: 1", b"repeats: 20"))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    # a shell without job control starts background commands with SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: give the command SIGINT's default, as a terminal would (else CI run in the
    # background sees the campaign ignore Ctrl-C and finish)
    proc = subprocess.Popen([sys.executable, "-m", "colocate.cli", "profile", str(spec), "--out",
                             str(tmp_path / "res"), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (tmp_path / "res" / "runs.parquet").is_file():
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group, workers included
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted after ") and "rerun the same command" in lines[0]


def test_bom_and_one_job_files_are_read(tmp_path: Path) -> None:
    from common.errors import InputError
    from scheduler.formats.workloads import read_workload
    from scheduler.model.jobs import load_jobs

    bom = b"\xef\xbb\xbf"
    assert [j.name for j in load_jobs(write(tmp_path / "j.csv", bom + b"name,application\na,cifar10\n"))] == ["a"]
    assert len(read_workload(write(tmp_path / "w.csv", bom + SIA))) == 3
    one = PHILLY.splitlines(keepends=True)[:2]
    assert len(read_workload(write(tmp_path / "p.csv", bom + b"".join(one)))) == 1  # the first job counts
    with pytest.raises(InputError, match="no jobs"):
        read_workload(write(tmp_path / "h.csv", one[0]))


@pytest.mark.parametrize("args, named", [
    (["--grace", "-1"], "--grace"), (["--image-size", "0"], "--image-size"), (["--steps", "-1"], "--steps"),
    (["--sbatch-option", "--time=1\ntouch PWNED"], "--sbatch-option"),
    (["--cluster", str(EXAMPLES / "sia-64gpu.yaml")], "gpu_type"),  # a100 is not a type of that cluster
])
def test_launch_options_and_cluster_indices(tmp_path: Path, args: list[str], named: str) -> None:
    alloc = write(tmp_path / "alloc.json", ALLOCATION)
    code, _, err = run_cli("launch", str(alloc), "--emit", "slurm", str(tmp_path / "emit"), *args)
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "emit").exists() and not (tmp_path / "PWNED").exists()


@FUZZ
@given(st.lists(st.text(max_size=80), min_size=2, max_size=2, unique=True))
def test_safe_name_keeps_safe_names_and_never_merges_two(labels: list[str]) -> None:
    import re

    from common.names import is_safe_name, safe_name

    names = [safe_name(label) for label in labels]
    assert names[0] != names[1]  # two labels never share a file
    for label, name in zip(labels, names):  # no '/', no leading '.' or '-', nothing a shell or path reads
        assert re.fullmatch(r"[A-Za-z0-9_]([A-Za-z0-9._-]*[A-Za-z0-9_])?", name) and len(name) <= 60, name
        if is_safe_name(label) and len(label) <= 60:
            assert name == label


@pytest.mark.parametrize("field, value", [("p", float("nan")), ("p", 0.0), ("restart_cost_s", -1.0),
                                          ("min_benefit", float("nan")), ("top_k", 10**6), ("threads", 0),
                                          ("time_limit_s", float("inf")), ("max_gpus_per_job", 0)])
def test_ilp_config_refuses_unbounded_numbers(field: str, value: float) -> None:
    from common.errors import InputError
    from scheduler.ilp.config import IlpConfig

    with pytest.raises(InputError) as info:
        IlpConfig(**{field: value})
    assert f"field '{field}'" in str(info.value) and "\n" not in str(info.value)
