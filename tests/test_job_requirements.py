"""One requirements value (``JobRequirements``) behind the three job records: ``serve``'s job file, a workload
row and the scheduler's jobs CSV accept and refuse ``memory_gb``/``max_slowdown``/``exclusive`` alike, each
error one line naming the file, the row where there is one, and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import InputError
from scheduler.formats.workloads import read_sia_workload
from scheduler.model.jobs import REQUIREMENT_RULES, JobRequirements, load_jobs
from scheduler.service.jobs.jobspec import job_from_dict

SPEC = {"name": "a", "model": "tiny_cnn", "steps": 10, "batch_size": 8}


def _job_file(**req: object) -> InputError | JobRequirements:
    try:
        return job_from_dict({**SPEC, **req}, source="job.yaml").requirements
    except InputError as exc:
        return exc


def _workload(tmp_path: Path, bound: str = "", exclusive: str = "") -> InputError | JobRequirements:
    path = tmp_path / "w.csv"
    path.write_text(f"name,time,application,num_replicas,batch_size,max_slowdown,exclusive\n"
                    f"a,0,cifar10,1,32,{bound},{exclusive}\n")
    try:
        return read_sia_workload(path).jobs[0].requirements
    except InputError as exc:
        return exc


def _jobs_csv(tmp_path: Path, **req: str) -> InputError | JobRequirements:
    path = tmp_path / "jobs.csv"
    path.write_text("name,application," + ",".join(req) + "\na,cifar10," + ",".join(req.values()) + "\n")
    try:
        return load_jobs(path)[0].requirements
    except InputError as exc:
        return exc


def test_the_three_records_accept_the_same_requirements(tmp_path: Path) -> None:
    assert _job_file(max_slowdown=1.5, exclusive=True) == JobRequirements(None, 1.5, True)
    assert _workload(tmp_path, "1.5", "true") == JobRequirements(None, 1.5, True)
    assert _jobs_csv(tmp_path, max_slowdown="1.5", exclusive="true") == JobRequirements(None, 1.5, True)
    assert _job_file(memory_gb=6) == _jobs_csv(tmp_path, memory_gb="6") == JobRequirements(6.0)


@pytest.mark.parametrize("bound", [0.5, 1001, float("inf")])
def test_a_slowdown_bound_out_of_range_is_refused_alike(tmp_path: Path, bound: float) -> None:
    errors = [_job_file(max_slowdown=bound), _workload(tmp_path, str(bound)),
              _jobs_csv(tmp_path, max_slowdown=str(bound))]
    for error, source in zip(errors, ("job.yaml", "w.csv", "jobs.csv")):
        assert isinstance(error, InputError)
        text = str(error)
        assert "\n" not in text and source in text and "field 'max_slowdown'" in text
        assert REQUIREMENT_RULES["max_slowdown"] in text
    assert "row 2: " in str(errors[1]) and "row 2: " in str(errors[2])  # the tables name the row


def test_memory_and_exclusive_are_refused_with_the_field(tmp_path: Path) -> None:
    for error in (_job_file(memory_gb=0), _jobs_csv(tmp_path, memory_gb="0"), _job_file(memory_gb=1e5)):
        assert isinstance(error, InputError) and "field 'memory_gb'" in str(error)
        assert REQUIREMENT_RULES["memory_gb"] in str(error)
    for error in (_job_file(exclusive="yes"), _workload(tmp_path, exclusive="maybe")):
        assert isinstance(error, InputError) and "field 'exclusive'" in str(error)
        assert REQUIREMENT_RULES["exclusive"] in str(error)


def test_checked_refuses_a_boolean_slowdown_bound() -> None:
    with pytest.raises(InputError, match="field 'max_slowdown'"):
        JobRequirements.checked(max_slowdown=True, source="x")
