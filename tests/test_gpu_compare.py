"""``colocate compare-gpus``: pairs of two GPU types side by side (colocate.analysis.gpu_compare)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from colocate.analysis.gavel import load_inputs, write_import
from colocate.analysis.gpu_compare import compare_gpu_types, match_key
from colocate.analysis.pairs_export import tidy_pairs
from colocate.analysis.pairs_import import PairColumns, import_pairs
from common.errors import InputError

REPO = Path(__file__).resolve().parents[1]
# speeds t/t' and solo iterations/s of three job types on two GPU types; r18+r50 is worth packing on the
# h100 only (δ crosses 1), r18+vgg has no h200 row, and the h200 also ran one pair under MPS
TABLE = """job_a,job_b,gpu_type,sharing,speed_a,speed_b,throughput_a,throughput_b
resnet18@64,resnet50@64,h100,timeslice,0.90,0.80,10.0,5.0
resnet18@64,resnet50@64,h200,timeslice,0.50,0.45,14.0,7.5
resnet18@64,resnet18@64,h100,timeslice,0.55,0.55,10.0,10.0
resnet18@64,resnet18@64,h200,timeslice,0.60,0.60,14.0,14.0
resnet50@64,resnet50@64,h100,timeslice,0.45,0.45,5.0,5.0
resnet50@64,resnet50@64,h200,timeslice,0.40,0.40,7.5,7.5
resnet18@64,vgg11@64,h100,timeslice,0.5,0.5,10.0,4.0
resnet18@64,resnet50@64,h200,mps,0.70,0.65,14.0,7.5
"""
COLUMNS = {c: c for c in ("job_a", "job_b", "gpu_type", "sharing", "speed_a", "speed_b", "throughput_a",
                          "throughput_b")}


@pytest.fixture(scope="module")
def two_types(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("two-types")
    (root / "table.csv").write_text(TABLE)
    write_import(import_pairs(root / "table.csv", PairColumns(COLUMNS)), root / "results")
    return root / "results"


def _delta(speed_a: float, speed_b: float, rate_a: float, rate_b: float) -> float:
    t_a, t_b = 1 / rate_a, 1 / rate_b
    return (t_a + t_b) / max(t_a / speed_a, t_b / speed_b)


def test_common_pairs_their_deltas_and_the_pair_that_crosses_one(two_types: Path) -> None:
    comparison = compare_gpu_types(load_inputs([two_types]), "h100", "h200")
    pairs = comparison.pairs.set_index(["job_a", "job_b"])
    assert len(pairs) == 3 and set(pairs["sharing_a"]) == set(pairs["sharing_b"]) == {"timeslice"}
    row = pairs.loc[("resnet18@64", "resnet50@64")]
    assert row["delta_a"] == pytest.approx(_delta(0.90, 0.80, 10, 5)) and row["delta_a"] > 1 > row["delta_b"]
    assert row["delta_b"] == pytest.approx(_delta(0.50, 0.45, 14, 7.5))
    assert row["delta_diff"] == pytest.approx(row["delta_b"] - row["delta_a"])
    assert row["sum_a"] == pytest.approx(1.70) and row["speed_b_on_b"] == pytest.approx(0.45)
    s = comparison.summary
    assert (s["only_a"], s["only_b"]) == (1, 0)  # resnet18+vgg11: h100 only; the h200's MPS pair: another mode
    assert s["packing_pairs_a"] == 2 and s["packing_pairs_b"] == 1
    assert s["flips"] == [f"resnet18@64+resnet50@64 (timeslice/timeslice): {row['delta_a']:.3f} -> "
                          f"{row['delta_b']:.3f}"]
    assert comparison.pairs["delta_diff"].abs().is_monotonic_decreasing  # largest differences first
    solo = comparison.solo.set_index("job")
    assert solo.loc["resnet50@64", "speedup_b_over_a"] == pytest.approx(7.5 / 5.0)
    assert s["median_speedup_b_over_a"] == pytest.approx(1.45)  # median of 1.4 and 1.5 (vgg11: h100 only)


def test_two_sharing_modes_are_compared_when_named(two_types: Path) -> None:
    comparison = compare_gpu_types(load_inputs([two_types]), "h100", "h200", sharing=("timeslice", "mps"))
    assert len(comparison.pairs) == 1
    row = comparison.pairs.iloc[0]
    assert (row["sharing_a"], row["sharing_b"]) == ("timeslice", "mps")
    assert row["delta_b"] == pytest.approx(_delta(0.70, 0.65, 14, 7.5))
    with pytest.raises(InputError, match="no pairs of h100 measured with sharing 'mps'"):
        compare_gpu_types(load_inputs([two_types]), "h100", "h200", sharing=("mps", "mps"))


def test_match_keys_meet_across_naming_batch_and_precision() -> None:
    assert match_key("ResNet-18@64", "batch") == match_key("resnet18@64:tf32", "batch") == "resnet18@64"
    assert match_key("ResNet-18@64", "job") != match_key("resnet18@64:tf32", "job")
    assert match_key("se_resnet18@128:bf16", "model") == "seresnet18" and match_key("A3C", "batch") == "a3c"


def test_gavel_k80_against_v100_agrees_with_the_tidy_rows(gavel_throughputs: Path) -> None:
    results = load_inputs([], [gavel_throughputs])
    comparison = compare_gpu_types(results, "k80", "v100")
    tidy = tidy_pairs(results)
    ok = tidy[tidy["status"] == "ok"]
    keys = {gpu: set(zip(g["job_a"], g["job_b"])) for gpu, g in ok.groupby("gpu_type")}
    assert len(comparison.pairs) == len(keys["k80"] & keys["v100"])
    assert comparison.summary["only_b"] == len(keys["v100"] - keys["k80"])
    sample = comparison.pairs.iloc[len(comparison.pairs) // 2]
    for gpu, column in (("k80", "delta_a"), ("v100", "delta_b")):
        source = ok[(ok["gpu_type"] == gpu) & (ok["job_a"] == sample["job_a"]) & (ok["job_b"] == sample["job_b"])]
        assert sample[column] == pytest.approx(float(source["delta"].iloc[0]))
    crossing = ((comparison.pairs["delta_a"] > 1) != (comparison.pairs["delta_b"] > 1)).sum()
    assert len(comparison.summary["flips"]) == crossing
    assert -1 <= comparison.summary["spearman_delta"] <= 1


def test_our_h100_pairs_meet_gavel_v100_by_network_and_batch(gavel_throughputs: Path) -> None:
    results = load_inputs([REPO / "results/h100/thesis-grid"], [gavel_throughputs])
    with pytest.raises(InputError, match="no pair measured on both"):
        compare_gpu_types(results, "v100", "h100", sharing=("timeslice", "timeslice"))  # names differ
    comparison = compare_gpu_types(results, "v100", "h100", match="batch", sharing=("timeslice", "timeslice"))
    assert {"resnet18@64", "resnet18@128"} <= set(comparison.pairs["job_a"])
    assert set(comparison.pairs["job_b"]) <= {"resnet50@64", "resnet50@128", "resnet50@256", "resnet50@512"}
    assert comparison.summary["image_size_b"] == 224 and comparison.summary["image_size_a"] is None


def test_cli_writes_the_tables_summary_and_plot_and_refuses_bad_types(two_types: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    done = subprocess.run([sys.executable, "-m", "colocate.cli", "compare-gpus", str(two_types), "--types",
                           "h100,h200", "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())  # Rich wraps lines at the terminal's width
    assert "3 pairs on both" in said and "1 cross δ = 1" in said
    summary = json.loads((out / "summary-h100-vs-h200.json").read_text())
    assert summary["pairs"] == 3 and summary["match"] == "job"
    assert len(pd.read_csv(out / "pairs-h100-vs-h200.csv")) == 3
    assert (out / "delta-h100-vs-h200.png").stat().st_size > 0
    bad = subprocess.run([sys.executable, "-m", "colocate.cli", "compare-gpus", str(two_types), "--types", "h100,a100",
                          "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=REPO)
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and len(lines) == 1 and "valid: h100, h200" in lines[0]
