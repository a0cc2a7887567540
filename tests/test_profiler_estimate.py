"""Campaign wall-time estimate (pure arithmetic over the plan) and the GPU-window script's CPU-runnable parts."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from profiler.campaign.estimate import EstimateAssumptions, estimate_campaign, solo_iteration_s
from profiler.campaign.spec import load_spec, spec_from_dict

ROOT = Path(__file__).parents[1]
ONE = {"name": "one", "device": "cuda", "models": ["resnet18"], "batch_sizes": [64], "group_sizes": [1],
       "image_size": 224, "precision": ["tf32"], "warmup_iters": 10, "min_window_iters": 3,
       "min_window_seconds": 2.0, "repeats": 2}


def test_two_solo_repeats_cost_one_cold_start_with_warm_workers() -> None:
    a = EstimateAssumptions()
    t = solo_iteration_s("resnet18", 64, 224, "tf32", a)
    estimate = estimate_campaign(spec_from_dict(ONE), a)
    window = max(2.0, 4 * t)
    assert estimate.window_s == pytest.approx(2 * window)
    assert estimate.startup_s == pytest.approx(a.process_start_s)  # the second repeat reuses the worker
    assert estimate.warmup_s == pytest.approx(10 * t + a.autotune_s + 1 * t)  # cold warm-up, then one re-warm
    assert estimate.overhead_s == pytest.approx(2 * (t + a.run_overhead_s + a.store_write_s))
    fresh = estimate_campaign(spec_from_dict({**ONE, "workers": "fresh"}), a)
    assert fresh.startup_s == pytest.approx(2 * a.process_start_s) and fresh.total_s > estimate.total_s


def test_groups_that_cannot_fit_are_refused_and_cost_no_window() -> None:
    spec = spec_from_dict({**ONE, "models": ["vgg19", "resnet50"], "batch_sizes": [1024], "group_sizes": [1, 2],
                           "repeats": 1, "sharing": ["timeslice", "mps"]})
    estimate = estimate_campaign(spec)
    assert estimate.runs == 4 and estimate.infeasible == 2  # both modes of the one pair


def test_the_thesis_grid_fits_25_minutes_on_one_h100_with_warm_workers() -> None:
    spec = load_spec(ROOT / "scripts" / "thesis-grid.yaml")
    estimate = estimate_campaign(spec)
    assert estimate.runs == 180  # 20 solos + 2 modes x 4 batch sizes x (10 pairs + 10 triples)
    assert estimate.total_s <= 25 * 60
    assert estimate_campaign(spec.__class__(**{**spec.__dict__, "workers": "fresh"})).total_s > 2 * estimate.total_s


def _script(tmp_path: Path, *args: str, budget: int = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "RESULTS_ROOT": str(tmp_path / "results"),
           "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu-campaign.sh"), "--budget", str(budget), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=budget + 120)


@pytest.mark.slow
def test_the_gpu_window_script_dry_run_prints_the_plan_and_the_estimate(tmp_path: Path) -> None:
    done = _script(tmp_path, "--dry-run", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert "180 runs (0 already done)" in done.stdout
    assert "estimate for thesis-grid on one h100: 180 runs" in done.stdout
    assert (tmp_path / "out" / "summary.txt").is_file()


@pytest.mark.slow
def test_the_gpu_window_script_packs_at_most_8_files_and_resumes(tmp_path: Path) -> None:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump({"name": "tiny", "device": "cpu", "models": ["tiny_cnn"], "batch_sizes": [2],
                                    "group_sizes": [1, 2], "repetition": True, "warmup_iters": 2,
                                    "min_window_iters": 3, "repeats": 1}))
    first = _script(tmp_path, "--spec", str(spec), "--device", "cpu", "--skip-tests")
    assert first.returncode == 0, first.stderr
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(files) <= 8 and "results-cpu.tar.gz" in files and "preflight.txt" in files
    with tarfile.open(tmp_path / "out" / "results-cpu.tar.gz") as archive:
        assert any(name.endswith("tiny/runs.parquet") for name in archive.getnames())
    assert "2 runs (2 already done)" in (tmp_path / "out" / "summary.txt").read_text()
    again = _script(tmp_path, "--spec", str(spec), "--device", "cpu", "--skip-tests")
    assert again.returncode == 0 and "this window: 0 runs" in (tmp_path / "out" / "summary.txt").read_text()
