"""``read_results_dir``: the one reader of a results directory (the analysis, the scheduler's solo times and
``--colocation DIR`` all go through it): what it holds as one ``ResultsDir``, its CSV copies where the Parquet files
are missing or damaged, and one-line errors naming the file and the column."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from colocate.analysis.results import load_results
from common.errors import InputError
from profiler.results.store import ResultsStore, read_results_dir


def _campaign(root: Path) -> Path:
    store = ResultsStore(root)
    for i, job_type in enumerate(("tiny_cnn@2", "tiny_cnn@8")):
        run_id = f"solo|none|{job_type}#r0"
        store.append_run({"run_id": run_id, "cell_id": run_id[:-3], "kind": "solo", "gpu_type": "cpu", "status": "ok",
                          "job_types": job_type, "sharing": "none", "image_size": 32, "group_size": 1},
                         [{"run_id": run_id, "job_index": 0, "job_type": job_type, "iter_time_s": 0.1 * (i + 1),
                           "model": "tiny_cnn", "batch_size": 2 if i == 0 else 8, "status": "ok",
                           "precision": "tf32"}])
    store.write_meta({"campaign": "t"})
    return root


def test_one_record_of_what_a_directory_holds(tmp_path: Path) -> None:
    root = _campaign(tmp_path / "res")
    jobs = pd.read_parquet(root / "jobs.parquet")
    orphan = jobs.iloc[[0]].assign(run_id="killed-between-writes#r0")  # a job row whose run was never committed
    pd.concat([jobs, orphan]).to_parquet(root / "jobs.parquet")
    found = read_results_dir(root)
    assert found.root == root and found.meta == {"campaign": "t"} and len(found.runs) == 2
    assert sorted(found.jobs["job_type"]) == ["tiny_cnn@2", "tiny_cnn@8"]  # the uncommitted row is not read
    assert found.kernels.empty
    assert len(load_results(root).jobs) == 2  # the analysis reads the same


def test_csv_copies_stand_in_for_missing_or_damaged_parquet(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = _campaign(tmp_path / "res")
    data = (root / "runs.parquet").read_bytes()
    (root / "runs.parquet").write_bytes(data[: len(data) // 2])
    assert len(load_results(root).runs) == 2
    assert "is damaged; read runs.csv instead" in capsys.readouterr().err
    assert (root / "runs.parquet").read_bytes() == data[: len(data) // 2]  # a reader changes nothing
    (root / "runs.parquet").unlink()
    assert len(read_results_dir(root).runs) == 2


def test_errors_name_the_directory_file_and_column(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        read_results_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no runs.parquet here"):
        read_results_dir(tmp_path / "empty")
    root = _campaign(tmp_path / "res")
    pd.read_parquet(root / "jobs.parquet").drop(columns=["iter_time_s"]).to_parquet(root / "jobs.parquet")
    with pytest.raises(InputError) as caught:
        read_results_dir(root)
    text = str(caught.value)
    assert "jobs.parquet" in text and "field 'iter_time_s'" in text and "missing column" in text and "\n" not in text


def test_solo_times_are_built_through_the_reader(tmp_path: Path) -> None:
    from scheduler.formats import solo_times

    root = tmp_path / "results"
    _campaign(root / "h100" / "first-call")
    (tmp_path / "out").mkdir()
    written = solo_times.build_solo_times(root, tmp_path / "out")
    assert [p.name for p in written] == ["solo-h100.csv"]
    rows = [line for line in written[0].read_text().splitlines() if not line.startswith("#")]
    assert rows[0].startswith("gpu_type,model,batch_size") and len(rows) == 3
