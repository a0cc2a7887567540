"""The ``slurm:`` section of a cluster YAML: how ``colocate serve --backend slurm`` asks Slurm for a group's GPUs.

The cluster file says which GPU types exist and how many (the scheduler's view); this section says how a GPU
type is asked for in Slurm. Every key is optional::

    gpu_types:
      t4:   {nodes: 2, gpus_per_node: 4, memory_gb: 16}
      a100: {nodes: 1, gpus_per_node: 8, memory_gb: 80}
    slurm:
      partition: gpu              # every type's partition (default: the cluster's default partition)
      time_limit: "1-00:00:00"    # --time of every group's job (default: the partition's limit)
      cpus_per_job: 2             # --cpus-per-task = this x the jobs of the group [1]
      start_timeout_s: 120        # a group still pending after this long is cancelled and its jobs requeued
      options: [--account=ml]     # more sbatch options, each --name or --name=value, from SBATCH_PASSED
      gpu_types:                  # per GPU type of the cluster, each key optional:
        t4:   {partition: t4q}    #   partition (overrides the one above)
        a100: {gres: a100-80g, constraint: "ib&nvlink"}
                                  #   gres: the GRES type (--gres=gpu:<gres>:N; default: the type's name;
                                  #         null: untyped --gres=gpu:N), constraint: --constraint (default none)

The other backends do not read this section.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.bounds import check_number
from common.errors import InputError
from common.names import shown

_PARTITION = re.compile(r"[A-Za-z0-9_.,-]{1,128}")
_GRES = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_CONSTRAINT = re.compile(r"[A-Za-z0-9_.,&|:*()\[\]!-]{1,256}")
_TIME = re.compile(r"\d{1,6}(-\d{1,2})?(:\d{1,2}){0,2}")  # minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM[:SS]
_OPTION = re.compile(r"--[a-z][a-z0-9-]{0,40}(=[A-Za-z0-9_.,:/@%+=&|*()\[\]!-]{1,256})?")
# The sbatch options passed on (slurm.options, launch --sbatch-option): where, when and on whose account the one
# batch job of a group runs; name -> its value: True required, False none (a flag), None optional. Anything else
# is refused: an option that changes what the batch job is or how many run (--array, --wrap, --test-only, --hold,
# ...) breaks one job per group, and sbatch reads any unambiguous prefix of an option (--arr is --array), so only
# a list of what is allowed is safe.
SBATCH_PASSED: dict[str, bool | None] = {
    "--account": True, "--qos": True, "--reservation": True, "--partition": True, "--time": True,
    "--time-min": True, "--constraint": True, "--prefer": True, "--exclude": True, "--nodelist": True,
    "--mem": True, "--mem-per-cpu": True, "--mem-per-gpu": True, "--tmp": True, "--licenses": True,
    "--comment": True, "--mail-type": True, "--mail-user": True, "--wckey": True, "--priority": True,
    "--nice": None, "--exclusive": None, "--oversubscribe": False, "--no-requeue": False, "--gpu-freq": True,
}
# refused with their reason spelled out: each changes what the batch job is, how many run, or when or whether
_CHANGES_THE_JOB = ("--array", "--wrap", "--test-only", "--help", "--usage", "--version", "--parsable", "--wait",
                    "--hold", "--dependency", "--begin", "--requeue", "--nodes", "--ntasks", "--ntasks-per-node",
                    "--gres", "--gpus", "--gpus-per-node", "--gpus-per-task", "--cpus-per-task", "--job-name",
                    "--output", "--error", "--open-mode", "--signal", "--export", "--chdir", "--clusters")
# the live backend's own keys for what these options would set (one place per setting)
_KEYED = {"--partition": "slurm.partition (or slurm.gpu_types.TYPE.partition)", "--time": "slurm.time_limit",
          "--constraint": "slurm.gpu_types.TYPE.constraint"}
_KEYS = ("partition", "time_limit", "cpus_per_job", "start_timeout_s", "options", "gpu_types")
_TYPE_KEYS = ("partition", "gres", "constraint")


@dataclass(frozen=True)
class SlurmType:
    """How one GPU type is asked for: ``--partition``, ``--gres=gpu:<gres>:N`` (or ``gpu:N``), ``--constraint``."""

    partition: str | None = None
    gres: str | None = None
    constraint: str | None = None


@dataclass(frozen=True)
class SlurmSettings:
    partition: str | None = None
    time_limit: str | None = None
    cpus_per_job: int = 1
    start_timeout_s: float = 120.0
    options: tuple[str, ...] = ()
    gpu_types: Mapping[str, SlurmType] = field(default_factory=dict)

    def for_type(self, gpu_type: str) -> SlurmType:
        """The type's own mapping, else the defaults: the section's partition, GRES type = the type's name."""
        return self.gpu_types.get(gpu_type, SlurmType(self.partition, gpu_type, None))


def _text(value: Any, pattern: re.Pattern[str], source: str, where: str, valid: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InputError(f"{shown(value, 60)}", source=source, field=where, valid=valid)
    return value


def check_sbatch_option(option: Any, *, source: str | None = None, field: str,
                        elsewhere: Mapping[str, str] | None = None) -> str:
    """``option`` if it is one sbatch option colocate passes on (:data:`SBATCH_PASSED`, ``--name`` or
    ``--name=value`` without spaces or quotes), else a one-line :class:`InputError`; ``elsewhere``: options the
    caller sets from a setting of its own (name -> that setting), refused with where to set them instead."""
    elsewhere = elsewhere or {}
    valid = f"one of {', '.join(n for n in SBATCH_PASSED if n not in elsewhere)}, as --name=value (docs/scale-out.md)"
    if not isinstance(option, str) or not _OPTION.fullmatch(option):
        raise InputError(f"{shown(option, 60)} is not one sbatch option --name or --name=value (no spaces, "
                         "quotes or short options)", source=source, field=field, valid=valid)
    name, has_value = option.split("=", 1)[0], "=" in option
    if name in elsewhere:
        raise InputError(f"{name} is set by {elsewhere[name]}", source=source, field=field, valid=elsewhere[name])
    if name in _CHANGES_THE_JOB:
        raise InputError(f"{name} changes what colocate's batch job is or how many run", source=source,
                         field=field, valid=valid)
    if name not in SBATCH_PASSED:
        raise InputError(f"{name} is not an sbatch option colocate passes on (spell options out: sbatch reads "
                         "abbreviations)", source=source, field=field, valid=valid)
    takes = SBATCH_PASSED[name]
    if (takes is True and not has_value) or (takes is False and has_value):
        raise InputError(f"{name} {'needs a value' if takes else 'takes no value'}", source=source, field=field,
                         valid=f"{name}=VALUE" if takes else name)
    return option


def _type(name: str, data: Any, base: SlurmSettings, source: str) -> SlurmType:
    where = f"slurm.gpu_types.{name}"
    if not isinstance(data, Mapping) or set(data) - set(_TYPE_KEYS):
        raise InputError("must be a mapping of partition, gres, constraint", source=source, field=where,
                         valid=", ".join(_TYPE_KEYS))
    partition = data.get("partition", base.partition)
    gres = data["gres"] if "gres" in data else name
    constraint = data.get("constraint")
    return SlurmType(
        None if partition is None else _text(partition, _PARTITION, source, f"{where}.partition", "a partition name"),
        None if gres is None else _text(gres, _GRES, source, f"{where}.gres", "a GRES type (gres.conf Type=), or null"),
        None if constraint is None else _text(constraint, _CONSTRAINT, source, f"{where}.constraint",
                                              "a Slurm feature expression such as 'a100&ib'"))


def slurm_settings(data: Any, gpu_types: Iterable[str], source: str = "<cluster>") -> SlurmSettings:
    """Validate the ``slurm:`` section (None: the defaults) against the cluster's GPU types."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping) or set(data) - set(_KEYS):
        unknown = sorted(map(str, set(data) - set(_KEYS))) if isinstance(data, Mapping) else ["slurm"]
        raise InputError(f"unknown key {shown(unknown[0], 40)}", source=source, field="slurm", valid=", ".join(_KEYS))
    partition = data.get("partition")
    time_limit = data.get("time_limit")
    options = data.get("options", [])
    if not isinstance(options, list):
        raise InputError("must be a list", source=source, field="slurm.options", valid="[--account=NAME, ...]")
    for i, option in enumerate(options):
        check_sbatch_option(option, source=source, field=f"slurm.options[{i}]", elsewhere=_KEYED)
    base = SlurmSettings(
        partition=None if partition is None else _text(partition, _PARTITION, source, "slurm.partition",
                                                       "a partition name"),
        time_limit=None if time_limit is None else _text(str(time_limit), _TIME, source, "slurm.time_limit",
                                                         "minutes, HH:MM:SS or D-HH:MM:SS"),
        cpus_per_job=int(check_number(data.get("cpus_per_job", 1), source=source, field="slurm.cpus_per_job", low=1,
                                      high=256, integer=True)),
        start_timeout_s=float(check_number(data.get("start_timeout_s", 120.0), source=source,
                                           field="slurm.start_timeout_s", low=1, high=86400)),
        options=tuple(options))
    types = data.get("gpu_types") or {}
    known = list(gpu_types)
    if not isinstance(types, Mapping):
        raise InputError("must map GPU types to their Slurm names", source=source, field="slurm.gpu_types",
                         valid=", ".join(known))
    for name in types:
        if name not in known:
            raise InputError(f"{shown(name, 40)} is not a GPU type of this cluster", source=source,
                             field="slurm.gpu_types", valid=", ".join(known))
    mapped = {str(name): _type(str(name), spec, base, source) for name, spec in types.items()}
    return SlurmSettings(base.partition, base.time_limit, base.cpus_per_job, base.start_timeout_s, base.options,
                         mapped)


def load_slurm_settings(cluster_path: str | Path) -> SlurmSettings:
    """The ``slurm:`` section of the cluster YAML at ``cluster_path`` (checked against its GPU types)."""
    from common.safe_load import load_yaml
    from scheduler.model.cluster import cluster_from_dict

    data = load_yaml(Path(cluster_path), field="slurm", what="cluster file")
    cluster = cluster_from_dict(data, source=str(cluster_path))
    return slurm_settings(data.get("slurm"), cluster.type_names, str(cluster_path))


def sbatch_options(gpu_type: str, gpus: int, jobs: int, settings: SlurmSettings, *, job_name: str,
                   output: Path) -> list[str]:
    """The ``#SBATCH`` options of one group's job (one node, one task, the group's GPUs of its type)."""
    mapped = settings.for_type(gpu_type)
    gres = f"gpu:{mapped.gres}:{gpus}" if mapped.gres else f"gpu:{gpus}"
    options = [f"--job-name={job_name}", "--nodes=1", "--ntasks=1", f"--gres={gres}",
               f"--cpus-per-task={settings.cpus_per_job * jobs}", f"--output={output}", "--open-mode=append"]
    if mapped.partition:
        options.append(f"--partition={mapped.partition}")
    if mapped.constraint:
        options.append(f"--constraint={mapped.constraint}")
    if settings.time_limit:
        options.append(f"--time={settings.time_limit}")
    return [*options, *settings.options]
