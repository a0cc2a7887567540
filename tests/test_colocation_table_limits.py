"""A colocation table's intervals are finite and contain their ratio; a table of more rows than any cluster's
pairs is refused before pandas reads it (a million rows took minutes and gigabytes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import InputError
from scheduler.formats import colocation_table
from scheduler.formats.colocation_table import read_colocation_table

HEADER = "gpu_type,type_a,type_b,ratio_a,ratio_b,low_a,high_a,low_b,high_b\n"


@pytest.mark.parametrize("row, expected", [
    ("t4,a,b,0.7,0.6,0.5,inf,0.5,0.7", "finite"),
    ("t4,a,b,0.7,0.6,0.5,0.9,-inf,0.7", "finite"),
    ("t4,a,b,0.7,0.6,0.8,0.9,0.5,0.7", "low_a <= ratio_a <= high_a"),
    ("t4,a,b,0.7,0.6,0.5,0.9,0.3,0.5", "low_b <= ratio_b <= high_b"),
])
def test_an_interval_that_is_infinite_or_misses_its_ratio_is_refused(tmp_path: Path, row: str, expected: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + row + "\n")
    with pytest.raises(InputError, match=expected):
        read_colocation_table(path)


def test_an_interval_around_its_ratio_is_read(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "t4,a,b,0.7,0.6,0.5,0.9,0.6,0.7\nt4,a,c,0.7,0.6,,,,\n")
    assert len(read_colocation_table(path)) == 2


def test_a_table_of_more_rows_than_the_cap_is_refused_before_it_is_parsed(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(colocation_table, "MAX_ROWS", 3)
    path = tmp_path / "t.csv"
    rows = [f"t4,a,b{i},0.7,0.6\n" for i in range(4)]
    path.write_text("gpu_type,type_a,type_b,ratio_a,ratio_b\n" + "".join(rows[:3]))
    assert len(read_colocation_table(path)) == 3
    path.write_text("gpu_type,type_a,type_b,ratio_a,ratio_b\n" + "".join(rows))
    with pytest.raises(InputError, match="more than 3 rows"):
        read_colocation_table(path)
