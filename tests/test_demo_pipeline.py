"""`colocate demo`: the embedded spec is valid, and the whole pipeline runs end to end (small campaign)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from colocate.commands.demo import demo_spec


def test_embedded_demo_spec_is_a_cpu_campaign_of_three_models_solo_and_pairs() -> None:
    spec = demo_spec("cpu")
    assert spec.device == "cpu" and len(spec.models) == 3 and spec.group_sizes == (1, 2)
    gpu = demo_spec("cuda")
    assert gpu.device == "cuda" and gpu.image_size == 224


@pytest.mark.slow
def test_demo_runs_campaign_matrix_and_simulation_without_external_data(tmp_path: Path) -> None:
    """A clean clone: no ../shared/data, so step 3 runs on the bundled default cluster and profiles."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump({"name": "tiny-demo", "models": ["tiny_cnn"], "batch_sizes": [2],
                                    "repetition": True, "warmup_iters": 2, "min_window_iters": 4, "repeats": 1}))
    out = tmp_path / "demo"
    result = subprocess.run([sys.executable, "-m", "colocate.cli", "demo", "--spec", str(spec), "--out", str(out)],
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "COLOCATE_SHARED_DATA": str(tmp_path / "no-shared-data")})
    assert result.returncode == 0, result.stderr[-2000:]
    runs = pd.read_parquet(out / "runs.parquet")
    assert set(runs["status"]) == {"ok"} and (runs["kind"] == "pair").sum() == 1
    assert (out / "matrices" / "pairs.csv").is_file() and list((out / "matrices").glob("*.png"))
    for policy in ("colocate", "sia"):
        summary = out / "sim" / policy / "summary.json"
        assert summary.is_file(), result.stdout[-2000:]
        assert json.loads(summary.read_text())["completed"] == 24  # the bundled 24-job workload, all done
    assert "3/3 simulation" in result.stdout and "avg JCT" in result.stdout and "default cluster (32 GPUs" in result.stdout
    # the closing note says where each output is and what it shows
    outputs = result.stdout[result.stdout.index("outputs"):]
    for where in ("runs.parquet", "matrices/matrix_*_delta.csv", "pairs.csv", "sim/<policy>/summary.json"):
        assert where in outputs, where
