"""The results directory of a campaign: runs.parquet, jobs.parquet, kernels.parquet, meta.json (+ CSVs).

Where no Parquet engine is installed (a bare GPU image) the tables are CSV only; the store reads them and,
on a machine with pyarrow, writes the Parquet files again on the first read.

Appends are atomic and keyed by ``run_id``: each write goes to a temporary file that replaces the old one
with ``os.replace``, jobs before runs, and ``runs.parquet`` is the commit record — job rows whose run is not
in it (a kill between the two writes) are ignored and overwritten. A killed campaign therefore loses at most
the run in flight and a rerun never duplicates a row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from common.files import (
    atomic_write_json,
    atomic_write_table,
    parquet_available,
)
from profiler.results.schema import (
    JOB_COLUMNS,
    JOBS_FILE,
    KERNEL_COLUMNS,
    KERNELS_FILE,
    META_FILE,
    RUN_COLUMNS,
    RUNS_FILE,
    STATUS_SKIPPED,
)

# What a consumer needs of each table: the rest of a table's columns may be missing (older files lack newer ones).
NEEDED_COLUMNS: dict[str, tuple[str, ...]] = {
    RUNS_FILE: ("run_id", "cell_id", "kind", "gpu_type", "status", "job_types"),
    JOBS_FILE: ("run_id", "job_index", "job_type", "iter_time_s"),
    KERNELS_FILE: ("job_type", "kernel", "duration_us"),
}
_SCHEMA = {RUNS_FILE: RUN_COLUMNS, JOBS_FILE: JOB_COLUMNS, KERNELS_FILE: KERNEL_COLUMNS}
_FROM = "a directory written by `colocate profile` or `colocate import-gavel`"


def _frame(rows: Iterable[Mapping[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    frame = pd.DataFrame(list(rows))
    for column in columns:
        if column not in frame.columns:
            frame[column] = pd.NA
    return frame[list(columns)]


def _read_csv(path: Path) -> pd.DataFrame:
    """A table's CSV copy: empty cells are missing values, except in text columns (an empty error is "")."""
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    for column in ("error", "clock_event_reasons"):
        if column in frame.columns:
            frame[column] = frame[column].astype(object).where(frame[column].notna(), "").astype(str)
    return frame


class ResultsStore:
    """Read and append the tables of one results directory."""

    def __init__(self, root: str | Path, *, readonly: bool = False) -> None:
        """``readonly``: read only, never write (a damaged table is read from its CSV copy but not rebuilt), for
        commands that must change nothing (``profile --dry-run``)."""
        self.root = Path(root)
        self.readonly = readonly

    # -- reading -------------------------------------------------------------------------------------
    def _read(self, name: str, columns: tuple[str, ...]) -> pd.DataFrame:
        path, csv_path = self.root / name, (self.root / name).with_suffix(".csv")
        if not path.is_file() and csv_path.is_file():  # written where no Parquet engine was installed
            frame = _read_csv(csv_path)
            if parquet_available() and not self.readonly:
                self._write_table(name, frame)  # Parquet again, for the analysis
            return frame
        if not path.is_file():
            return _frame([], columns)
        if not parquet_available() and csv_path.is_file():
            return _read_csv(csv_path)
        try:
            return pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for a truncated or foreign file
            return self._recover(name, columns, exc)

    def _recover(self, name: str, columns: tuple[str, ...], exc: Exception) -> pd.DataFrame:
        """A damaged Parquet table: rebuild it from its CSV copy when that is intact, else say how to go on."""
        import sys

        from common.errors import InputError

        path, csv_path = self.root / name, (self.root / name).with_suffix(".csv")
        try:
            frame = _read_csv(csv_path)
            if columns[0] not in frame.columns or not set(frame.columns) <= set(columns):
                raise ValueError("its columns differ from the schema")  # (older files lack newer columns)
        except Exception as csv_exc:
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
            raise InputError(f"{name} is damaged ({why}) and {csv_path.name} cannot replace it "
                             f"({type(csv_exc).__name__})", source=self.root, field=name,
                             valid=f"move {name} and {csv_path.name} away and rerun to measure those runs again") from None
        if self.readonly:
            print(f"warning: {path} is damaged; read {csv_path.name} instead ({len(frame)} rows; a run rebuilds it)",
                  file=sys.stderr)
            return frame
        print(f"warning: {path} was damaged; rebuilt it from {csv_path.name} ({len(frame)} rows)", file=sys.stderr)
        self._write_table(name, frame)
        return frame

    def runs(self) -> pd.DataFrame:
        return self._read(RUNS_FILE, RUN_COLUMNS)

    def jobs(self, runs: pd.DataFrame | None = None) -> pd.DataFrame:
        """Job rows of committed runs; pass ``runs`` when already read, to spare a second read of it."""
        jobs = self.table(JOBS_FILE)
        committed = set((self.runs() if runs is None else runs)["run_id"])
        return jobs[jobs["run_id"].isin(committed)].reset_index(drop=True)

    def kernels(self) -> pd.DataFrame:
        return self._read(KERNELS_FILE, KERNEL_COLUMNS)

    def table(self, name: str) -> pd.DataFrame:
        """``name`` (runs/jobs/kernels.parquet) as read, refused in one line when it lacks a needed column."""
        from common.errors import InputError

        frame = self._read(name, _SCHEMA[name])
        missing = [c for c in NEEDED_COLUMNS[name] if c not in frame.columns]
        if missing:
            raise InputError(f"missing column(s) {', '.join(missing)}", source=self.root / name, field=missing[0],
                             valid=f"the results schema: {', '.join(_SCHEMA[name])}")
        return frame

    def finished_run_ids(self) -> set[str]:
        """Runs that are done for good; skipped runs (no GPU, no MPS here) are retried on resume."""
        runs = self.runs()
        return set(runs.loc[runs["status"] != STATUS_SKIPPED, "run_id"])

    def read_meta(self) -> dict[str, Any]:
        from common.errors import InputError
        from common.safe_load import load_json

        path = self.root / META_FILE
        if not path.is_file():
            return {}
        meta = load_json(path, what="meta.json", valid="the meta.json a campaign writes")
        if not isinstance(meta, dict):
            raise InputError(f"holds a {type(meta).__name__}, not an object", source=path, field="meta.json",
                             valid="the JSON object a campaign writes; move the file away to start afresh")
        return meta

    # -- writing -------------------------------------------------------------------------------------
    def append_run(self, run_row: Mapping[str, Any], job_rows: Iterable[Mapping[str, Any]]) -> None:
        """Add one run (replacing an earlier row with the same run_id) — jobs first, runs last."""
        run_id = run_row["run_id"]
        jobs = self._read(JOBS_FILE, JOB_COLUMNS)
        new_jobs = _frame(job_rows, JOB_COLUMNS)
        jobs = pd.concat([jobs[jobs["run_id"] != run_id], new_jobs], ignore_index=True) if len(jobs) else new_jobs
        self._write_table(JOBS_FILE, jobs)
        runs = self.runs()
        new_run = _frame([run_row], RUN_COLUMNS)
        runs = pd.concat([runs[runs["run_id"] != run_id], new_run], ignore_index=True) if len(runs) else new_run
        self._write_table(RUNS_FILE, runs)

    def append_kernels(self, rows: pd.DataFrame) -> None:
        """Add kernel rows, replacing earlier rows of the same (job type, image size, GPU type, backend)."""
        if rows.empty:
            return
        keys = ["job_type", "image_size", "gpu_type", "backend"]
        new = _frame(rows.to_dict("records"), KERNEL_COLUMNS)
        kernels = self.kernels()
        if len(kernels):
            old_keys = kernels[keys].astype(str).agg("|".join, axis=1)
            new_keys = set(new[keys].astype(str).agg("|".join, axis=1))
            kernels = kernels[~old_keys.isin(new_keys)]
        merged = pd.concat([kernels, new], ignore_index=True) if len(kernels) else new
        self._write_table(KERNELS_FILE, merged)

    def kernel_job_types(self) -> set[str]:
        kernels = self.kernels()
        return set(kernels["job_type"].astype(str)) if len(kernels) else set()

    def _write_table(self, name: str, frame: pd.DataFrame) -> None:
        atomic_write_table(frame, self.root / name)

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        atomic_write_json(meta, self.root / META_FILE)


@dataclass(frozen=True)
class ResultsDir:
    """What one results directory holds: its runs, the job rows of those runs, its kernel rows and meta.json."""

    root: Path
    runs: pd.DataFrame
    jobs: pd.DataFrame
    kernels: pd.DataFrame
    meta: dict[str, Any]


def read_results_dir(path: str | Path) -> ResultsDir:
    """The one reader of a finished results directory (the analysis, the scheduler's solo times, ``--colocation
    DIR``): read only, a damaged table from its CSV copy; a one-line :class:`InputError` for a path that is not a
    results directory or a table without a needed column (:data:`NEEDED_COLUMNS`)."""
    from common.errors import InputError

    root = Path(path)
    if not root.exists():
        raise InputError("does not exist", source=root, valid="a results directory from `colocate profile`")
    if not root.is_dir():
        raise InputError("is not a directory", source=root, valid="a results directory from `colocate profile`")
    if not ((root / RUNS_FILE).is_file() or (root / RUNS_FILE).with_suffix(".csv").is_file()):
        raise InputError(f"no {RUNS_FILE} here (empty or not a results directory)", source=root, valid=_FROM)
    store = ResultsStore(root, readonly=True)
    runs = store.table(RUNS_FILE)
    return ResultsDir(root, runs, store.jobs(runs), store.table(KERNELS_FILE), store.read_meta())
