"""Shared pytest set-up: GPU tests are skipped without CUDA, Ray tests without the ray extra."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

SHARED_DATA = Path(os.environ.get("COLOCATE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device; none on this machine")
    skip_ray = pytest.mark.skip(reason="needs the optional 'ray' extra: pip install -e '.[ray]'")
    has_cuda = _cuda_available()
    has_ray = importlib.util.find_spec("ray") is not None
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if "ray" in item.keywords and not has_ray:
            item.add_marker(skip_ray)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Public evaluation data beside the repository (../shared/data); tests needing it skip without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public data folder not found at {SHARED_DATA}")
    return SHARED_DATA
