"""The job file of ``colocate submit``: what to train, how much of it, and how the scheduler may run it.

A job file is YAML::

    name: bert-a               # unique in the state directory; default: the file name without .yaml
    model: tiny_cnn            # a model of the zoo (built-in trainer) ...
    # command: "python train.py --bs {batch_size}"   # ... or a user command (see the README's contract)
    # application: my-app      # with a command: the name throughput profiles and colocation tables know
    steps: 2000                # target iterations, or
    # samples: 64000           # target samples (independent of the batch size the scheduler picks)
    batch_size: 32             # global batch; an adaptive job's starting point
    min_batch_size: 16         # adaptive jobs only (default: batch_size)
    max_batch_size: 128        # adaptive jobs only (default: batch_size)
    min_gpus: 1
    max_gpus: 2                # adaptive jobs: the scheduler picks 1..max_gpus; rigid jobs run on min_gpus
    adaptive: true
    gpu_types: [h100, a100]    # allowed GPU types (default: any)
    image_size: 32             # built-in trainer input size
    max_retries: 2             # restarts after crashes before the job is marked failed
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common.errors import InputError

FIELDS: dict[str, str] = {
    "name": "a non-empty name of letters, digits, '_', '.', '-'",
    "model": "a model of the zoo, e.g. tiny_cnn or resnet18",
    "command": "a shell command (placeholders {job} {batch_size} {num_gpus} {gpu_type} {partner} {node} {gpus})",
    "application": "a name known to the profiles / colocation table",
    "steps": "an integer >= 1",
    "samples": "an integer >= 1",
    "batch_size": "an integer >= 1",
    "min_batch_size": "an integer >= 1, <= batch_size",
    "max_batch_size": "an integer >= batch_size",
    "min_gpus": "an integer >= 1",
    "max_gpus": "an integer >= min_gpus",
    "adaptive": "true or false",
    "gpu_types": "a list of GPU type names of the cluster",
    "image_size": "an integer >= 8",
    "max_retries": "an integer >= 0",
}
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


@dataclass(frozen=True)
class JobSpec:
    """A submitted job, validated. Exactly one of ``model``/``command``; exactly one of ``steps``/``samples``."""

    name: str
    batch_size: int
    model: str | None = None
    command: str | None = None
    application: str | None = None
    steps: int | None = None
    samples: int | None = None
    min_batch_size: int | None = None
    max_batch_size: int | None = None
    min_gpus: int = 1
    max_gpus: int | None = None
    adaptive: bool = False
    gpu_types: tuple[str, ...] = ()
    image_size: int = 32
    max_retries: int = 2

    @property
    def app(self) -> str:
        """The name profiles and colocation tables know this job by."""
        return self.application or self.model or self.name

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["gpu_types"] = list(self.gpu_types)
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "JobSpec":
        """Inverse of :meth:`to_dict` (for rows already validated)."""
        return cls(**{**data, "gpu_types": tuple(data.get("gpu_types", ()))})


def _int(data: dict[str, Any], key: str, source: str, low: int) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or int(value) != value or value < low:
        raise InputError(f"{value!r} is not valid", source=source, field=key, valid=FIELDS[key])
    return int(value)


def _check_kind(data: dict[str, Any], source: str) -> None:
    from models import registered_names

    model, command = data.get("model"), data.get("command")
    if (model is None) == (command is None):
        raise InputError("needs exactly one of 'model' and 'command'", source=source, field="model",
                         valid="model: NAME (built-in trainer) or command: 'shell command'")
    if model is not None and model not in registered_names():
        raise InputError(f"unknown model {model!r}", source=source, field="model", valid=", ".join(registered_names()))
    for key in ("command", "application"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InputError(f"{value!r} is not valid", source=source, field=key, valid=FIELDS[key])
    if command is not None:
        from scheduler.executor.plan import check_placeholders

        check_placeholders(command, source=source, field="command")


def job_from_dict(data: Any, *, source: str = "<job>", default_name: str | None = None,
                  gpu_types: tuple[str, ...] | None = None) -> JobSpec:
    """Validate a parsed job document; ``gpu_types`` (the cluster's) checks the allowed types when given."""
    if not isinstance(data, dict):
        raise InputError("must be a mapping", source=source, field="name", valid="name: ..., model: ..., steps: ...")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r}", source=source, field=unknown[0], valid=", ".join(FIELDS))
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name or not set(name) <= _NAME_CHARS or len(name) > 60:
        raise InputError(f"{name!r} is not a job name", source=source, field="name", valid=FIELDS["name"])
    _check_kind(data, source)
    ints = {key: _int(data, key, source, low) for key, low in (
        ("steps", 1), ("samples", 1), ("batch_size", 1), ("min_batch_size", 1), ("max_batch_size", 1),
        ("min_gpus", 1), ("max_gpus", 1), ("image_size", 8), ("max_retries", 0))}
    if (ints["steps"] is None) == (ints["samples"] is None):
        raise InputError("needs exactly one of 'steps' and 'samples'", source=source, field="steps",
                         valid="steps: N (iterations) or samples: N")
    batch = ints["batch_size"]
    if batch is None:
        raise InputError("missing batch_size", source=source, field="batch_size", valid=FIELDS["batch_size"])
    adaptive = data.get("adaptive", False)
    if not isinstance(adaptive, bool):
        raise InputError(f"{adaptive!r} is not valid", source=source, field="adaptive", valid=FIELDS["adaptive"])
    if ints["min_batch_size"] is not None and ints["min_batch_size"] > batch:
        raise InputError(f"{ints['min_batch_size']} > batch_size {batch}", source=source, field="min_batch_size",
                         valid=FIELDS["min_batch_size"])
    if ints["max_batch_size"] is not None and ints["max_batch_size"] < batch:
        raise InputError(f"{ints['max_batch_size']} < batch_size {batch}", source=source, field="max_batch_size",
                         valid=FIELDS["max_batch_size"])
    min_gpus = ints["min_gpus"] or 1
    if ints["max_gpus"] is not None and ints["max_gpus"] < min_gpus:
        raise InputError(f"{ints['max_gpus']} < min_gpus {min_gpus}", source=source, field="max_gpus",
                         valid=FIELDS["max_gpus"])
    allowed = _gpu_types(data.get("gpu_types"), source, gpu_types)
    return JobSpec(
        name=name, batch_size=batch, model=data.get("model"), command=data.get("command"),
        application=data.get("application"), steps=ints["steps"], samples=ints["samples"],
        min_batch_size=ints["min_batch_size"], max_batch_size=ints["max_batch_size"], min_gpus=min_gpus,
        max_gpus=ints["max_gpus"], adaptive=adaptive, gpu_types=allowed,
        image_size=ints["image_size"] or 32,
        max_retries=ints["max_retries"] if ints["max_retries"] is not None else 2)


def _gpu_types(value: Any, source: str, known: tuple[str, ...] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise InputError(f"{value!r} is not valid", source=source, field="gpu_types", valid=FIELDS["gpu_types"])
    if known is not None:
        for v in value:
            if v not in known:
                raise InputError(f"GPU type {v!r} is not in the cluster", source=source, field="gpu_types",
                                 valid=", ".join(known))
    return tuple(value)


def load_job(path: str | Path, gpu_types: tuple[str, ...] | None = None) -> JobSpec:
    """Read and validate a job YAML file (see the module docstring)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise InputError("job file not found", source=p, field="JOB.yaml", valid="a YAML job file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"not valid YAML{where}", source=p, field="name", valid="a YAML mapping") from None
    return job_from_dict(data, source=str(p), default_name=p.stem, gpu_types=gpu_types)
