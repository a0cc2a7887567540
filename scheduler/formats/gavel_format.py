"""Gavel's throughput-file format (Narayanan et al., OSDI'20): job keys, job names and the file reader.

The scheduler reads Gavel's files directly (``scheduler.formats.transfer``, ``scheduler.formats.workloads``) and the analysis
layer converts them into results rows (``colocate.analysis.gavel``); both use these functions, so the format is read
in one place. See :mod:`colocate.analysis.gavel` for the layout.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path
from typing import Any

from common.bounds import check_number
from common.errors import InputError
from common.names import check_name
from common.safe_load import load_json

_JOB_NAME_RE = re.compile(r"^(?P<model>.+?) \(batch size (?P<batch>\d+)\)$")


def gavel_job_type(name: str) -> tuple[str, int | None, str]:
    """``"ResNet-18 (batch size 64)"`` → ``("ResNet-18", 64, "ResNet-18@64")``; ``"A3C"`` → ``("A3C", None, "A3C")``."""
    match = _JOB_NAME_RE.match(name.strip())
    if match is None:
        return name.strip(), None, name.strip()
    model, batch = match.group("model"), int(match.group("batch"))
    return model, batch, f"{model}@{batch}"


def parse_gavel_key(key: str, source: str | Path, gpu: str) -> tuple[str, int]:
    """A job key → (job name, scale factor); plain names (oracle file) have scale factor 1."""
    if key.startswith("("):
        try:
            value = ast.literal_eval(key)  # literals only: a tuple of a string and an int
        except (ValueError, SyntaxError):
            value = None
        if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], int)):
            raise InputError(f"job key {key!r} is not ('<model> (batch size N)', scale_factor)", source=source,
                             field=f"{gpu}.{key}", valid="keys like \"('ResNet-18 (batch size 64)', 1)\"")
        return value[0], value[1]
    return key, 1


def throughput_value(value: Any, source: Path, field: str) -> float:
    """A throughput in steps/s, checked: a finite non-negative number (0 = the job could not run)."""
    return float(check_number(value, field=field, low=0, high=math.inf, source=source,
                              valid="steps per second, e.g. 12.5 (0 = could not run)"))


def read_gavel_json(path: str | Path) -> dict[str, Any]:
    """Load and shape-check a Gavel throughput file (one-line errors for anything malformed)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", source=path, valid="a Gavel throughput JSON such as simulation_throughputs.json")
    data = load_json(path, what="Gavel throughput file", valid="a Gavel throughput JSON")
    if not isinstance(data, dict) or not data:
        raise InputError("expected a non-empty object keyed by worker type", source=path, field="<top level>",
                         valid='{"v100": {"(\'ResNet-18 (batch size 64)\', 1)": {"null": 12.3, ...}}}')
    for gpu, jobs in data.items():
        check_name(gpu, source=path, field="worker type", what="worker type (it names files and GPU types)")
        if not isinstance(jobs, dict):
            raise InputError("expected an object of job keys", source=path, field=gpu, valid="{job key: {'null': ...}}")
        for key, entry in jobs.items():
            if not isinstance(entry, dict):
                raise InputError("expected an object with 'null' and partner keys", source=path, field=f"{gpu}.{key}",
                                 valid="{'null': solo steps/s, partner key: [this job, partner]}")
    return data
