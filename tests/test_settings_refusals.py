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
