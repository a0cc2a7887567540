"""A real, tiny CPU campaign shared by the analysis tests (matrices, Gavel export, predictor, kernels).

Run once per test session: the first test module that asks for it runs the campaign under pytest's base
temporary directory; later modules find the finished directory there and reuse it (a plain session
fixture defined here would be re-run once per importing module).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ANALYSIS_SPEC = {
    "name": "analysis-tiny",
    "device": "cpu",
    "models": ["tiny_cnn"],
    "batch_sizes": [2, 8],
    "image_size": 32,
    "group_sizes": [1, 2, 3],
    # Two job types: both self-pairs, the cross-batch pair and one triple (12 runs with 2 repeats).
    "combinations": [
        ["tiny_cnn@2", "tiny_cnn@2"],
        ["tiny_cnn@2", "tiny_cnn@8"],
        ["tiny_cnn@8", "tiny_cnn@8"],
        ["tiny_cnn@2", "tiny_cnn@2", "tiny_cnn@8"],
    ],
    "sharing": ["timeslice"],
    "warmup_iters": 2,
    "min_window_iters": 4,
    "repeats": 2,
    "seed": 0,
    "threads_per_job": 1,
}


def analysis_campaign_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of the shared campaign, running it on first use."""
    from profiler.campaign.driver import run_campaign
    from profiler.campaign.spec import spec_from_dict

    out = tmp_path_factory.getbasetemp() / "analysis-cpu-campaign"
    done = out / ".complete"
    if not done.exists():
        run_campaign(spec_from_dict(ANALYSIS_SPEC), out)
        done.write_text("ok\n")
    return out


@pytest.fixture(scope="session")
def cpu_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return analysis_campaign_dir(tmp_path_factory)
