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
    memory_gb: 6               # GPU memory per GPU it needs (default: measured or estimated; a command: unknown)
    max_slowdown: 1.25         # in a group, never slower than 1/1.25 of its solo speed (default: the cluster's)
    exclusive: false           # true: never shares its GPUs
    lr_scaling: sqrt           # adascale | linear | sqrt | none: the job library's learning rate at another batch
                               # (default: the library's, adascale; a value the script sets wins)

:func:`job_from_dict` is the one validator of a job: ``colocate submit`` runs it on the file, and the server
runs it again on every row it reads from the state database (a row written behind ``submit``'s back, or by
an older version, fails *that job* with the reason instead of stopping the server). Whatever it accepts
the server can schedule, name, fill in and store: every number has a finite range (:data:`BOUNDS`), names
follow the one safe-name pattern (:mod:`common.names`), and a command template is filled in with
representative values of every placeholder — the way the server fills it — and must stay under
:data:`MAX_COMMAND_CHARS`. The file itself is read by the same limited YAML loader as campaign specs
(:mod:`common.safe_load`: size, nesting, aliases, encoding, duplicate keys). Nothing here imports torch:
model names are read from the model package's source when torch is not loaded yet.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from common.bounds import MAX_BATCH, MAX_GPUS, MAX_SAMPLES, MAX_STEPS, check_number
from common.errors import InputError
from common.lr_scaling import LR_SCALING_RULE, check_lr_scaling
from common.names import NAME_RULE, check_name, shown
from common.placeholders import check_template
from scheduler.model.jobs import REQUIREMENT_RULES, JobRequirements

MAX_JOB_FILE_BYTES = 64 * 1024  # a job file is a dozen lines
MAX_COMMAND_CHARS = 4096  # a command template, and the command once filled in
# (low, high) of every numeric key: generous, finite (a typo such as steps: 1e30 fails at submit).
BOUNDS: dict[str, tuple[int, int]] = {
    "steps": (1, MAX_STEPS), "samples": (1, MAX_SAMPLES), "batch_size": (1, MAX_BATCH), "min_batch_size": (1, MAX_BATCH),
    "max_batch_size": (1, MAX_BATCH), "min_gpus": (1, MAX_GPUS), "max_gpus": (1, MAX_GPUS),
    "image_size": (8, 1024), "max_retries": (0, 100),
}
FIELDS: dict[str, str] = {
    "name": NAME_RULE,
    "model": "a model of the zoo, e.g. tiny_cnn or resnet18",
    "command": f"a shell command of at most {MAX_COMMAND_CHARS} characters (placeholders {{job}} {{batch_size}} "
               "{num_gpus} {gpu_type} {partner} {node} {gpus}; {{ and }} for literal braces)",
    "application": "a name known to the profiles / colocation table: " + NAME_RULE,
    "adaptive": "true or false",
    "gpu_types": "a list of GPU type names of the cluster",
    **{key: f"an integer in [{low}, {high}]" for key, (low, high) in BOUNDS.items()},
    **REQUIREMENT_RULES,
    "lr_scaling": LR_SCALING_RULE,
}
FIELDS["min_batch_size"] += ", <= batch_size"
FIELDS["max_batch_size"] += ", >= batch_size"
FIELDS["max_gpus"] += ", >= min_gpus"


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
    # declared memory per GPU (None: measured or estimated, see service.contract), its own slowdown bound (None:
    # the cluster's), never sharing its GPUs
    requirements: JobRequirements = JobRequirements()
    lr_scaling: str | None = None  # passed to the job as COLOCATE_LR_SCALING (None: the job library's default)

    @property
    def app(self) -> str:
        """The name profiles and colocation tables know this job by."""
        return self.application or self.model or self.name

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["gpu_types"] = list(self.gpu_types)
        out.update(self.requirements.as_fields())  # a job file's keys: the stored spec keeps the file's form
        del out["requirements"]
        if not self.requirements.exclusive:
            del out["exclusive"]  # the stored spec of a job without it reads as before
        return {k: v for k, v in out.items() if v is not None}


@lru_cache(maxsize=1)
def _model_names_from_source() -> tuple[str, ...]:
    """The built-in models' names, read from ``models/__init__.py`` without importing it (it imports torch):
    the first argument of every ``ModelInfo(...)`` there."""
    spec = importlib.util.find_spec("models")
    if spec is None or spec.origin is None:
        return ()
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    return tuple(node.args[0].value for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ModelInfo" and node.args
                 and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))


def model_names() -> tuple[str, ...]:
    """Names of the zoo's models: the registry when the models are loaded already (models registered at run
    time included), else the built-ins read from source, so ``submit`` never pays for importing torch."""
    if "models.registry" in sys.modules:
        return tuple(sys.modules["models.registry"].registered_names())
    return _model_names_from_source()


def _int(data: dict[str, Any], key: str, source: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    low, high = BOUNDS[key]
    return int(check_number(value, field=key, low=low, high=high, source=source, integer=True, valid=FIELDS[key]))


def _text(data: dict[str, Any], key: str, source: str) -> str | None:
    value = data.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InputError(f"{shown(value)} is not valid", source=source, field=key, valid=FIELDS[key])
    return value


def check_command(template: str, values: list[dict[str, Any]], *, source: str, field: str = "command") -> None:
    """Refuse a command template the server could not fill in or store: unknown placeholders, format specs
    that do not fit the values (``{job:d}``), huge or nested widths (``{batch_size:>2000000000}``), or a
    result longer than :data:`MAX_COMMAND_CHARS` — each ``values`` dict is one representative filling."""
    valid = FIELDS["command"]
    check_template(template, source=source, field=field, max_chars=MAX_COMMAND_CHARS, valid=valid)
    for filling in values:
        try:
            filled = template.format_map(filling)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as err:
            raise InputError(f"cannot fill in the command ({shown(str(err), 80)})", source=source, field=field,
                             valid=valid) from None
        if len(filled) > MAX_COMMAND_CHARS:
            raise InputError(f"{len(filled)} characters once filled in", source=source, field=field, valid=valid)


def representative_values(spec: JobSpec) -> list[dict[str, Any]]:
    """Placeholder values the server may fill in for ``spec``: its smallest and largest configuration (the
    types are what the server passes: str for names and GPU lists, int for counts)."""
    types = list(spec.gpu_types) or ["a100"]
    low_gpus, high_gpus = spec.min_gpus, (spec.max_gpus or spec.min_gpus) if spec.adaptive else spec.min_gpus
    low_batch = (spec.min_batch_size or spec.batch_size) if spec.adaptive else spec.batch_size
    high_batch = (spec.max_batch_size or spec.batch_size) if spec.adaptive else spec.batch_size
    return [
        {"job": spec.name, "batch_size": low_batch, "num_gpus": low_gpus, "gpu_type": min(types, key=len),
         "partner": "", "node": 0, "gpus": ",".join(str(g) for g in range(min(low_gpus, 8)))},
        {"job": spec.name, "batch_size": high_batch, "num_gpus": high_gpus, "gpu_type": max(types, key=len),
         "partner": "p" * 100, "node": MAX_GPUS, "gpus": ",".join(str(g) for g in range(min(high_gpus, 8)))},
    ]


def _check_kind(data: dict[str, Any], source: str) -> None:
    model, command = data.get("model"), data.get("command")
    if (model is None) == (command is None):
        raise InputError("needs exactly one of 'model' and 'command'", source=source, field="model",
                         valid="model: NAME (built-in trainer) or command: 'shell command'")
    if model is not None and model not in model_names():
        raise InputError(f"unknown model {shown(model)}", source=source, field="model", valid=", ".join(model_names()))
    _text(data, "command", source)
    if _text(data, "application", source) is not None:
        check_name(data["application"], source=source, field="application", what="application name")


def job_from_dict(data: Any, *, source: str = "<job>", default_name: str | None = None,
                  gpu_types: tuple[str, ...] | None = None) -> JobSpec:
    """Validate a parsed job document; ``gpu_types`` (the cluster's) checks the allowed types when given."""
    if not isinstance(data, dict):
        raise InputError("must be a mapping", source=source, field="name", valid="name: ..., model: ..., steps: ...")
    unknown = sorted((str(k) for k in set(data) - set(FIELDS)), key=str)
    if unknown:
        raise InputError(f"unknown key {shown(unknown[0])}", source=source, field=unknown[0][:60],
                         valid=", ".join(FIELDS))
    name = check_name(data.get("name", default_name), source=source, field="name", what="job name")
    _check_kind(data, source)
    ints = {key: _int(data, key, source) for key in BOUNDS}
    if (ints["steps"] is None) == (ints["samples"] is None):
        raise InputError("needs exactly one of 'steps' and 'samples'", source=source, field="steps",
                         valid="steps: N (iterations) or samples: N")
    batch = ints["batch_size"]
    if batch is None:
        raise InputError("missing batch_size", source=source, field="batch_size", valid=FIELDS["batch_size"])
    adaptive = data.get("adaptive", False)
    if not isinstance(adaptive, bool):
        raise InputError(f"{shown(adaptive)} is not valid", source=source, field="adaptive", valid=FIELDS["adaptive"])
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
    scaling = data.get("lr_scaling")
    if scaling is not None:
        check_lr_scaling(scaling, source=source, field="lr_scaling")
    needs = JobRequirements.from_fields(data, source=source)
    spec = JobSpec(
        name=name, batch_size=batch, model=data.get("model"), command=data.get("command"),
        application=data.get("application"), steps=ints["steps"], samples=ints["samples"],
        min_batch_size=ints["min_batch_size"], max_batch_size=ints["max_batch_size"], min_gpus=min_gpus,
        max_gpus=ints["max_gpus"], adaptive=adaptive, gpu_types=_gpu_types(data.get("gpu_types"), source, gpu_types),
        image_size=ints["image_size"] or 32,
        max_retries=ints["max_retries"] if ints["max_retries"] is not None else 2, requirements=needs,
        lr_scaling=scaling)
    if spec.command is not None:
        check_command(spec.command, representative_values(spec), source=source)
    return spec


def _gpu_types(value: Any, source: str, known: tuple[str, ...] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value or len(value) > 100:
        raise InputError(f"{shown(value)} is not valid", source=source, field="gpu_types", valid=FIELDS["gpu_types"])
    for v in value:
        check_name(v, source=source, field="gpu_types", what="GPU type")
        if known is not None and v not in known:
            raise InputError(f"GPU type {v!r} is not in the cluster", source=source, field="gpu_types",
                             valid=", ".join(known))
    return tuple(value)


def load_job(path: str | Path, gpu_types: tuple[str, ...] | None = None) -> JobSpec:
    """Read and validate a job YAML file (see the module docstring)."""
    from common.safe_load import load_yaml

    p = Path(path)
    if not p.is_file():
        raise InputError("job file not found" if not p.exists() else "not a file", source=p, field="JOB.yaml",
                         valid="a YAML job file")
    if p.stat().st_size > MAX_JOB_FILE_BYTES:
        raise InputError(f"larger than {MAX_JOB_FILE_BYTES // 1024} KiB", source=p, field="JOB.yaml",
                         valid="a job file of a few lines")
    data = load_yaml(p, what="job file")
    return job_from_dict(data, source=str(p), default_name=p.stem, gpu_types=gpu_types)


def spec_from_row(name: str, text: str, *, source: str) -> JobSpec:
    """The spec of a ``jobs`` row, validated again (the row may have been written behind ``submit``'s back):
    an :class:`InputError` naming the job when it is not one ``submit`` would have accepted."""
    from common.safe_load import parse_json

    where = f"{source}: job {shown(name)}"
    if not isinstance(text, str) or len(text) > MAX_JOB_FILE_BYTES:
        raise InputError("spec is not a JSON text of a job", source=where, field="spec", valid="a job spec")
    data = parse_json(text, source=where, field="spec", valid="a job spec as JSON")
    if isinstance(data, dict) and isinstance(data.get("gpu_types"), list) and not data["gpu_types"]:
        data = {k: v for k, v in data.items() if k != "gpu_types"}  # to_dict writes [] for "any type"
    spec = job_from_dict(data, source=where)
    if spec.name != name:
        raise InputError(f"spec names {shown(spec.name)}", source=where, field="name", valid="the row's own name")
    return spec
