"""The data bundled in the package: attribution, size, derivation, and that it is what a clean clone runs on."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tomllib

from scheduler.formats import bundled
from scheduler.formats.profiles import read_gns_curves, read_sia_profiles
from scheduler.model.goodput import ProfileGoodputModel

REPO = Path(__file__).resolve().parents[1]


def _data_files() -> list[Path]:
    return sorted(p for p in bundled.DATA_DIR.rglob("*") if p.is_file())


def test_bundle_is_small_and_every_csv_names_its_source() -> None:
    files = _data_files()
    assert sum(f.stat().st_size for f in files) <= 2_000_000
    csvs = [f for f in files if f.suffix == ".csv"]
    assert len(csvs) >= 6 * 4
    for f in csvs:
        first = f.read_text().splitlines()[0]
        assert first.startswith("# "), f
        assert any(s in first for s in ("Apache-2.0", "Pollux", "Gavel", "measured by this project")) or "MIT" in f.read_text()[:800], f
    source = (bundled.DATA_DIR / "SOURCE.md").read_text()
    assert "Apache License 2.0" in source and "MIT" in source and "Stanford Future Data Systems" in source


def test_package_data_globs_ship_every_bundled_file() -> None:
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["scheduler"]
    for f in _data_files():
        relative = f.relative_to(REPO / "scheduler").as_posix()
        assert any(fnmatch.fnmatch(relative, g) and relative.count("/") == g.count("/") for g in globs), relative


def test_pollux_profiles_read_with_their_header_and_have_two_gpu_types() -> None:
    frame = read_sia_profiles(bundled.PROFILES_DIR)
    assert set(frame["application"]) == set(bundled.POLLUX_APPS)
    assert set(frame["gpu_type"]) == {"t4", "v100"}
    assert frame[frame.gpu_type == "v100"].num_gpus.max() == 1  # derived type: 1-GPU rows only
    assert frame[frame.gpu_type == "t4"].num_gpus.max() >= 16
    curves = read_gns_curves(bundled.PROFILES_DIR)
    assert set(curves) == set(bundled.POLLUX_APPS)


def test_derived_type_is_t4_scaled_by_gavels_ratio_and_bootstrapped_to_many_gpus() -> None:
    ratios = bundled.speed_ratios(bundled.GAVEL_FILE)["v100"]
    assert 1.1 < ratios["cifar10"] < 1.6 and ratios["imagenet"] > ratios["cifar10"]
    frame = read_sia_profiles(bundled.PROFILES_DIR, applications=["cifar10"])
    t4 = frame[(frame.gpu_type == "t4") & (frame.num_gpus == 1)].set_index("local_bsz")["step_time"]
    v100 = frame[frame.gpu_type == "v100"].set_index("local_bsz")["step_time"]
    np.testing.assert_allclose(v100.to_numpy(), (t4.loc[v100.index] / ratios["cifar10"]).to_numpy())
    # Sia's bootstrap: tput_v100(N) = tput_v100(1) / tput_t4(1) * tput_t4(N)
    model = ProfileGoodputModel(frame)
    one = model.throughput("cifar10", "v100", 1, 128) / model.throughput("cifar10", "t4", 1, 128)
    four = model.throughput("cifar10", "v100", 4, 512) / model.throughput("cifar10", "t4", 4, 512)
    assert four == pytest.approx(one, rel=1e-6)
    assert model.throughput("cifar10", "v100", 4, 512) > 2 * model.throughput("cifar10", "v100", 1, 128)


def test_gavel_subset_is_scale_factor_one_of_the_consolidated_workers() -> None:
    data = json.loads(bundled.GAVEL_FILE.read_text())
    assert set(data) == {"k80", "p100", "v100"}
    for jobs in data.values():
        assert len(jobs) == 26 and all(k.endswith(", 1)") for k in jobs)
        assert all(k == "null" or k.endswith(", 1)") for entry in jobs.values() for k in entry)


def test_default_colocation_table_covers_the_bundled_types() -> None:
    from scheduler.formats.transfer import default_table

    table = default_table()
    assert {"t4", "v100", "aws", "rtx", "dgx-ext"} <= set(table.gpu_types)
    frame = pd.read_csv(bundled.COLOCATION_FILE, comment="#")
    assert len(frame) == 2 * 21 and frame["source"].str.startswith("gavel:").all()


def test_without_shared_data_the_default_profiles_are_the_bundled_ones(monkeypatch, tmp_path) -> None:
    from scheduler.formats.shared_data import default_profiles_dir

    monkeypatch.setenv("COLOCATE_SHARED_DATA", str(tmp_path / "absent"))
    assert default_profiles_dir() == bundled.PROFILES_DIR
    shared = tmp_path / "shared"
    (shared / "sia" / "traces").mkdir(parents=True)
    monkeypatch.setenv("COLOCATE_SHARED_DATA", str(shared))
    assert default_profiles_dir() == shared / "sia" / "traces"  # Sia's own files when present
    assert default_profiles_dir(["t4", "v100"]) == bundled.PROFILES_DIR  # ... but not for the bundled types


@pytest.mark.slow
def test_default_cluster_simulation_packs_and_adapts(monkeypatch, tmp_path) -> None:
    from scheduler.sim.simulator import simulate

    monkeypatch.setenv("COLOCATE_SHARED_DATA", str(tmp_path / "absent"))
    demo = REPO / "scheduler/examples/demo-workload.csv"
    ours = simulate(bundled.CLUSTER_FILE, demo, "colocate")  # default profiles and colocation table
    sia = simulate(bundled.CLUSTER_FILE, demo, "sia")
    assert ours.summary["completed"] == sia.summary["completed"] == 24
    assert ours.allocations["partner"].notna().any() and sia.summary["packed_fraction"] == 0
    assert set(ours.allocations["gpu_type"]) == {"t4", "v100"}
    assert ours.allocations["num_gpus"].max() > 1  # adaptive jobs scale out


@pytest.mark.sia_data
def test_bundled_pollux_files_are_the_public_ones_byte_for_byte(shared_data: Path) -> None:
    traces = shared_data / "sia" / "traces"
    for app in bundled.POLLUX_APPS:
        for ours, theirs in [("placements-t4.csv", "placements.csv"), ("scalability-t4.csv", "scalability.csv")]:
            text = (bundled.PROFILES_DIR / app / ours).read_text()
            body = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
            assert body == (traces / app / theirs).read_text()


def test_measured_h100_tables_are_the_committed_results_keyed_as_jobs_ask(tmp_path: Path) -> None:
    """The bundled H100 files are what ``build_measured`` writes from results/h100/matrices (not stale), without
    the TF32 suffix, plus one row per pair of models that a job at an unmeasured batch matches."""
    from scheduler.model.jobs import Job

    written = bundled.build_measured(REPO / "results", tmp_path)
    assert sorted(p.name for p in written) == ["colocation-h100-mps.csv", "colocation-h100-timeslice.csv"]
    for path in written:  # the same rows and values (CSV float parsing may differ in the last digits)
        built, shipped = pd.read_csv(path, comment="#"), pd.read_csv(bundled.DATA_DIR / path.name, comment="#")
        pd.testing.assert_frame_equal(built, shipped, check_exact=False, rtol=1e-9, obj=path.name)
    mps, sliced = bundled.measured_table(("h100", "t4"), "mps"), bundled.measured_table(("h100",), "timeslice")
    assert mps is not None and sliced is not None and bundled.measured_table(("t4",), "mps") is None
    assert not any(":" in key[1] for key in mps.ratios)
    r18, se = Job("a", "resnet18", batch_size=128), Job("b", "se_resnet18", batch_size=128)
    assert sum(mps.lookup("h100", r18, se)) > 1.1 and sum(sliced.lookup("h100", r18, se)) < 1.0
    odd = Job("c", "resnet18", batch_size=96)  # no batch 96 measured: the model row, one of the measured batches
    assert mps.lookup("h100", odd, se) in [mps.lookup("h100", Job("x", "resnet18", batch_size=b),
                                                      Job("y", "se_resnet18", batch_size=b)) for b in (64, 128, 256)]
    assert all(sum(r) < 1.0 for key, r in sliced.ratios.items())  # time-sliced, no pair pays on an H100


def test_the_simulators_default_table_holds_the_h100_mps_pairs() -> None:
    from scheduler.formats.transfer import default_table

    table, mps = default_table(), bundled.measured_table(("h100",), "mps")
    assert mps is not None and {k: v for k, v in table.ratios.items() if k[0] == "h100"} == dict(mps.ratios)
    assert {"t4", "v100", "aws", "rtx", "dgx-ext", "h100"} <= table.gpu_types
