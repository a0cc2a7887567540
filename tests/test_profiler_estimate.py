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


def test_the_thesis_grid_takes_four_device_calls_on_one_h100_with_warm_workers() -> None:
    spec = load_spec(ROOT / "scripts" / "thesis-grid.yaml")
    a = EstimateAssumptions()
    estimate = estimate_campaign(spec, a)
    assert estimate.runs == 180  # 20 solos + 2 modes x 4 batch sizes x (10 pairs + 10 triples)
    assert estimate.windows == 4 and estimate.total_s <= 36 * 60  # see results/BENCHMARKS.md
    per_call = a.window_startup_s + a.probe_s
    assert estimate.per_window_s == pytest.approx(4 * per_call + a.first_window_tests_s)
    assert estimate_campaign(spec.__class__(**{**spec.__dict__, "workers": "fresh"})).total_s > 1.5 * estimate.total_s


def test_measured_solo_times_and_set_values_replace_the_guesses(tmp_path: Path) -> None:
    from profiler.campaign.driver import run_campaign

    spec = spec_from_dict(ONE)
    guessed = estimate_campaign(spec)
    measured = estimate_campaign(spec, EstimateAssumptions(solo_times_s={"resnet18@64:tf32": 0.9}))
    assert measured.measured == 1 and measured.window_s == pytest.approx(2 * 4 * 0.9)  # 4 iterations > 2 s
    assert guessed.measured == 0 and measured.window_s > guessed.window_s
    slower = EstimateAssumptions().with_values({"process_start_s": "9", "achieved_tflops": "tf32:13.5"})
    assert slower.process_start_s == 9.0 and slower.achieved_tflops["tf32"] == 13.5
    assert slower.achieved_tflops["bf16"] == EstimateAssumptions().achieved_tflops["bf16"]
    for bad in ({"process_start": "9"}, {"eviction_s": "-1"}, {"probe_s": "soon"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            EstimateAssumptions().with_values(bad)
    cpu = spec_from_dict({"name": "m", "device": "cpu", "models": ["tiny_cnn"], "batch_sizes": [2],
                          "group_sizes": [1], "warmup_iters": 1, "min_window_iters": 2, "repeats": 1})
    run_campaign(cpu, tmp_path)
    from profiler.campaign.estimate import measured_solo_times

    times = measured_solo_times(tmp_path)
    assert list(times) == ["tiny_cnn@2"] and 0 < times["tiny_cnn@2"] < 5


def test_evictions_and_mps_client_stops_are_charged() -> None:
    a = EstimateAssumptions(memory_mib=4000.0)
    spec = spec_from_dict({**ONE, "models": ["resnet18", "resnet50"], "batch_sizes": [16], "group_sizes": [1, 2],
                           "sharing": ["mps", "timeslice"], "repeats": 1})
    estimate = estimate_campaign(spec, a)
    cheap = estimate_campaign(spec, EstimateAssumptions(memory_mib=4000.0, eviction_s=0.0, mps_client_stop_s=0.0))
    assert estimate.overhead_s > cheap.overhead_s


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
    first = _script(tmp_path, "--spec", str(spec), "--device", "cpu")
    assert first.returncode == 0, first.stderr
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(files) <= 8 and "results-cpu.tar.gz" in files and "preflight.txt" in files
    assert "gpu-tests.txt" in files  # the directory's first window runs the GPU suite
    preflight = (tmp_path / "out" / "preflight.txt").read_text()
    assert "CUDA           FAIL  no CUDA device" in preflight and "not ready" in preflight
    with tarfile.open(tmp_path / "out" / "results-cpu.tar.gz") as archive:
        assert any(name.endswith("tiny/runs.parquet") for name in archive.getnames())
    assert "2 runs (2 already done)" in (tmp_path / "out" / "summary.txt").read_text()
    again = _script(tmp_path, "--spec", str(spec), "--device", "cpu")
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert again.returncode == 0 and "this window: 0 runs" in summary
    assert "gpu tests: not run (not the first window" in summary  # later windows give the grid all the time


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "runs"), [("same-model-pairs", 90), ("bf16-transformers", 64)])
def test_the_next_device_calls_specs_plan_and_estimate_on_a_machine_without_their_gpu(
        tmp_path: Path, spec: str, runs: int) -> None:
    """The specs queued for the next device call load, plan, and get the H100's estimate where the GPU has none."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the fallback on a machine without a GPU")
    done = _script(tmp_path, "--dry-run", "--spec", f"scripts/{spec}.yaml")
    assert done.returncode == 0, done.stderr
    assert f"{runs} runs (0 already done)" in done.stdout
    assert "the H100's" in done.stdout and f"estimate for {spec} on one h100: {runs} runs" in done.stdout


def test_an_h200_fits_the_groups_an_h100_refuses_and_other_types_need_measured_solos() -> None:
    from click.testing import CliRunner

    from colocate.cli import app
    from profiler.campaign.estimate import assumptions_for

    spec = load_spec(ROOT / "scripts" / "thesis-grid.yaml")
    h100, h200 = (estimate_campaign(spec, assumptions_for(g)) for g in ("h100", "h200"))
    assert h100.infeasible > 0 and h200.infeasible < h100.infeasible  # VGG triples at batch 256 need > 80 GB
    assert assumptions_for("h200").achieved_tflops == assumptions_for("h100").achieved_tflops
    done = CliRunner().invoke(app, ["bench", "profiler", "--estimate", str(ROOT / "scripts" / "thesis-grid.yaml"),
                                    "--gpu", "h200"])
    assert done.exit_code == 0 and "on one h200: 180 runs" in done.output, done.output
    refused = CliRunner().invoke(app, ["bench", "profiler", "--estimate", str(ROOT / "scripts" / "thesis-grid.yaml"),
                                       "--gpu", "a100"])
    assert "valid: h100, h200, or --results" in str(refused.exception)  # InputError: main() prints it, exit 2
