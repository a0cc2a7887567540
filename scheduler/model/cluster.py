"""Cluster description: GPU types, each a pool of identical nodes.

A cluster file is YAML::

    gpu_types:
      a100:  {nodes: 2, gpus_per_node: 8, memory_gb: 40}
      t4:    {nodes: 6, gpus_per_node: 4, memory_gb: 16, mps_multi_user: true}

``mps_multi_user`` (default false): the type's MPS serves several users at once. Legacy MPS serves one user at a
time, so the scheduler plans no MPS group of several owners there (:mod:`scheduler.model.owners`).

Nodes of one type are numbered ``0 .. nodes-1`` and GPUs inside a node ``0 .. gpus_per_node-1``; the
placement stage (:mod:`scheduler.model.placement`) speaks in those indices. Objects here are frozen values:
policies and the simulator pass them around and never mutate them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.bounds import MAX_GPUS, check_number
from common.errors import InputError
from common.names import check_name, shown

MAX_GPUS_PER_NODE = 64
MAX_MEMORY_GB = 10_000.0
_VALID_TYPE_FIELDS = (f"nodes (int in [1, {MAX_GPUS}]), gpus_per_node (int in [1, {MAX_GPUS_PER_NODE}]), "
                      f"memory_gb (number in (0, {MAX_MEMORY_GB:g}]); optional mps_multi_user (true or false)")


@dataclass(frozen=True)
class GpuType:
    """One homogeneous pool: ``nodes`` machines with ``gpus_per_node`` GPUs of ``memory_gb`` each."""

    name: str
    nodes: int
    gpus_per_node: int
    memory_gb: float
    mps_multi_user: bool = False  # its MPS serves several users at once (else one at a time: legacy MPS)

    @property
    def total_gpus(self) -> int:
        """All GPUs of this type in the cluster."""
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Cluster:
    """A heterogeneous cluster: GPU type name -> :class:`GpuType` (insertion order is kept)."""

    gpu_types: Mapping[str, GpuType] = field(default_factory=dict)

    def __hash__(self) -> int:  # dict field: hash by content so clusters can key caches
        return hash(tuple(self.gpu_types.values()))

    def __iter__(self) -> Iterator[GpuType]:
        return iter(self.gpu_types.values())

    def __getitem__(self, name: str) -> GpuType:
        return self.gpu_types[name]

    def __contains__(self, name: object) -> bool:
        return name in self.gpu_types

    @property
    def type_names(self) -> tuple[str, ...]:
        return tuple(self.gpu_types)

    @property
    def total_gpus(self) -> int:
        """GPUs of every type together."""
        return sum(t.total_gpus for t in self.gpu_types.values())

    def capacity(self, gpu_type: str) -> int:
        """GPUs of ``gpu_type`` (0 for an unknown type)."""
        t = self.gpu_types.get(gpu_type)
        return t.total_gpus if t else 0

    def scaled(self, factor: int) -> "Cluster":
        """The same cluster with every type's node count multiplied by ``factor`` (for scaling studies)."""
        return Cluster(
            {n: GpuType(n, t.nodes * factor, t.gpus_per_node, t.memory_gb, t.mps_multi_user)
             for n, t in self.gpu_types.items()}
        )

    def to_dict(self) -> dict[str, Any]:
        """The YAML form (inverse of :func:`cluster_from_dict`)."""
        return {
            "gpu_types": {
                n: {"nodes": t.nodes, "gpus_per_node": t.gpus_per_node, "memory_gb": t.memory_gb,
                    **({"mps_multi_user": True} if t.mps_multi_user else {})}
                for n, t in self.gpu_types.items()
            }
        }


def _positive_int(value: Any, *, source: str, field_name: str, high: int = MAX_GPUS) -> int:
    return int(check_number(value, source=source, field=field_name, low=1, high=high, integer=True))


def cluster_from_dict(data: Any, *, source: str = "<cluster>") -> Cluster:
    """Validate the parsed YAML mapping and build a :class:`Cluster`; errors name ``source`` and the field."""
    if not isinstance(data, Mapping) or "gpu_types" not in data:
        raise InputError("a cluster file must be a mapping with a 'gpu_types' key", source=source,
                         field="gpu_types", valid="gpu_types: {NAME: {nodes, gpus_per_node, memory_gb}}")
    # slurm: how `colocate serve --backend slurm` asks Slurm for each type (scheduler.executor.slurm.settings)
    unknown = set(data) - {"gpu_types", "name", "description", "slurm"}
    if unknown:
        raise InputError(f"unknown top-level key(s) {shown(sorted(map(str, unknown)))}", source=source,
                         field=sorted(map(str, unknown))[0][:40],
                         valid="gpu_types, name, description, slurm")
    if "slurm" in data and not isinstance(data["slurm"], Mapping):
        raise InputError("must be a mapping", source=source, field="slurm",
                         valid="partition, time_limit, cpus_per_job, start_timeout_s, options, gpu_types (docs/scale-out.md)")
    raw_types = data["gpu_types"]
    if not isinstance(raw_types, Mapping) or not raw_types:
        raise InputError("must map at least one GPU type name to its description", source=source,
                         field="gpu_types", valid="gpu_types: {NAME: {nodes, gpus_per_node, memory_gb}}")
    types: dict[str, GpuType] = {}
    for name, spec in raw_types.items():
        check_name(name, source=source, field=f"gpu_types.{shown(name, 40)}", what="GPU type name")
        prefix = f"gpu_types.{name}"
        if not isinstance(spec, Mapping):
            raise InputError("must be a mapping", source=source, field=prefix, valid=_VALID_TYPE_FIELDS)
        missing = [k for k in ("nodes", "gpus_per_node", "memory_gb") if k not in spec]
        if missing:
            raise InputError(f"missing {', '.join(missing)}", source=source, field=f"{prefix}.{missing[0]}",
                             valid=_VALID_TYPE_FIELDS)
        extra = set(spec) - {"nodes", "gpus_per_node", "memory_gb", "mps_multi_user"}
        if extra:
            raise InputError(f"unknown key(s) {shown(sorted(map(str, extra)))}", source=source,
                             field=f"{prefix}.{sorted(map(str, extra))[0][:40]}",
                             valid=_VALID_TYPE_FIELDS)
        nodes = _positive_int(spec["nodes"], source=source, field_name=f"{prefix}.nodes")
        per_node = _positive_int(spec["gpus_per_node"], source=source, field_name=f"{prefix}.gpus_per_node",
                                 high=MAX_GPUS_PER_NODE)
        if nodes * per_node > MAX_GPUS:
            raise InputError(f"{nodes} nodes x {per_node} GPUs is more than {MAX_GPUS} GPUs", source=source,
                             field=f"{prefix}.nodes", valid=f"at most {MAX_GPUS} GPUs of one type")
        mem = check_number(spec["memory_gb"], source=source, field=f"{prefix}.memory_gb", low=0,
                           high=MAX_MEMORY_GB, low_open=True, valid=f"GPU memory in GB in (0, {MAX_MEMORY_GB:g}]")
        multi = spec.get("mps_multi_user", False)
        if not isinstance(multi, bool):
            raise InputError(f"{shown(multi)} is not true or false", source=source, field=f"{prefix}.mps_multi_user",
                             valid="true (the type's MPS serves several users at once) or false (the default)")
        types[name] = GpuType(name=name, nodes=nodes, gpus_per_node=per_node, memory_gb=float(mem),
                              mps_multi_user=multi)
    return Cluster(types)


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate a cluster YAML file (see the module docstring for the format)."""
    from common.safe_load import load_yaml

    p = Path(path)
    if not p.is_file():
        raise InputError("cluster file not found", source=p, field="cluster", valid="a YAML file path")
    return cluster_from_dict(load_yaml(p, field="gpu_types", what="cluster file"), source=str(p))
