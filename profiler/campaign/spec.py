"""Campaign specification: the YAML a user writes, validated into a frozen :class:`CampaignSpec`.

Every problem is reported as one :class:`~common.errors.InputError` naming the file, the key and the
valid values, e.g. ``spec.yaml: field 'sharing[1]': 'mpss' is not a sharing mode (valid: timeslice, mps)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common.bounds import MAX_BATCH, MAX_REPEATS, check_number
from common.errors import InputError
from common.names import NAME_RULE, check_name, shown
from profiler.gpu.sharing import sharing_mode, sharing_mode_names
from profiler.measure.training import PRECISIONS

DEVICE_PATTERN = re.compile(r"^(cpu|cuda|cuda:\d+)$")
# Short GPU type names as profiler.gpu.devices.gpu_type_from_name gives them ('h100', 'a100', 't4', '2080').
GPU_TYPE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*$")
GROUP_SIZES = (1, 2, 3)
WORKER_MODES = ("warm", "fresh")
# On CUDA a window lasts at least this long unless the spec says otherwise: NVML and GPM sample every
# 100 ms and need enough samples; and a run that hangs is failed after CUDA_RUN_TIMEOUT_S (fits a lease).
CUDA_MIN_WINDOW_SECONDS = 2.0
CUDA_RUN_TIMEOUT_S = 120.0
CPU_RUN_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class CampaignSpec:
    """A resolved campaign: which job types to run alone and together, how, and how long to measure."""

    name: str
    models: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    device: str = "cpu"
    image_size: int = 32
    num_classes: int = 10
    group_sizes: tuple[int, ...] = (1, 2)
    # Explicit groups; each entry is a tuple of job types "model@batch" (or bare models, crossed with
    # batch_sizes). None = all combinations of `models` per group size and batch size.
    combinations: tuple[tuple[str, ...], ...] | None = None
    repetition: bool = False  # with the default combinations: also pair a model with itself
    sharing: tuple[str, ...] = ("timeslice",)
    mps_thread_percentages: tuple[int, ...] | None = None
    warmup_iters: int = 10
    min_window_iters: int | None = 20
    min_window_seconds: float | None = None
    repeats: int = 3
    seed: int = 0
    threads_per_job: int = 1
    kernels: bool = False  # also record a kernel profile for every solo job type
    run_timeout_s: float = 600.0  # a run still going after this is failed (hung worker)
    memory_headroom_mib: int = 512  # per-process CUDA context allowance in the memory pre-check
    # Measure every cell on each of these GPU types (the Ray backend routes each run to a node of its
    # type; the local backend measures the type of its own device). None = just the spec's device.
    gpu_types: tuple[str, ...] | None = None
    precision: tuple[str, ...] = ("fp32",)  # fp32 | tf32 | bf16: each group is measured in each precision
    seq_len: int = 128  # token models (gpt2_small, bert_base): tokens per sample
    workers: str = "warm"  # warm: a job type's worker serves every run that needs it; fresh: one per run

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, tuple):
                data[key] = [list(v) if isinstance(v, tuple) else v for v in value]
        return data


@dataclass(frozen=True)
class _Key:
    kind: str  # str, int, float, bool, list[str], list[int], combos
    valid: str
    required: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


_KEYS: dict[str, _Key] = {
    "name": _Key("str", f"a name such as 'h100-pairs' ({NAME_RULE}); it names the results directory",
                 required=True),
    "models": _Key("list[str]", "a non-empty list of model names", required=True),
    "batch_sizes": _Key("list[int]", "a non-empty list of integers in [1, 10000000]", required=True),
    "device": _Key("str", "cpu, cuda or cuda:N"),
    "image_size": _Key("int", "an integer in [32, 4096] (below 96: CIFAR-style models; 224: ImageNet-style)"),
    "num_classes": _Key("int", "an integer in [1, 1000000]"),
    "group_sizes": _Key("list[int]", "a non-empty subset of 1, 2, 3"),
    "combinations": _Key("combos", "a list of groups, each a list of 1-3 job types 'model' or 'model@batch'"),
    "repetition": _Key("bool", "true or false"),
    "sharing": _Key("list[str]", ", ".join(sharing_mode_names())),
    "mps_thread_percentages": _Key("list[int]", "a list of integers in 1..100"),
    "warmup_iters": _Key("int", "an integer in [1, 100000]"),
    "min_window_iters": _Key("int", "an integer in [2, 1000000]"),
    "min_window_seconds": _Key("float", "a number of seconds in (0, 86400]"),
    "repeats": _Key("int", "an integer in [1, 1000]"),
    "seed": _Key("int", "an integer in [0, 4294967295]"),
    "threads_per_job": _Key("int", "an integer in [1, 1024]"),
    "kernels": _Key("bool", "true or false"),
    "run_timeout_s": _Key("float", "a number of seconds in (0, 604800]"),
    "memory_headroom_mib": _Key("int", "an integer in [0, 1000000] (MiB)"),
    "precision": _Key("list[str]", "a list of fp32, tf32, bf16"),
    "seq_len": _Key("int", "an integer in 1..512 (tokens per sample of gpt2_small / bert_base)"),
    "workers": _Key("str", "warm (reuse a job type's process across runs) or fresh (new processes per run)"),
    "gpu_types": _Key("list[str]", "a list of distinct lower-case GPU type names as `colocate env` shows them, "
                                   "e.g. [h100, a100]"),
}


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "str":
        return isinstance(value, str) and bool(value.strip())
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list[str]":
        return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value)
    if kind == "list[int]":
        return (
            isinstance(value, list)
            and bool(value)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        )
    if kind == "combos":
        return isinstance(value, list) and bool(value) and all(
            isinstance(group, list) and group and all(isinstance(j, str) and j for j in group)
            for group in value
        )
    raise AssertionError(kind)


# ``model@batch`` with an optional numeric-precision suffix (``resnet50@64:bf16``): the suffix stays in the
# job type (a distinct type) and is not part of the model name or the batch size.
_JOB_TYPE_RE = re.compile(r"^(?P<model>.+?)@(?P<batch>\d+)(?::(?P<precision>[A-Za-z0-9_]+))?$")


def parse_job_type(text: str, *, strict: bool = True) -> tuple[str, int | None]:
    """Split a job type ``model@batch``: 'resnet18@64' → ('resnet18', 64); a bare model name → (name, None).

    The one parser of job types. ``strict`` (specs a user wrote): text after '@' must be a positive batch
    size, else ValueError. Lenient (stored rows, Gavel's and others' names such as A3C): ``name@digits`` and
    ``name@digits:precision`` (``resnet50@64:bf16`` → ('resnet50', 64)) split; anything else is a name without a
    batch size, kept as it is.
    """
    if not strict:
        match = _JOB_TYPE_RE.match(text)
        return (text, None) if match is None else (match.group("model"), int(match.group("batch")))
    if "@" not in text:
        return text.strip(), None
    model, _, batch = text.partition("@")
    if not batch.isdigit() or int(batch) <= 0:
        raise ValueError(f"'{text}' has no positive batch size after '@'")
    return model.strip(), int(batch)


def parse_job_type_full(text: str) -> tuple[str, int | None, str | None]:
    """Split a stored job type key 'resnet18@64:bf16' into ('resnet18', 64, 'bf16'); no suffix = fp32."""
    base, _, precision = text.partition(":")
    model, batch = parse_job_type(base)
    return model, batch, precision or None


def _checked_keys(data: Any, source: str | Path) -> dict[str, Any]:
    """Check the mapping's keys and value types; drop explicit nulls of optional keys."""
    if not isinstance(data, dict):
        raise InputError("the campaign file must be a YAML mapping of keys to values", source=source,
                         valid="keys " + ", ".join(_KEYS))
    unknown = [k for k in data if k not in _KEYS]
    if unknown:
        raise InputError(f"unknown key {shown(unknown[0])}", source=source, field=shown(unknown[0], 40),
                         valid=", ".join(_KEYS))
    # An explicit null means "use the default" for optional keys; required keys need a value.
    data = {k: v for k, v in data.items() if v is not None or _KEYS[k].required}
    for key, rule in _KEYS.items():
        if rule.required and data.get(key) is None:
            raise InputError("missing required key", source=source, field=key, valid=rule.valid)
        if key in data and data[key] is not None and not _type_ok(rule.kind, data[key]):
            raise InputError(f"{shown(data[key])} has the wrong type", source=source, field=key, valid=rule.valid)
    return data


def _failer(source: str | Path) -> Callable[[str, str], InputError]:
    """An InputError maker for one key (``key`` may carry an index, e.g. ``gpu_types[2]``)."""
    def fail(key: str, message: str) -> InputError:
        return InputError(message, source=source, field=key, valid=_KEYS[key.split("[")[0]].valid)
    return fail


def _check_model(model: str, model_names: tuple[str, ...], source: str | Path, field: str) -> None:
    if model not in model_names:
        raise InputError(f"unknown model '{model}'", source=source, field=field, valid=", ".join(model_names))


def _checked_jobs(data: dict[str, Any], source: str | Path,
                  model_names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[int, ...], str, tuple[int, ...]]:
    """The models, batch sizes, device and group sizes."""
    fail = _failer(source)
    check_name(data["name"].strip(), source=source, field="name", what="campaign name")
    models = tuple(data["models"])
    for i, model in enumerate(models):
        _check_model(model, model_names, source, f"models[{i}]")
    batch_sizes = tuple(data["batch_sizes"])
    for i, batch in enumerate(batch_sizes):
        check_number(batch, source=source, field=f"batch_sizes[{i}]", low=1, high=MAX_BATCH, integer=True)
    device = data.get("device", "cpu")
    if not DEVICE_PATTERN.match(device):
        raise fail("device", f"'{device}' is not a device")
    group_sizes = tuple(sorted(set(data.get("group_sizes", [1, 2]))))
    for size in group_sizes:
        if size not in GROUP_SIZES:
            raise fail("group_sizes", f"{size} is not a group size")
    return models, batch_sizes, device, group_sizes


def _checked_sharing(data: dict[str, Any], source: str | Path) -> tuple[tuple[str, ...], Any]:
    """The sharing modes and the MPS thread percentages that go with them."""
    fail = _failer(source)
    sharing = tuple(data.get("sharing", ["timeslice"]))
    for i, mode in enumerate(sharing):
        if mode not in sharing_mode_names():
            raise InputError(f"{shown(mode)} is not a sharing mode", source=source, field=f"sharing[{i}]",
                             valid=", ".join(sharing_mode_names()))  # registered now, not at import time
    if len(set(sharing)) != len(sharing):
        raise fail("sharing", "a sharing mode is listed twice")
    percentages = data.get("mps_thread_percentages")
    if percentages is not None:
        for i, pct in enumerate(percentages):
            check_number(pct, field=f"mps_thread_percentages[{i}]", low=1, high=100, integer=True, source=source,
                         valid=_KEYS["mps_thread_percentages"].valid)
        if not any(sharing_mode(mode).thread_partitions for mode in sharing):
            raise fail("mps_thread_percentages", "set, but 'mps' is not in 'sharing'")
    return sharing, percentages


def _checked_combinations(data: dict[str, Any], source: str | Path,
                          model_names: tuple[str, ...]) -> tuple[tuple[str, ...], ...] | None:
    """The explicit job groups, if any."""
    if data.get("combinations") is None:
        return None
    fail = _failer(source)
    parsed: list[tuple[str, ...]] = []
    for g, group in enumerate(data["combinations"]):
        if not 1 <= len(group) <= 3:
            raise fail(f"combinations[{g}]", f"a group of {len(group)} jobs")
        for j, job_type in enumerate(group):
            try:
                model, _ = parse_job_type(job_type)
            except ValueError as err:
                raise fail(f"combinations[{g}][{j}]", str(err)) from None
            _check_model(model, model_names, source, f"combinations[{g}][{j}]")
        parsed.append(tuple(group))
    return tuple(parsed)


def _checked_variants(data: dict[str, Any], source: str | Path) -> tuple[Any, tuple[str, ...], str]:
    """The GPU types, precisions and worker mode."""
    fail = _failer(source)
    gpu_types = data.get("gpu_types")
    if gpu_types is not None:
        for i, name in enumerate(gpu_types):
            if not GPU_TYPE_PATTERN.match(name):
                raise fail(f"gpu_types[{i}]", f"'{name}' is not a GPU type name")
        if len(set(gpu_types)) != len(gpu_types):
            raise fail("gpu_types", "a GPU type is listed twice")
    precision = tuple(data.get("precision", ["fp32"]))
    for i, name in enumerate(precision):
        if name not in PRECISIONS:
            raise fail(f"precision[{i}]", f"'{shown(name)}' is not a precision")
    if len(set(precision)) != len(precision):
        raise fail("precision", "a precision is listed twice")
    workers = data.get("workers", "warm")
    if workers not in WORKER_MODES:
        raise fail("workers", f"'{shown(workers)}' is not a worker mode")
    return gpu_types, precision, workers


def _number_reader(data: dict[str, Any], source: str | Path) -> Callable[..., Any]:
    """Reads one numeric key with its default and bounds."""
    def number(key: str, default: Any, minimum: float, *, strict: bool = False, maximum: float = 1e6) -> Any:
        value = data.get(key, default)
        if value is None:
            return None
        return check_number(value, source=source, field=key, low=minimum, high=maximum, low_open=strict,
                            integer=_KEYS[key].kind == "int", valid=_KEYS[key].valid)
    return number


def spec_from_dict(data: Any, source: str | Path = "<spec>") -> CampaignSpec:
    """Validate a parsed YAML mapping; raise :class:`InputError` on the first problem found."""
    from models import MIN_IMAGE_SIZE, is_cifar_style, registered_names  # models is below profiler

    model_names = registered_names()
    data = _checked_keys(data, source)
    models, batch_sizes, device, group_sizes = _checked_jobs(data, source, model_names)
    sharing, percentages = _checked_sharing(data, source)
    combinations = _checked_combinations(data, source, model_names)
    gpu_types, precision, workers = _checked_variants(data, source)
    is_cuda = device.startswith("cuda")
    number = _number_reader(data, source)

    min_iters = number("min_window_iters", None, 2)
    min_seconds = number("min_window_seconds", None, 0, strict=True, maximum=86400)
    if min_iters is None and min_seconds is None:
        min_iters = 20  # the default window when the user sets neither
    if min_seconds is None and is_cuda:
        min_seconds = CUDA_MIN_WINDOW_SECONDS
    seq_len = number("seq_len", 128, 1, maximum=512)
    image_size = number("image_size", MIN_IMAGE_SIZE, MIN_IMAGE_SIZE, maximum=4096)
    return CampaignSpec(
        name=data["name"].strip(),
        models=models,
        batch_sizes=batch_sizes,
        device=device,
        image_size=image_size,
        num_classes=number("num_classes", 10 if is_cifar_style(image_size) else 1000, 1),
        group_sizes=group_sizes,
        combinations=combinations,
        repetition=data.get("repetition", False),
        sharing=sharing,
        mps_thread_percentages=tuple(percentages) if percentages is not None else None,
        warmup_iters=number("warmup_iters", 10, 1, maximum=100_000),
        min_window_iters=min_iters,
        min_window_seconds=float(min_seconds) if min_seconds is not None else None,
        repeats=number("repeats", 3, 1, maximum=MAX_REPEATS),
        seed=number("seed", 0, 0, maximum=2**32 - 1),
        threads_per_job=number("threads_per_job", 1, 1, maximum=1024),
        kernels=data.get("kernels", False),
        run_timeout_s=float(number("run_timeout_s", CUDA_RUN_TIMEOUT_S if is_cuda else CPU_RUN_TIMEOUT_S, 0,
                                   strict=True, maximum=7 * 86400)),
        memory_headroom_mib=number("memory_headroom_mib", 512, 0),
        gpu_types=tuple(gpu_types) if gpu_types is not None else None,
        precision=precision,
        seq_len=seq_len,
        workers=workers,
    )


def load_spec(path: str | Path) -> CampaignSpec:
    """Read and validate a campaign YAML file."""
    from common.safe_load import load_yaml

    path = Path(path)
    if not path.is_file():
        raise InputError("no such campaign file", source=path, valid="a path to a YAML file")
    return spec_from_dict(load_yaml(path, what="campaign file"), source=path)
