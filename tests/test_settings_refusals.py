"""Settings and options a user gets wrong are refused in one line, before any work: ``--set`` keys given twice,
unknown keys, numbers Python would read but nothing else does (other scripts' digits, ``1_0``), ``ilp.packing``
with a policy that decides packing, predictor penalties that make its fit singular, a zero round length for
``serve``, ``demo --out`` on a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_fuzz_inputs import run_cli
from tests.test_refusals import _one_line

EXAMPLES = Path(__file__).resolve().parents[1] / "scheduler" / "examples"
SIMULATE = ["simulate", "--cluster", str(EXAMPLES / "cluster-small.yaml"), "--workload",
            str(EXAMPLES / "demo-workload.csv")]

SET_CASES = {  # the --set arguments -> what the one line says
    "given-twice": (["--set", "sim.round_s=60", "--set", "sim.round_s=30"], "sim.round_s given twice"),
    "arabic-indic-digits": (["--set", "sim.round_s=١٢"], "'١٢' is not a number"),
    "underscore-float": (["--set", "sim.round_s=1_0"], "'1_0' is not a number"),
    "underscore-int": (["--set", "ilp.top_k=1_0"], "'1_0' is not a number"),
    "unknown": (["--set", "nosuch.x=1"], "unknown setting 'nosuch.x'"),
    "packing-off-with-colocate": (["--set", "ilp.packing=false"], "ilp.packing=false with a policy that decides"),
    "packing-on-with-sia": (["--policy", "sia", "--set", "ilp.packing=true"], "--policy sia for the ILP without"),
}


@pytest.mark.parametrize("case", sorted(SET_CASES))
def test_simulate_refuses_a_bad_setting_in_one_line(case: str) -> None:
    args, expected = SET_CASES[case]
    code, _, err = run_cli(*SIMULATE, *args)
    _one_line(code, err, expected)


@pytest.mark.parametrize("value", ["0", "-0", "1e-320", "1e308"])
def test_a_ridge_penalty_that_breaks_the_fit_is_refused(tmp_path: Path, value: str) -> None:
    from scheduler.formats.bundled import gavel_throughputs

    code, _, err = run_cli("predict", "--gavel", str(gavel_throughputs()), "--out", str(tmp_path / "t.csv"),
                           "--set", f"predictor.ridge_lambda={value}")
    _one_line(code, err, "ridge_lambda", "out of range", "[0.001, 10000]")
    assert not (tmp_path / "t.csv").exists()


def test_the_smallest_ridge_penalty_allowed_still_fits(tmp_path: Path) -> None:
    from scheduler.formats.bundled import gavel_throughputs

    code, _, err = run_cli("predict", "--gavel", str(gavel_throughputs()), "--out", str(tmp_path / "t.csv"),
                           "--set", "predictor.ridge_lambda=0.001")
    assert code == 0 and (tmp_path / "t.csv").stat().st_size > 0, err


def test_serve_refuses_a_round_of_zero_seconds(tmp_path: Path) -> None:
    from tests.serve_helpers import write_cluster

    cluster = write_cluster(tmp_path / "c.yaml", {"t4": 1})
    code, _, err = run_cli("serve", "--cluster", str(cluster), "--state", str(tmp_path / "s"), "--backend", "local",
                           "--device", "cpu", "--round-s", "0")
    _one_line(code, err, "round", "0 is out of range", "(0, 86400]")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("where", ["file", "file/under"])
def test_demo_out_on_a_file_is_refused_in_one_line(tmp_path: Path, where: str) -> None:
    (tmp_path / "file").write_text("mine")
    code, _, err = run_cli("demo", "--out", str(tmp_path / where), "--device", "cpu")
    _one_line(code, err, "--out")
    assert (tmp_path / "file").read_text() == "mine"


def _help(*args: str) -> str:
    code, out, err = run_cli(*args)
    assert code == 0, err
    return " ".join(out.replace("│", " ").split())


def test_help_texts_name_only_what_exists() -> None:
    """schedule's help names no path a clone lacks and says what --colocation defaults to; no one-letter long
    option (``--p``: a typo such as ``--polcy`` would be offered it); serve's experimental list names no
    ``--no-packing`` (serve has none)."""
    schedule = _help("schedule", "--help")
    assert "../shared/data" not in schedule and "no packing" not in schedule
    assert "[default: (the bundled tables" in schedule and "--power" in schedule
    assert not any(word.startswith("--") and len(word.strip(",.")) == 3 for word in schedule.split())
    assert "--no-packing" not in _help("serve", "--help-experimental")
    code, _, err = run_cli("schedule", "--p", "1")
    assert code == 2 and "No such option" in err


def test_schedule_without_colocation_prices_pairs_from_the_bundled_tables_as_simulate_does(tmp_path: Path) -> None:
    """Without --colocation, schedule's ILP has pair columns (t4 bert+ncf pairs are in the bundled tables);
    with --no-packing it has none."""
    import json

    from tests.serve_helpers import write_cluster

    jobs = tmp_path / "jobs.csv"
    jobs.write_text("name,application,num_gpus,batch_size,adaptive,memory_gb\n"
                    + "".join(f"b{i},bert,1,12,false,2\nn{i},ncf,1,128,false,2\n" for i in range(3)))
    args = ["schedule", "--cluster", str(write_cluster(tmp_path / "t4.yaml", {"t4": 2})), "--jobs", str(jobs), "--json"]
    variables = []
    for extra in ([], ["--no-packing"]):
        code, out, err = run_cli(*args, *extra)
        assert code == 0, err
        variables.append(json.loads(out)["solver"]["variables"])
    assert variables[0] > variables[1] == 6, variables  # 6 single-job columns; pairs only with the table


@pytest.mark.parametrize("command, expected", [
    ("echo a\r\necho b", "control character '\\r'"),
    ("echo a\necho b", "control character '\\n'"),
    ("echo a\x00b", "control character '\\x00'"),
    ("echo " + "x" * (128 * 1024 + 1), "characters"),
    ("echo {job:>100000000}", "wider than 256"),
])
def test_launch_refuses_an_allocation_command_no_script_should_hold(tmp_path: Path, command: str,
                                                                      expected: str) -> None:
    import json

    (tmp_path / "alloc.json").write_text(json.dumps({"allocations": [
        {"job": "a", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": None, "node": 0, "gpus": [0],
         "command": command}]}))
    code, _, err = run_cli("launch", str(tmp_path / "alloc.json"), "--emit", "slurm", str(tmp_path / "out"))
    _one_line(code, err, "command", expected)
    assert not (tmp_path / "out").exists()
