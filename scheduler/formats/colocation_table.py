"""The colocation table file: measured (or predicted) pair ratios per GPU type, one CSV row per pair.

Columns::

    gpu_type,type_a,type_b,ratio_a,ratio_b

* ``type_a`` / ``type_b``: a job type, either ``model@batch`` (e.g. ``resnet50@64``) or an application
  name (applies to every batch size of it).
* ``ratio_a`` / ``ratio_b``: co-located throughput over solo throughput of each job, ``t / t'`` (so a value
  of 0.7 means the job runs at 70 % of its solo speed while sharing the GPU). 0 marks an infeasible pair
  (OOM or crash). Values must lie in [0, 1.5]: co-location never makes a job much faster than alone, so a
  larger value is almost certainly t'/t written the wrong way round.
* Optional interval columns ``low_a, high_a, low_b, high_b`` (with ``interval_level``, default 0.8): each ratio's
  interval, as ``colocate predict`` writes for predicted rows (blank for measured ones) and ``colocate learned``
  for learned ones; the pair belief takes a row's interval as its prior's spread. All four or none per row,
  finite numbers >= 0 with low <= ratio <= high. ``delta_low, delta_high``: δ's interval, shown, not read.
* At most :data:`MAX_ROWS` rows.
* Other extra columns (``source``, ``delta``, ``n``, ``evidence``, ...) are kept but ignored by the scheduler.

The format lives with the scheduler, which reads these tables (:func:`read_colocation_table`, wrapped by
``scheduler.model.colocation.ColocationTable``); the analysis layer (``colocate.analysis.matrix``,
``colocate.prediction.predict``) writes them from profiling campaigns with :func:`write_colocation_table`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

    import pandas as pd

    from scheduler.model.colocation import ColocationTable

COLUMNS: tuple[str, ...] = ("gpu_type", "type_a", "type_b", "ratio_a", "ratio_b")
INTERVAL_COLUMNS: tuple[str, ...] = ("low_a", "high_a", "low_b", "high_b")
OPTIONAL_NUMBERS: tuple[str, ...] = ("delta_low", "delta_high")
MAX_ROWS = 100_000  # 40 GPU types x 50 job types x 50 = 100,000 ordered pairs; read in seconds
MAX_RATIO = 1.5
PRECISION_BATCH = r"[1-9][0-9]{0,7}(?::[A-Za-z0-9_]{1,16})?"  # after '@': 64 or 64:bf16


def validate_colocation_table(frame: "pd.DataFrame", *, source: str = "<colocation table>") -> "pd.DataFrame":
    """Check columns, types and ranges; return a cleaned copy (stripped strings, float ratios).

    Raises :class:`InputError` naming ``source``, the row (header = row 1) and the field.
    """
    import pandas as pd

    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}", source=source, field=missing[0],
                         valid="header " + ",".join(COLUMNS))
    out = frame.copy()
    for col in ("gpu_type", "type_a", "type_b"):
        values = out[col]
        bad = values.isna() | (values.astype(str).str.strip() == "")
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0]) + 2
            raise InputError(f"row {row}: empty {col}", source=source, field=col,
                             valid="a GPU type name" if col == "gpu_type" else "model@batch or an application name")
        out[col] = values.astype(str).str.strip()
        if col != "gpu_type":  # model@batch needs a whole positive batch after '@' (and may name a precision)
            model, at, batch = out[col].str.partition("@").T.to_numpy()
            bad = (at == "@") & ~pd.Series(batch).str.fullmatch(PRECISION_BATCH).to_numpy(dtype=bool)
            bad |= (model == "")
            if bad.any():
                i = int(bad.nonzero()[0][0])
                raise InputError(f"row {i + 2}: {out[col].iloc[i][:60]!r} is not a job type", source=source,
                                 field=col, valid="model@batch[:precision] (batch a positive integer) or an "
                                                  "application name")
    for col in ("ratio_a", "ratio_b"):
        numeric = pd.to_numeric(out[col], errors="coerce")
        bad = numeric.isna() | (numeric < 0) | (numeric > MAX_RATIO)
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise InputError(f"row {i + 2}: {col} = '{str(frame[col].iloc[i])[:60]}'", source=source, field=col,
                             valid=f"a number in [0, {MAX_RATIO}] (t/t'; 0 = infeasible)")
        out[col] = numeric.astype(float)
    _validate_intervals(frame, out, source)
    keys = out.apply(lambda r: (r.gpu_type,) + tuple(sorted((r.type_a, r.type_b))), axis=1) if len(out) else []
    if len(out):
        dup = pd.Series(list(keys)).duplicated()
        if dup.any():
            i = int(dup.to_numpy().nonzero()[0][0])
            raise InputError(f"row {i + 2}: pair ({out.type_a.iloc[i]}, {out.type_b.iloc[i]}) on "
                             f"{out.gpu_type.iloc[i]} appears twice", source=source, field="type_b",
                             valid="one row per GPU type and unordered pair")
    return out.reset_index(drop=True)


def _bad_number(frame: "pd.DataFrame", column: str, bad: "pd.Series", source: str, valid: str) -> InputError:
    i = int(bad.to_numpy().nonzero()[0][0])
    return InputError(f"row {i + 2}: {column} = '{str(frame[column].iloc[i])[:60]}'", source=source, field=column,
                      valid=valid)


def _validate_intervals(frame: "pd.DataFrame", out: "pd.DataFrame", source: str) -> None:
    """The optional interval columns: all four or none; per row all blank or numbers >= 0 with low <= high."""
    import pandas as pd

    present = [c for c in INTERVAL_COLUMNS if c in out.columns]
    if present and len(present) < len(INTERVAL_COLUMNS):
        missing = [c for c in INTERVAL_COLUMNS if c not in out.columns]
        raise InputError(f"interval column(s) {', '.join(present)} without {', '.join(missing)}", source=source,
                         field=missing[0], valid="all of " + ",".join(INTERVAL_COLUMNS) + " or none")
    valid = "blank or a finite number >= 0 (the ratio's interval)"
    for col in (*present, *(c for c in OPTIONAL_NUMBERS if c in out.columns)):
        numeric = pd.to_numeric(out[col], errors="coerce")
        bad = ((numeric.isna() & out[col].notna() & (out[col].astype(str).str.strip() != "")) | (numeric < 0)
               | numeric.isin([float("inf"), float("-inf")]))
        if bad.any():
            raise _bad_number(frame, col, bad, source, valid)
        out[col] = numeric.astype(float)
    if present:
        blank = out[list(INTERVAL_COLUMNS)].isna()
        partial = blank.any(axis=1) & ~blank.all(axis=1)
        if partial.any():
            raise _bad_number(frame, str(blank[partial].iloc[0].idxmax()), partial, source,
                              "all four interval columns given, or all four blank")
        for side in ("a", "b"):
            inverted = out[f"low_{side}"] > out[f"high_{side}"]
            if inverted.any():
                raise _bad_number(frame, f"low_{side}", inverted, source, f"a number <= high_{side}")
            ratio, slack = out[f"ratio_{side}"], 1e-9 * out[f"ratio_{side}"].abs()  # written rounded: a hair's slack
            outside = ~blank.all(axis=1) & ((out[f"low_{side}"] > ratio + slack) | (out[f"high_{side}"] < ratio - slack))
            if outside.any():
                raise _bad_number(frame, f"low_{side}", outside, source,
                                  f"an interval low_{side} <= ratio_{side} <= high_{side} (it is the ratio's)")
    if "interval_level" in out.columns:
        level = pd.to_numeric(out["interval_level"], errors="coerce")
        bad = (level.isna() & out["interval_level"].notna()) | (level <= 0) | (level >= 1)
        if bad.any():
            raise _bad_number(frame, "interval_level", bad, source, "a coverage in (0, 1), e.g. 0.8")
        out["interval_level"] = level.astype(float)


def read_colocation_table(path: str | Path) -> "pd.DataFrame":
    """Read and validate a colocation CSV; returns a DataFrame with at least :data:`COLUMNS`."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise InputError("colocation table not found", source=p, field="colocation", valid="a CSV file path")
    with p.open("rb") as lines:  # counted before pandas reads it: a huge table would take minutes and gigabytes
        if sum(1 for _ in lines) > MAX_ROWS + 1:
            raise InputError(f"has more than {MAX_ROWS:,} rows", source=p, field="gpu_type",
                             valid=f"at most {MAX_ROWS:,} pair rows (one per GPU type and ordered pair of job types)")
    try:
        frame = pd.read_csv(p, dtype={"gpu_type": str, "type_a": str, "type_b": str}, comment="#",
                            encoding="utf-8-sig")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise InputError(f"not a readable CSV ({type(err).__name__})", source=p, field="gpu_type",
                         valid="header " + ",".join(COLUMNS)) from None
    if frame.empty and all(c in frame.columns for c in COLUMNS):  # a header alone is no table: say so
        raise InputError("has a header but no pair rows", source=p, field="gpu_type",
                         valid="at least one row gpu_type,type_a,type_b,ratio_a,ratio_b (for no pairs at all: "
                               "--belief none, or leave --colocation out)")
    return validate_colocation_table(frame, source=str(p))


def write_colocation_table(frame: "pd.DataFrame", path: str | Path) -> Path:
    """Validate ``frame`` and write it as CSV (the five columns first, extra columns after). Returns the path."""
    clean = validate_colocation_table(frame, source=str(path))
    extra = [c for c in clean.columns if c not in COLUMNS]
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    clean[list(COLUMNS) + extra].to_csv(p, index=False)
    return p


def load_colocation_table(path: str | Path) -> "ColocationTable":
    """Read and validate a colocation CSV into the table the scheduler looks pairs up in."""
    from scheduler.model.colocation import ColocationTable

    return ColocationTable.from_frame(read_colocation_table(path))


def load_colocation_tables(paths: "Iterable[str | Path]") -> "ColocationTable":
    """Several colocation CSVs as one table; a pair in more than one file takes the last file's ratios (and
    interval, if it has one)."""
    from scheduler.model.colocation import ColocationTable

    ratios: dict[tuple[str, str, str], tuple[float, float]] = {}
    intervals: dict = {}
    level = 0.8
    for path in paths:
        table = load_colocation_table(path)
        for key in table.ratios:  # a later file's row replaces the pair, its interval (or its lack of one) too
            intervals.pop(key, None)
        ratios.update(table.ratios)
        intervals.update(table.intervals)
        level = table.interval_level if table.intervals else level
    return ColocationTable(ratios, intervals=intervals, interval_level=level)
