"""One validator for bounded numbers (``common.bounds.check_number``): a row of a table named in the message, an
open upper limit, and the readers and configs moved onto it keep naming their file and field."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import pytest

from common.bounds import check_number
from common.errors import InputError
from scheduler.formats.workloads import poisson_workload, read_sia_workload
from scheduler.learning.explore import ExploreConfig
from scheduler.learning.predictor.config import PredictorConfig


def test_a_row_is_named_and_an_open_upper_limit_is_refused() -> None:
    with pytest.raises(InputError, match=r"^jobs.csv: field 'x': row 3: 7 is out of range \(valid: a number in "
                                         r"\[0, 1\)\)$"):
        check_number(7, field="x", low=0, high=1, high_open=True, source="jobs.csv", row=3)
    with pytest.raises(InputError, match=r"1 is out of range"):
        check_number(1, field="x", low=0, high=1, high_open=True)
    assert check_number(0.5, field="x", low=0, high=1, high_open=True) == 0.5


@pytest.mark.parametrize(("make", "field"), [
    (partial(ExploreConfig, level=1.0), "level"),
    (partial(ExploreConfig, sigma=math.nan), "sigma"),
    (partial(ExploreConfig, max_planned_ratio=2), "max_planned_ratio"),
    (partial(PredictorConfig, level=1.0), "level"),
    (partial(poisson_workload, 0), "num_jobs"),
    (partial(poisson_workload, 5, jobs_per_hour=0.0), "jobs_per_hour"),
])
def test_configs_moved_onto_the_shared_checker_name_their_field(make: partial, field: str) -> None:
    with pytest.raises(InputError) as caught:
        make()
    assert f"field '{field}'" in str(caught.value) and "\n" not in str(caught.value)


def test_a_workload_row_out_of_range_names_file_row_and_field(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,0,32\n")
    with pytest.raises(InputError, match=r"w.csv: field 'num_replicas': row 2: 0 is out of range"):
        read_sia_workload(path)
    path.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1.5,32\n")
    with pytest.raises(InputError, match=r"row 2: 1.5 is not a whole number"):
        read_sia_workload(path)
