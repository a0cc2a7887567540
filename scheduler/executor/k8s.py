"""Write one Kubernetes pod manifest per job, pinning partners to one GPU with HAMi.

Kubernetes' device plugins hand out whole GPUs (or anonymous time-slices): nothing says "these two pods
share that GPU". HAMi (CNCF sandbox, https://github.com/Project-HAMi/HAMi) does, through pod annotations:

* ``nvidia.com/use-gpuuuid: GPU-...`` restricts a pod to the listed GPU UUIDs — both pods of a pair name the
  same UUID, so they land on the same physical GPU (a solo job names its own GPUs);
* ``nvidia.com/vgpu-mode: mps`` for pairs that share by MPS (HAMi runs the MPS server), ``hami-core`` for
  time-sliced pairs (HAMi's own sharing);
* ``nvidia.com/use-gputype`` names the GPU type as well, so a missing UUID still lands on the right type.

These names are HAMi's documented pod annotations and resource names ("Pod configs: annotations" and the chart's
``resourceName`` / ``resourceMemPercentage`` in https://github.com/Project-HAMi/HAMi/blob/master/docs/config.md;
``mps`` is HAMi's ``MpsMode`` of ``nvidia.com/vgpu-mode`` beside ``hami-core`` and ``mig``);
``tests/test_k8s_manifests.py`` checks every emitted pod against that list and against the Kubernetes API
schema.

Each pod asks for ``nvidia.com/gpu: N`` (one vGPU per physical GPU) and, in a pair, its share of the GPU's
memory (``nvidia.com/gpumem-percentage``, default an equal share: 50 % in a pair, 33 % in a group of three;
without it HAMi gives a vGPU the whole memory and the partners could not fit). GPU UUIDs and node names come
from an inventory YAML::

    h100:                       # GPU type as in the allocation
      - node: gpu-node-17       # Kubernetes node name of the allocation's node 0 of that type
        gpus: [GPU-8f3e..., GPU-0a1b..., ...]   # UUIDs by GPU index (nvidia-smi -L)

Without an inventory the manifests hold placeholders (``GPU-UUID-h100-node0-gpu1``) to fill in; the
nodeSelector is then left out (the UUID pins the node anyway).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from common.errors import InputError
from common.names import shown
from profiler.campaign.ray_backend import ray_accelerator_name
from profiler.gpu.sharing import sharing_mode
from scheduler.executor.command import RunSettings, job_argv
from scheduler.executor.plan import GpuGroup, JobLaunch, LaunchPlan, job_environment

ANNOTATION_UUID = "nvidia.com/use-gpuuuid"
ANNOTATION_MODE = "nvidia.com/vgpu-mode"
ANNOTATION_TYPE = "nvidia.com/use-gputype"
RESOURCE_GPU = "nvidia.com/gpu"
RESOURCE_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_SCHEDULER = "hami-scheduler"
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # RFC 1123 label, as Kubernetes requires
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")  # registry/name[:tag][@digest], no space or control


def check_k8s_options(image: str, namespace: str | None) -> None:
    """Refuse an image or namespace that is not one (one line): an empty image, a newline or a space in either."""
    if not isinstance(image, str) or not _IMAGE.fullmatch(image):
        raise InputError(f"{shown(image)} is not a container image reference", field="image",
                         valid="e.g. registry.example.com/colocate:1.0 (no spaces or control characters)")
    if namespace is not None and (not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace)):
        raise InputError(f"{shown(namespace)} is not a Kubernetes namespace", field="namespace",
                         valid="1-63 lower-case letters, digits or '-', starting and ending with a letter or digit")


@dataclass(frozen=True)
class K8sOptions:
    image: str = "colocate:latest"  # an image with this package, torch and CUDA
    namespace: str | None = None
    memory_percent_per_partner: int | None = None  # None: an equal share, 100 // members (50 %, 33 %)
    scheduler_name: str = HAMI_SCHEDULER
    python: str = "python3"

    def __post_init__(self) -> None:
        check_k8s_options(self.image, self.namespace)


Inventory = dict[str, list[dict[str, Any]]]


_NODE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_GPU_UUID = re.compile(r"(GPU|MIG)-[A-Za-z0-9/-]{1,96}")


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate the inventory YAML (see the module docstring)."""
    path = Path(path)
    valid = "gpu_type: [{node: NAME, gpus: [GPU-UUID, ...]}, ...]"
    if not path.is_file():
        raise InputError("inventory file not found", source=path, field="inventory", valid=valid)
    from common.safe_load import load_yaml

    data = load_yaml(path, field="inventory", what="inventory file")
    if not isinstance(data, dict):
        raise InputError("must be a mapping of GPU types to node lists", source=path, valid=valid)
    for gpu_type, nodes in data.items():
        if not isinstance(nodes, list):
            raise InputError("is not a list of nodes", source=path, field=str(gpu_type), valid=valid)
        for i, node in enumerate(nodes):
            where = f"{gpu_type}[{i}]"
            if not isinstance(node, dict) or not isinstance(node.get("node"), str):
                raise InputError("needs a 'node' name", source=path, field=where, valid=valid)
            if not _NODE_NAME.fullmatch(node["node"]):  # a pod's nodeSelector value: the API server's rule
                raise InputError(f"{shown(node['node'])} is not a Kubernetes node name", source=path,
                                 field=f"{where}.node", valid="1-63 letters, digits, '-', '_' or '.', starting and "
                                                              "ending with a letter or digit")
            gpus = node.get("gpus")
            if not isinstance(gpus, list) or not all(isinstance(g, str) and g for g in gpus):
                raise InputError("needs 'gpus', a list of GPU UUIDs", source=path, field=f"{where}.gpus", valid=valid)
            bad = next((g for g in gpus if not _GPU_UUID.fullmatch(g)), None)
            if bad is not None:  # joined with commas into one annotation: a comma, a newline or a space breaks it
                raise InputError(f"{shown(bad)} is not a GPU UUID", source=path, field=f"{where}.gpus",
                                 valid="GPU-… or MIG-… (letters, digits, '-' and '/'; at most 100 characters), as "
                                       "nvidia-smi -L prints")
    return {str(k): v for k, v in data.items()}


def dns_name(text: str, limit: int = 63) -> str:
    """An RFC 1123 label (pod names): lower-case alphanumerics and '-'."""
    name = _DNS_LABEL.sub("-", text.lower()).strip("-")
    if name == text and len(name) <= limit:
        return name
    # changed by the rules above: add a hash of the original so that two names never share a pod or file
    import hashlib

    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{(name or 'job')[:limit - 9].rstrip('-')}-{digest}"


def _gpu_uuids(group: GpuGroup, inventory: Inventory | None, source: str) -> tuple[list[str], str | None]:
    if inventory is None:
        return [f"GPU-UUID-{group.gpu_type}-node{group.node}-gpu{g}" for g in group.gpus], None
    nodes = inventory.get(group.gpu_type)
    if nodes is None or group.node >= len(nodes):
        raise InputError(f"no node {group.node} of type {group.gpu_type} for group {group.label}", source=source,
                         field=group.gpu_type, valid=f"at least {group.node + 1} nodes listed under {group.gpu_type}")
    node = nodes[group.node]
    if max(group.gpus) >= len(node["gpus"]):
        raise InputError(f"node {node['node']} lists {len(node['gpus'])} GPUs; group {group.label} uses GPU "
                         f"{max(group.gpus)}", source=source, field=f"{group.gpu_type}[{group.node}].gpus",
                         valid="a UUID for every GPU index")
    return [node["gpus"][g] for g in group.gpus], node["node"]


def pod_manifest(job: JobLaunch, group: GpuGroup, run: RunSettings, options: K8sOptions,
                 inventory: Inventory | None = None, source: str = "<inventory>") -> dict[str, Any]:
    """The pod of one job (a plain dict, ready for ``yaml.safe_dump``)."""
    uuids, node_name = _gpu_uuids(group, inventory, source)
    annotations = {ANNOTATION_UUID: ",".join(uuids), ANNOTATION_TYPE: ray_accelerator_name(group.gpu_type)}
    limits: dict[str, Any] = {RESOURCE_GPU: group.gpus_per_node}
    if len(group.jobs) > 1:
        annotations[ANNOTATION_MODE] = sharing_mode(group.sharing).k8s_mode
        share = options.memory_percent_per_partner
        limits[RESOURCE_MEMORY_PERCENT] = share if share is not None else 100 // len(group.jobs)
    if job.partner:
        annotations["colocate.io/partner"] = job.partner
        annotations["colocate.io/partners"] = ",".join(j.name for j in group.jobs if j.name != job.name)
    env = {**job_environment(job, group), "COLOCATE_PROGRESS_FILE": f"/tmp/{dns_name(job.name)}.progress.json"}
    argv = job_argv(job, run, python=options.python, progress_file=env["COLOCATE_PROGRESS_FILE"])
    metadata: dict[str, Any] = {
        "name": dns_name(f"colocate-{job.name}"),
        "labels": {"app.kubernetes.io/part-of": "colocate", "colocate.io/group": group.key,
                   "colocate.io/job": dns_name(job.name)},
        "annotations": annotations,
    }
    if options.namespace:
        metadata["namespace"] = options.namespace
    spec: dict[str, Any] = {
        "schedulerName": options.scheduler_name,
        "restartPolicy": "Never",
        "containers": [{
            "name": "train",
            "image": options.image,
            "command": argv,
            "env": [{"name": k, "value": v} for k, v in env.items()],
            "resources": {"limits": limits},
        }],
    }
    if node_name is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def emit_k8s(plan: LaunchPlan, out_dir: str | Path, run: RunSettings, options: K8sOptions,
             inventory: Inventory | None = None, inventory_source: str = "<inventory>") -> list[Path]:
    """Write ``<group>-<job>.yaml`` per job; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for group in plan.groups:
        group.require_single_node(plan.source, "for Kubernetes")
        for job in group.jobs:
            manifest = pod_manifest(job, group, run, options, inventory, inventory_source)
            path = out / f"{group.key}-{dns_name(job.name)}.yaml"
            path.write_text(yaml.safe_dump(manifest, sort_keys=False))
            written.append(path)
    return written
