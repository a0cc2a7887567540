"""Any table of measured co-located pairs → a results directory every analysis command reads.

One row per measured pair (repeats = several rows of the same pair). Canonical column names
(:data:`CANONICAL`); a user's own names are mapped onto them by ``--column canonical=theirs`` flags or a
small YAML file (``columns: {canonical: theirs}``, ``defaults: {gpu_type: v100, sharing: mps}``):

===================================  ===========================================================================
column                               meaning
===================================  ===========================================================================
``job_a``, ``job_b``                 the two job types (``model@batch`` or any name), required
``gpu_type``                         GPU type, required (or ``defaults.gpu_type`` / ``--gpu-type``)
``sharing``                          ``timeslice``, ``mps``, ``mpsNN``…; default ``timeslice``
``time_a``, ``time_b``               each job's iteration time **alone** (s)
``colocated_time_a``, ``…_b``        each job's iteration time **together** (s)
``speed_a``, ``speed_b``             each job's normalized speed t/t′ = co-located / solo throughput
``throughput_a``, ``throughput_b``   each job's solo throughput (iterations/s), instead of ``time_*``
``memory_a``, ``memory_b``           optional: each job's peak memory alone (MiB)
``utilization_a``, ``…_b``           optional: each job's device utilization alone (%)
``status``                           optional: ``ok`` or ``infeasible`` (could not be co-located, e.g. OOM)
===================================  ===========================================================================

A row needs solo times (``time_*`` or ``throughput_*``) and either co-located times or speeds. A row with
``status = infeasible`` (or speeds both 0) is an infeasible pair and needs no co-located figures. Solo
baselines: one solo run per GPU type and job type, t = the mean over the rows that give it. Every bad value
is one :class:`~common.errors.InputError` naming the file, the row and the column as the file names it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colocate.analysis.gavel import GavelImport
from colocate.analysis.pairs_export import FORMULA_STARTS
from colocate.analysis.results import sort_job_types, split_job_type, typed_frame
from common.bounds import MAX_SECONDS
from common.errors import InputError
from common.names import shown
from profiler.gpu.sharing import SHARING_SOLO, sharing_mode, sharing_mode_names
from profiler.results.schema import JOB_COLUMNS, JOB_NUMERIC, RUN_COLUMNS, RUN_NUMERIC, STATUS_INFEASIBLE, STATUS_OK

# Compatibility matrices are square in the job types of one GPU type and sharing mode, and each comes with
# an annotated heatmap, a graph and ranked triples: beyond this many types they take minutes (64 types: 40 s
# of CPU, most of it drawing 4,096 annotated cells; 300 types:
# over 10 minutes, 19 GB), and no heatmap of them is readable. Above it, --matrices is refused with the reason.
MAX_MATRIX_JOB_TYPES = 32
MIN_VALUE = 1e-9  # the smallest positive time, speed or throughput taken (1e-320 would overflow 1/t and t/t')
RESULT_FILES = ("meta.json", "runs.parquet", "jobs.parquet", "runs.csv", "jobs.csv")

CANONICAL = ("job_a", "job_b", "gpu_type", "sharing", "time_a", "time_b", "colocated_time_a", "colocated_time_b",
             "speed_a", "speed_b", "throughput_a", "throughput_b", "memory_a", "memory_b", "utilization_a",
             "utilization_b", "status")


@dataclass(frozen=True)
class PairColumns:
    """Which column of the user's file holds each canonical field, and constants for absent ones."""

    names: Mapping[str, str] = field(default_factory=dict)  # canonical -> the file's column
    defaults: Mapping[str, str] = field(default_factory=dict)  # canonical -> value for every row

    def column(self, canonical: str) -> str:
        return self.names.get(canonical, canonical)


def parse_column_flags(flags: list[str], *, source: str = "--column") -> dict[str, str]:
    """``["job_a=model1", ...]`` → ``{"job_a": "model1"}``; unknown canonical names are errors."""
    out: dict[str, str] = {}
    for flag in flags:
        canonical, sep, theirs = flag.partition("=")
        if not sep or not theirs.strip():
            raise InputError(f"{flag!r} is not CANONICAL=THEIRS", source=source, field="--column",
                             valid="e.g. --column job_a=model_1")
        _check_canonical(canonical.strip(), source)
        out[canonical.strip()] = theirs.strip()
    return out


def _check_canonical(name: str, source: str | Path) -> None:
    if name not in CANONICAL:
        raise InputError(f"unknown column {name!r}", source=source, field=name, valid=", ".join(CANONICAL))


def load_column_map(path: str | Path) -> PairColumns:
    """A YAML file ``{columns: {canonical: theirs}, defaults: {canonical: value}}``."""
    from common.safe_load import load_yaml

    p = Path(path)
    if not p.is_file():
        raise InputError("column map not found", source=p, field="--columns", valid="a YAML file")
    data = load_yaml(p, field="columns", what="column map") or {}
    if not isinstance(data, dict) or set(data) - {"columns", "defaults"}:
        raise InputError("expected the keys columns and/or defaults", source=p, field=str(next(iter(data), "")),
                         valid="columns, defaults")
    parts: dict[str, dict[str, str]] = {}
    for key in ("columns", "defaults"):
        block = data.get(key) or {}
        if not isinstance(block, dict):
            raise InputError("expected a mapping", source=p, field=key, valid="canonical name: value")
        for name in block:
            _check_canonical(str(name), p)
        parts[key] = {str(k): str(v) for k, v in block.items()}
    return PairColumns(parts["columns"], parts["defaults"])


@dataclass(frozen=True)
class _Table:
    """The file's cells by column name (stripped strings, None for empty), and each row's line number."""

    columns: dict[str, list[str | None]]
    lines: list[int]

    def __len__(self) -> int:
        return len(self.lines)


def _cell(frame: _Table, i: int, canonical: str, cols: PairColumns) -> str | None:
    values = frame.columns.get(cols.column(canonical))
    value = values[i] if values is not None else None
    return value if value is not None else cols.defaults.get(canonical)


def _positive(text: str | None, row: int, canonical: str, cols: PairColumns, source: Path, *,
              allow_zero: bool = False) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero) or 0 < value < MIN_VALUE \
            or value > MAX_SECONDS:
        raise InputError(f"row {row}: {text!r} is not a number in [{MIN_VALUE:g}, {MAX_SECONDS:g}]", source=source,
                         field=cols.column(canonical),
                         valid=f"a number in [{MIN_VALUE:g}, {MAX_SECONDS:g}]" + (" (0 = infeasible)" if allow_zero else ""))
    return value


@dataclass
class _Row:
    gpu: str
    sharing: str
    jobs: tuple[str, str]
    solo: tuple[float, float]
    ratio: tuple[float, float] | None  # None = infeasible
    memory: tuple[float | None, float | None]
    utilization: tuple[float | None, float | None]


def _solo_time(frame: _Table, i: int, side: str, cols: PairColumns, source: Path) -> float:
    row = frame.lines[i]
    t = _positive(_cell(frame, i, f"time_{side}", cols), row, f"time_{side}", cols, source)
    if t is not None:
        return t
    x = _positive(_cell(frame, i, f"throughput_{side}", cols), row, f"throughput_{side}", cols, source)
    if x is not None:
        return 1.0 / x
    raise InputError(f"row {row}: no solo time for job {side}", source=source, field=cols.column(f"time_{side}"),
                     valid=f"a column {cols.column(f'time_{side}')!r} (s) or {cols.column(f'throughput_{side}')!r} "
                           "(iterations/s)")


def _ratios(frame: _Table, i: int, cols: PairColumns, source: Path, solo: tuple[float, float]
            ) -> tuple[float, float] | None:
    row = frame.lines[i]
    status = (_cell(frame, i, "status", cols) or STATUS_OK).lower()
    if status not in (STATUS_OK, STATUS_INFEASIBLE):
        raise InputError(f"row {row}: status {status!r}", source=source, field=cols.column("status"),
                         valid=f"{STATUS_OK} or {STATUS_INFEASIBLE}")
    if status == STATUS_INFEASIBLE:
        return None
    speeds = [_positive(_cell(frame, i, f"speed_{s}", cols), row, f"speed_{s}", cols, source, allow_zero=True)
              for s in "ab"]
    if all(v is not None for v in speeds):
        if speeds[0] == 0 and speeds[1] == 0:
            return None
        for s, v in zip("ab", speeds):
            if v == 0:
                raise InputError(f"row {row}: speed 0 for one job only", source=source, field=cols.column(f"speed_{s}"),
                                 valid="both speeds > 0, or both 0 (infeasible pair)")
        return float(speeds[0]), float(speeds[1])  # type: ignore[arg-type]
    together = [_positive(_cell(frame, i, f"colocated_time_{s}", cols), row, f"colocated_time_{s}", cols, source)
                for s in "ab"]
    if all(v is not None for v in together):
        return solo[0] / together[0], solo[1] / together[1]  # type: ignore[operator]
    missing = next(f"speed_{s}" for s, v in zip("ab", speeds) if v is None)
    raise InputError(f"row {row}: neither co-located times nor speeds for both jobs", source=source,
                     field=cols.column(missing), valid=f"columns {cols.column('colocated_time_a')!r}/"
                     f"{cols.column('colocated_time_b')!r} (s) or {cols.column('speed_a')!r}/"
                     f"{cols.column('speed_b')!r} (t/t')")


def _parse_row(frame: _Table, i: int, cols: PairColumns, source: Path) -> _Row:
    row = frame.lines[i]
    names = []
    for canonical in ("job_a", "job_b", "gpu_type"):
        value = _cell(frame, i, canonical, cols)
        if not value:
            raise InputError(f"row {row}: empty {canonical}", source=source, field=cols.column(canonical),
                             valid="a non-empty name" + (" (or --gpu-type)" if canonical == "gpu_type" else ""))
        names.append(value)
    sharing = (_cell(frame, i, "sharing", cols) or "timeslice").lower()
    if parse_sharing(sharing) is None:
        raise InputError(f"row {row}: sharing {sharing!r}", source=source, field=cols.column("sharing"),
                         valid=_valid_sharing())
    solo = (_solo_time(frame, i, "a", cols, source), _solo_time(frame, i, "b", cols, source))
    optional = {}
    for kind in ("memory", "utilization"):
        optional[kind] = tuple(_positive(_cell(frame, i, f"{kind}_{s}", cols), row, f"{kind}_{s}", cols, source,
                                         allow_zero=True) for s in "ab")
    return _Row(names[2].lower(), sharing, (names[0], names[1]), solo, _ratios(frame, i, cols, source, solo),
                optional["memory"], optional["utilization"])  # type: ignore[arg-type]


def read_pairs_table(path: str | Path, columns: PairColumns = PairColumns()) -> list[_Row]:
    """Parse and validate every row of a pair CSV (``#`` lines are comments)."""
    p = Path(path)
    if not p.is_file():
        raise InputError("pair table not found", source=p, field="FILE.csv", valid="a CSV file path")
    frame = _read_csv(p)
    for canonical, theirs in columns.names.items():
        if theirs not in frame.columns:
            raise InputError(f"column {theirs!r} (mapped to {canonical}) is not in the header", source=p,
                             field=theirs, valid=", ".join(frame.columns))
    for canonical in ("job_a", "job_b"):
        if columns.column(canonical) not in frame.columns:
            raise InputError(f"no column {columns.column(canonical)!r}", source=p, field=canonical,
                             valid=f"header columns: {', '.join(frame.columns)} (map yours with "
                                   f"--column {canonical}=NAME)")
    rows = [_parse_row(frame, i, columns, p) for i in range(len(frame))]
    if not rows:
        raise InputError("no pair rows", source=p, field="job_a", valid="at least one measured pair")
    return rows


def _read_csv(path: Path) -> _Table:
    """The CSV's cells (``#`` starts a comment, as in pandas); a row with more or fewer cells than the
    header is an error naming its line — pandas would silently shift it into an index column."""
    import csv

    from common.safe_load import read_text

    text = read_text(path, field="FILE.csv", what="pair table")
    numbered = [(n, line.split("#", 1)[0]) for n, line in enumerate(text.splitlines(), start=1)]
    numbered = [(n, line) for n, line in numbered if line.strip()]
    if not numbered:
        raise InputError("no header row", source=path, field="job_a", valid="a CSV with a header row")
    try:
        reader = csv.reader([line for _, line in numbered], strict=True)
        records: list[list[str]] = []
        for record in reader:  # one record per line: a quoted line break would shift every later row
            if reader.line_num != len(records) + 1:
                line = numbered[len(records)][0]
                raise InputError(f"row at line {line} has a line break inside a quoted cell", source=path,
                                 field=f"line {line}", valid="one row per line")
            records.append(record)
    except csv.Error as err:
        raise InputError(f"not a readable CSV ({err})", source=path, field="job_a",
                         valid="a CSV with a header row") from None
    bad = next(((n, c) for (n, _), rec in zip(numbered, records) for c in rec if not c.isprintable()), None)
    if bad is not None:
        raise InputError(f"row at line {bad[0]}: cell {shown(bad[1])} holds a control character", source=path,
                         field=f"line {bad[0]}", valid="printable text")
    header = [h.strip() for h in records[0]]
    if len(set(header)) != len(header) or not all(header):
        raise InputError(f"header {shown(','.join(header))} has empty or repeated column names", source=path,
                         field="header", valid="distinct column names")
    columns: dict[str, list[str | None]] = {h: [] for h in header}
    for (line, _), record in zip(numbered[1:], records[1:]):
        if len(record) != len(header):
            raise InputError(f"row at line {line} has {len(record)} cells, the header {len(header)}", source=path,
                             field=f"line {line}", valid=f"{len(header)} comma-separated cells per row")
        for name, value in zip(header, record):
            value = value.strip()
            if value[:1] == "'" and value[1:2] in FORMULA_STARTS:  # export-pairs' guard against spreadsheet formulas
                value = value[1:]
            columns[name].append(value or None)
    return _Table(columns, [line for line, _ in numbered[1:]])


def import_pairs(path: str | Path, columns: PairColumns = PairColumns()) -> GavelImport:
    """Rows of our results schema (solo runs + one pair run per row) from a pair table."""
    from colocate.analysis.gavel import _add_pair, _run_row

    p = Path(path)
    rows = read_pairs_table(p, columns)
    campaign = f"pairs-{p.stem}"
    runs: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    solo: dict[tuple[str, str], list[float]] = {}
    extra: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        for side, job in enumerate(r.jobs):
            solo.setdefault((r.gpu, job), []).append(r.solo[side])
            for kind, values in (("memory", r.memory), ("utilization", r.utilization)):
                if values[side] is not None:
                    extra.setdefault((r.gpu, job, kind), []).append(float(values[side]))  # type: ignore[arg-type]
    for (gpu, job), times in sorted(solo.items()):
        run = _run_row(campaign, gpu, "solo", SHARING_SOLO, [job], 0)
        run["status"] = STATUS_OK
        memory, util = extra.get((gpu, job, "memory")), extra.get((gpu, job, "utilization"))
        run["gpu_util_mean"] = sum(util) / len(util) if util else None
        t = sum(times) / len(times)
        jobs.append({**_job_row(run, job), "iter_time_s": t, "solo_iter_time_s": t,
                     "peak_memory_mib": max(memory) if memory else None})
        runs.append(run)
    repeats: dict[tuple[str, str, tuple[str, ...]], int] = {}
    for r in rows:
        order = sort_job_types(list(r.jobs)) if r.jobs[0] != r.jobs[1] else list(r.jobs)
        flip = list(r.jobs) != order
        solo_t = tuple(r.solo[::-1]) if flip else r.solo
        key = (r.gpu, r.sharing, tuple(order))
        repeat = repeats[key] = repeats.get(key, -1) + 1
        if r.ratio is None:
            colocated = (0.0, 0.0)
        else:
            ratio = r.ratio[::-1] if flip else r.ratio
            colocated = (ratio[0] / solo_t[0], ratio[1] / solo_t[1])  # co-located throughput = ratio × solo
        _add_pair_in(runs, jobs, campaign, r.gpu, r.sharing, (order[0], order[1]), colocated,
                     (1.0 / solo_t[0], 1.0 / solo_t[1]), repeat, _add_pair)
    meta = {
        "campaign": campaign,
        "source": {"kind": "pair-table", "file": str(p), "columns": dict(columns.names),
                   "defaults": dict(columns.defaults)},
        "gpu_types": sorted({r.gpu for r in rows}),
        "counts": {"rows": len(rows), "infeasible": sum(r.ratio is None for r in rows), "job_types": len(solo)},
        "notes": ["ratio = t/t' (co-located / solo throughput); t = solo iteration time (mean over the rows "
                  "that give it); delta = (t_a + t_b) / max(t'_a, t'_b)."],
    }
    return GavelImport(typed_frame(runs, RUN_COLUMNS, RUN_NUMERIC), typed_frame(jobs, JOB_COLUMNS, JOB_NUMERIC), meta)


def _job_row(run: dict[str, Any], job_type: str) -> dict[str, Any]:
    model, batch = split_job_type(job_type)
    return {"run_id": run["run_id"], "cell_id": run["cell_id"], "job_index": 0, "model": model,
            "batch_size": batch, "job_type": job_type, "status": STATUS_OK, "error": ""}


def parse_sharing(label: str) -> tuple[str, int | None] | None:
    """A table's sharing label as (registered mode, thread percentage): ``mps50`` → ``("mps", 50)``; None if
    no registered mode reads it (a percentage only for modes with thread partitions, 1-100)."""
    for name in sharing_mode_names():
        if label == name:
            return name, None
        rest = label[len(name):]
        if sharing_mode(name).thread_partitions and label.startswith(name) and rest.isdigit() and 1 <= int(rest) <= 100:
            return name, int(rest)
    return None


def _valid_sharing() -> str:
    """What a sharing cell may hold (read from the registry each time: modes can be registered at run time)."""
    partitioned = [n for n in sharing_mode_names() if sharing_mode(n).thread_partitions]
    return ", ".join(sharing_mode_names()) + "".join(f" or {n}NN (thread percentage)" for n in partitioned)


def _add_pair_in(runs: list, jobs: list, campaign: str, gpu: str, sharing: str, job_types: tuple[str, str],
                 colocated: tuple[float, float], solo: tuple[float, float], repeat: int, add_pair: Any) -> None:
    """Gavel's pair-row builder, then the run's sharing mode set to the table's."""
    first_run, first_job = len(runs), len(jobs)
    add_pair(runs, jobs, campaign, gpu, job_types, colocated, solo, repeat)
    cell_id = f"{gpu}:pair|{sharing}|" + "+".join(job_types)
    for record in (*runs[first_run:], *jobs[first_job:]):
        record["cell_id"], record["run_id"] = cell_id, f"{cell_id}#r{repeat}"
        if "sharing" in record:  # "mps50" = MPS with a 50 % thread limit per client
            record["sharing"], record["mps_thread_percentage"] = parse_sharing(sharing) or (sharing, None)
        if record.get("error", "").startswith("Gavel: [0, 0]"):
            record["error"] = "measured infeasible (pair table)"


def check_matrix_size(imported: GavelImport) -> None:
    """Refuse matrices for more than :data:`MAX_MATRIX_JOB_TYPES` job types on one GPU type and sharing mode."""
    jobs = imported.jobs
    if jobs.empty:
        return
    runs = imported.runs.set_index("run_id")
    keyed = jobs.assign(gpu_type=jobs["run_id"].map(runs["gpu_type"]), sharing=jobs["run_id"].map(runs["sharing"]))
    pairs = keyed[keyed["sharing"] != SHARING_SOLO]
    if pairs.empty:
        return
    counts = pairs.groupby(["gpu_type", "sharing"])["job_type"].nunique()
    (gpu, sharing), most = counts.idxmax(), int(counts.max())
    if most > MAX_MATRIX_JOB_TYPES:
        raise InputError(f"{most} job types on {gpu} ({sharing}): a compatibility matrix is square in them and "
                         f"is drawn for at most {MAX_MATRIX_JOB_TYPES}", field="--matrices",
                         valid="--no-matrices (the results directory alone), or fewer job types per GPU type")


def prepare_results_dir(out: str | Path, *, force: bool, clear: bool = True) -> Path:
    """``out`` ready for an import: new or empty; an existing results directory only with ``force`` (then
    cleared first, so no old matrices stay beside the new runs); never another kind of directory, never a
    scheduler state directory. ``clear=False`` only checks (before the conversion: fail fast)."""
    import shutil

    from profiler.campaign.outdir import prepare_out_dir, refuse_state_target

    path = Path(out)
    refuse_state_target(path)
    if path.is_dir() and any(path.iterdir()):
        looks_like_results = any((path / name).exists() for name in RESULT_FILES)
        if not force:
            raise InputError("already holds files" + (" of a results directory" if looks_like_results else ""),
                             source=path, field="--out", valid="a new or empty directory, or --force to replace "
                                                               "an earlier import")
        if not looks_like_results:
            raise InputError("is not a results directory (no meta.json, runs.parquet); not cleared", source=path,
                             field="--force", valid="a new, empty or results directory")
        if not clear:
            return path
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    if not clear:
        for parent in [path, *path.parents]:
            if parent.exists() and not parent.is_dir():
                raise InputError("is a file" if parent == path else f"lies under the file {parent}", source=path,
                                 field="--out", valid="a directory path")
        return path
    return prepare_out_dir(path)
