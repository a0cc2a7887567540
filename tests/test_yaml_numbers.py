"""YAML numbers with an exponent (``1e6``) are numbers in every file we read, as YAML 1.2 says; PyYAML alone
(YAML 1.1) reads them as strings, which made ``steps: 1e6`` a "not a number" error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from common.errors import InputError
from common.safe_load import parse_yaml
from profiler.campaign.spec import load_spec
from scheduler.service.jobs.jobspec import load_job


def test_exponents_are_numbers_and_other_text_stays_text() -> None:
    data = parse_yaml("a: 1e6\nb: -2E-3\nc: 1.5e3\nd: .5e1\ne: 12\nf: 1e\ng: v1e6\nh: '1e6'\ni: 1.0e+3\nj: 0x1A\n",
                      source="t.yaml")
    assert data == {"a": 1e6, "b": -2e-3, "c": 1500.0, "d": 5.0, "e": 12, "f": "1e", "g": "v1e6", "h": "1e6",
                    "i": 1000.0, "j": 26}
    assert yaml.safe_load("a: 1e6") == {"a": "1e6"}  # PyYAML's own loader is left as it is


def test_a_job_file_takes_an_exponent_and_names_one_out_of_range(tmp_path: Path) -> None:
    job = tmp_path / "sci.yaml"
    job.write_text("model: tiny_cnn\nsteps: 2e3\nbatch_size: 32\n")
    assert load_job(job).steps == 2000
    job.write_text("model: tiny_cnn\nsteps: 1e12\nbatch_size: 32\n")
    with pytest.raises(InputError, match=r"field 'steps': 1e\+12 is out of range"):
        load_job(job)


def test_a_campaign_file_takes_an_exponent(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text("name: sci\nmodels: [resnet18]\nbatch_sizes: [8]\nmin_window_seconds: 5e-1\n")
    assert load_spec(spec).min_window_seconds == 0.5
