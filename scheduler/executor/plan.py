"""Read a scheduling decision (``colocate schedule --json``) into GPU groups, and decide what each job runs.

The allocation JSON (:mod:`scheduler.formats.allocation_file`; schema in the README)::

    {"allocations": [{"job": "a", "gpu_type": "h100", "num_gpus": 1, "batch_size": 64, "partner": "b",
                      "node": 0, "gpus": [1]}, ...],
     "unallocated": ["c"], "objective": ..., "solver": {...}}

Extra keys written by ``colocate schedule`` (``nodes``, ``expected_goodput``, ``unplaced``) are understood;
``sharing`` (``timeslice`` | ``mps``), ``command`` and ``application`` may be added per allocation by hand.
A *GPU group* is the unit every executor works with: one job alone on its GPUs, or a packed pair sharing
exactly the same GPUs.

What a job runs, first match wins:

1. a command for the job's name, then for its application, in the ``--commands`` YAML file;
2. the allocation's own ``command``;
3. the built-in trainer (:mod:`scheduler.executor.train`) with the job's application as a model of the zoo
   (``resnet18``, ``tiny_cnn``, ...) or one of the aliases in :data:`APPLICATION_MODELS`; the application
   comes from the allocation's ``application`` or from the jobs CSV given to ``colocate schedule``.

Commands may use the placeholders ``{job}``, ``{batch_size}``, ``{num_gpus}``, ``{gpu_type}``,
``{partner}``, ``{node}`` and ``{gpus}`` (write ``{{``/``}}`` for literal braces); the same values are in
the environment of every job as ``COLOCATE_JOB``, ``COLOCATE_BATCH_SIZE``, ... (see :func:`job_environment`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeGuard

from common.bounds import MAX_BATCH, MAX_GPUS
from common.errors import InputError
from common.names import NAME_RULE, is_safe_name, safe_name, shown
from common.placeholders import VALID, check_template
from profiler.gpu.sharing import sharing_mode_names
from scheduler.formats.allocation_file import read_allocation_file
from scheduler.model.cluster import MAX_GPUS_PER_NODE
from scheduler.model.jobs import APPLICATION_MODELS

MAX_COMMAND_CHARS = 4096  # as a submitted job's (scheduler.service.jobs.jobspec): a command, filled in or not

DEFAULT_IMAGE_SIZE = 32


@dataclass(frozen=True)
class JobLaunch:
    """One job to start: either the built-in trainer on ``model`` or a user ``command``."""

    name: str
    gpu_type: str
    num_gpus: int
    batch_size: int  # global batch (all GPUs together), as the scheduler decided it
    partner: str | None
    model: str | None = None  # built-in trainer
    image_size: int = DEFAULT_IMAGE_SIZE
    command: str | None = None  # user shell command, placeholders already filled in

    @property
    def builtin(self) -> bool:
        return self.command is None


@dataclass(frozen=True)
class GpuGroup:
    """Jobs that share exactly the same GPUs: one job (solo), a packed pair or a group of three."""

    index: int
    gpu_type: str
    nodes: tuple[int, ...]  # indices within gpu_type; more than one only for a multi-node solo job
    gpus: tuple[int, ...]  # GPU indices on each node
    jobs: tuple[JobLaunch, ...]
    sharing: str  # "none" (solo), "timeslice" or "mps"

    @property
    def node(self) -> int:
        return self.nodes[0]

    @property
    def key(self) -> str:
        return f"g{self.index:02d}"

    @property
    def label(self) -> str:
        return "+".join(job.name for job in self.jobs)

    @property
    def slug(self) -> str:
        """File-name-safe name: ``g00-jobA+jobB``."""
        return f"{self.key}-" + "+".join(safe_name(job.name, 40) for job in self.jobs)

    @property
    def gpus_per_node(self) -> int:
        return len(self.gpus)

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) > 1

    @property
    def where(self) -> str:
        nodes = ",".join(str(n) for n in self.nodes)
        return f"{self.gpu_type} node {nodes} GPU {','.join(str(g) for g in self.gpus)}"

    def require_single_node(self, source: str | Path | None, backend: str) -> None:
        """Refuse a multi-node group on a backend that starts one node's processes (only Slurm spans nodes)."""
        if self.multi_node:
            raise InputError(f"group {self.label} spans nodes {list(self.nodes)}", source=source, field="nodes",
                             valid=f"single-node groups {backend}; use --emit slurm for multi-node jobs")


@dataclass(frozen=True)
class LaunchPlan:
    """All GPU groups of one decision, plus the jobs it left out (unallocated or unplaced)."""

    groups: tuple[GpuGroup, ...]
    not_launched: tuple[str, ...] = ()
    source: str = "<allocation>"

    @property
    def jobs(self) -> list[JobLaunch]:
        return [job for group in self.groups for job in group.jobs]

    def node_keys(self) -> list[tuple[str, int]]:
        """Distinct ``(gpu_type, node)`` pairs the plan uses, in order of first use."""
        seen: dict[tuple[str, int], None] = {}
        for group in self.groups:
            for node in group.nodes:
                seen.setdefault((group.gpu_type, node), None)
        return list(seen)

    def on_node(self, gpu_type: str, node: int) -> LaunchPlan:
        """The groups placed on one node."""
        return replace(self, groups=tuple(g for g in self.groups if g.gpu_type == gpu_type and node in g.nodes))


def check_cluster(plan: LaunchPlan, cluster: Any, source: str | Path) -> None:
    """Refuse groups on GPU types, nodes or GPU indices the cluster (``scheduler.model.cluster.Cluster``) lacks."""
    for group in plan.groups:
        field = f"allocations[{group.label}]"
        if group.gpu_type not in cluster:
            raise InputError(f"GPU type {group.gpu_type!r} of {group.label} is not in the cluster", source=plan.source,
                             field=f"{field}.gpu_type", valid=", ".join(cluster.type_names) + f" (from {source})")
        pool = cluster[group.gpu_type]
        if max(group.nodes) >= pool.nodes:
            raise InputError(f"node {max(group.nodes)} of {group.gpu_type} is outside the cluster", source=plan.source,
                             field=f"{field}.nodes", valid=f"node indices in [0, {pool.nodes}) (from {source})")
        if max(group.gpus) >= pool.gpus_per_node:
            raise InputError(f"GPU {max(group.gpus)} of a {group.gpu_type} node is outside the cluster",
                             source=plan.source, field=f"{field}.gpus",
                             valid=f"GPU indices in [0, {pool.gpus_per_node}) (from {source})")


def job_environment(job: JobLaunch, group: GpuGroup) -> dict[str, str]:
    """What every job's process finds in its environment (user commands may read it)."""
    return {
        "COLOCATE_JOB": job.name,
        "COLOCATE_BATCH_SIZE": str(job.batch_size),
        "COLOCATE_NUM_GPUS": str(job.num_gpus),
        "COLOCATE_GPU_TYPE": job.gpu_type,
        "COLOCATE_PARTNER": job.partner or "",
        "COLOCATE_PARTNERS": ",".join(j.name for j in group.jobs if j.name != job.name),  # a group of three: both
        "COLOCATE_GROUP": group.slug,
    }


# -- reading ---------------------------------------------------------------------------------------------
def load_commands(path: Path) -> dict[str, str]:
    """The ``--commands`` YAML: a mapping from job name or application to a shell command."""
    from common.safe_load import load_yaml

    if not path.is_file():
        raise InputError("commands file not found", source=path, field="commands",
                         valid="a YAML mapping of job or application names to shell commands")
    data = load_yaml(path, what="commands file")
    if not isinstance(data, dict):
        raise InputError("must be a mapping", source=path, valid="job-or-application: 'shell command'")
    for key, value in data.items():
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{shown(value)} is not a command", source=path, field=str(key)[:40],
                             valid="a non-empty shell command string")
        check_template(value, source=str(path), field=str(key), max_chars=MAX_COMMAND_CHARS, newlines=False)
    return {str(k): str(v) for k, v in data.items()}


def load_plan(
    path: str | Path,
    *,
    jobs_path: str | Path | None = None,
    commands_path: str | Path | None = None,
    sharing: str = "timeslice",
    image_size: int | None = None,
) -> LaunchPlan:
    """Read the allocation JSON, the jobs CSV (for applications) and the commands file into a plan."""
    applications: dict[str, str] = {}
    batch_sizes: dict[str, int] = {}
    if jobs_path is not None:
        from scheduler.model.jobs import load_jobs

        for job in load_jobs(jobs_path):
            applications[job.name] = job.application
            if job.batch_size:
                batch_sizes[job.name] = job.batch_size
    commands = load_commands(Path(commands_path)) if commands_path is not None else {}
    path = Path(path)
    return build_plan(read_allocation_file(path), source=str(path), applications=applications, batch_sizes=batch_sizes,
                      commands=commands, sharing=sharing, image_size=image_size)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _entry_fields(entry: Any, i: int, source: str) -> dict[str, Any]:
    """Validate one allocation entry and return its normalised fields."""
    where = f"allocations[{i}]"
    if not isinstance(entry, dict):
        raise InputError("is not an object", source=source, field=where,
                         valid='{"job","gpu_type","num_gpus","batch_size","partner","node","gpus"}')

    def bad(key: str, message: str, valid: str) -> InputError:
        return InputError(message, source=source, field=f"{where}.{key}", valid=valid)

    job = entry.get("job")
    if not is_safe_name(job):
        raise bad("job", f"{shown(job)} is not a job name", NAME_RULE)
    gpu_type = entry.get("gpu_type")
    if not is_safe_name(gpu_type):
        raise bad("gpu_type", f"{shown(gpu_type)} is not a GPU type", f"a GPU type name such as h100 ({NAME_RULE})")
    num_gpus = entry.get("num_gpus")
    if not _is_int(num_gpus) or not 1 <= num_gpus <= MAX_GPUS:
        raise bad("num_gpus", f"{shown(num_gpus)} is not a GPU count", f"an integer in [1, {MAX_GPUS}]")
    batch = entry.get("batch_size")
    if batch is not None and (not _is_int(batch) or not 1 <= batch <= MAX_BATCH):
        raise bad("batch_size", f"{shown(batch)} is not a batch size", f"an integer in [1, {MAX_BATCH}] or null")
    partner = entry.get("partner")
    if partner is not None and (not is_safe_name(partner) or partner == job):
        raise bad("partner", f"{shown(partner)} is not a partner", "another job's name or null")
    partners = entry.get("partners") or ([partner] if partner is not None else [])
    if (not isinstance(partners, list) or len(partners) > 2 or len(set(partners)) != len(partners)
            or not all(is_safe_name(o) and o != job for o in partners)
            or (partner is not None and partner not in partners)):
        raise bad("partners", f"{shown(partners)} is not a list of partners",
                  "up to two other jobs' names (including partner), or []")
    node = entry.get("node")
    nodes = entry.get("nodes")
    if node is None and not nodes:
        return {"job": job, "placed": False}
    if nodes:
        if (not isinstance(nodes, list) or not all(_is_int(n) and 0 <= n < MAX_GPUS for n in nodes)
                or len(set(nodes)) != len(nodes)):
            raise bad("nodes", f"{shown(nodes)} is not a list of node indices", f"distinct integers in [0, {MAX_GPUS})")
        if node is not None and node != nodes[0]:
            raise bad("node", f"{node!r} is not the first of nodes {nodes}", "nodes[0]")
    else:
        if not _is_int(node) or not 0 <= node < MAX_GPUS:
            raise bad("node", f"{shown(node)} is not a node index", f"an integer in [0, {MAX_GPUS}), or null when unplaced")
        nodes = [node]
    gpus = entry.get("gpus")
    if (not isinstance(gpus, list) or not gpus or not all(_is_int(g) and 0 <= g < MAX_GPUS_PER_NODE for g in gpus)
            or len(set(gpus)) != len(gpus)):
        raise bad("gpus", f"{shown(gpus)} is not a list of GPU indices",
                  f"a non-empty list of distinct integers in [0, {MAX_GPUS_PER_NODE})")
    if num_gpus != len(gpus) * len(nodes):
        raise bad("num_gpus", f"{num_gpus} GPUs but {len(nodes)} node(s) × {len(gpus)} GPU indices",
                  "num_gpus = len(nodes) × len(gpus)")
    sharing = entry.get("sharing")
    if sharing is not None and sharing not in sharing_mode_names():
        raise bad("sharing", f"{shown(sharing)} is not a sharing mode", ", ".join(sharing_mode_names()))
    for key in ("command", "application"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise bad(key, f"{shown(value)} is not a {key}", "a non-empty string")
    return {"job": job, "placed": True, "gpu_type": gpu_type, "num_gpus": num_gpus, "batch_size": batch,
            "partner": partner, "others": tuple(partners), "nodes": tuple(nodes), "gpus": tuple(gpus), "sharing": sharing,
            "command": entry.get("command"), "application": entry.get("application")}


def _resolve_job(
    fields: dict[str, Any], i: int, *, source: str, applications: Mapping[str, str], batch_sizes: Mapping[str, int],
    commands: Mapping[str, str], image_size: int | None,
) -> JobLaunch:
    """What job ``fields`` runs (see the module docstring for the order)."""
    from models import registered_names

    name = fields["job"]
    where = f"allocations[{i}]"
    batch = fields["batch_size"] or batch_sizes.get(name)
    if batch is None:
        raise InputError(f"job {name!r} has no batch size", source=source, field=f"{where}.batch_size",
                         valid="an integer >= 1 here or in the jobs CSV")
    application = fields["application"] or applications.get(name)
    values = {"job": name, "batch_size": batch, "num_gpus": fields["num_gpus"], "gpu_type": fields["gpu_type"],
              "partner": fields["partner"] or "", "node": fields["nodes"][0],
              "gpus": ",".join(str(g) for g in fields["gpus"])}
    base = JobLaunch(name, fields["gpu_type"], fields["num_gpus"], batch, fields["partner"])
    template: str | None = None
    if name in commands:
        template, template_source, template_field = commands[name], "--commands", name
    elif application is not None and application in commands:
        template, template_source, template_field = commands[application], "--commands", application
    elif fields["command"] is not None:
        template, template_source, template_field = fields["command"], source, f"{where}.command"
    if template is not None:
        check_template(template, source=template_source, field=template_field, max_chars=MAX_COMMAND_CHARS,
                       newlines=False)  # one line of an sbatch script or a pod's argument
        try:
            command = template.format_map(values)
        except (KeyError, IndexError, ValueError, TypeError) as err:
            raise InputError(f"cannot fill in the command ({err})", source=template_source, field=template_field,
                             valid=VALID) from None
        if len(command) > MAX_COMMAND_CHARS:
            raise InputError(f"{len(command)} characters once filled in", source=template_source,
                             field=template_field, valid=f"at most {MAX_COMMAND_CHARS} characters")
        return replace(base, command=command)
    if application is None:
        raise InputError(f"job {name!r}: nothing to run (no application, no command)", source=source,
                         field=f"{where}.application",
                         valid="give --jobs JOBS.csv (its application column), or a command in --commands")
    if application in registered_names():
        return replace(base, model=application, image_size=image_size or DEFAULT_IMAGE_SIZE)
    if application in APPLICATION_MODELS:
        model, size = APPLICATION_MODELS[application]
        return replace(base, model=model, image_size=image_size or size)
    raise InputError(f"job {name!r}: application {application!r} is neither a model of the zoo nor has a command",
                     source=source, field=f"{where}.application",
                     valid="a model (" + ", ".join(registered_names()) + "), an alias ("
                           + ", ".join(APPLICATION_MODELS) + "), or a command for it in --commands")


def build_plan(
    data: Any,
    *,
    source: str = "<allocation>",
    applications: Mapping[str, str] | None = None,
    batch_sizes: Mapping[str, int] | None = None,
    commands: Mapping[str, str] | None = None,
    sharing: str = "timeslice",
    image_size: int | None = None,
) -> LaunchPlan:
    """Validate a parsed allocation document and group its jobs by the GPUs they share."""
    if sharing not in sharing_mode_names():
        raise InputError(f"unknown sharing mode {sharing!r}", field="sharing", valid=", ".join(sharing_mode_names()))
    if not isinstance(data, dict) or not isinstance(data.get("allocations"), list):
        raise InputError("has no 'allocations' list", source=source, field="allocations",
                         valid="the output of colocate schedule --json")
    unallocated = data.get("unallocated", [])
    if not isinstance(unallocated, list) or not all(isinstance(n, str) for n in unallocated):
        raise InputError(f"{shown(unallocated)} is not a list of job names", source=source, field="unallocated",
                         valid="a list of job names")
    entries = [_entry_fields(entry, i, source) for i, entry in enumerate(data["allocations"])]
    index_of: dict[str, int] = {}
    for i, fields in enumerate(entries):
        if fields["job"] in index_of:
            raise InputError(f"job {fields['job']!r} is allocated twice", source=source, field=f"allocations[{i}].job",
                             valid="each job at most once")
        index_of[fields["job"]] = i
    not_launched = list(unallocated) + [f["job"] for f in entries if not f["placed"]]
    placed = [(i, f) for i, f in enumerate(entries) if f["placed"]]

    # partners: symmetric, same GPUs
    for i, fields in placed:
        group = {fields["job"], *fields["others"]}
        for partner in fields["others"]:
            j = index_of.get(partner)
            other = entries[j] if j is not None else None
            if other is None or not other["placed"] or {other["job"], *other["others"]} != group:
                raise InputError(f"job {fields['job']!r} names partner {partner!r}, which does not name it back",
                                 source=source, field=f"allocations[{i}].partner",
                                 valid="partners that name each other and are both placed")
            for key in ("gpu_type", "nodes", "gpus"):
                if fields[key] != other[key]:
                    raise InputError(f"partners {fields['job']!r} and {partner!r} differ in {key}", source=source,
                                     field=f"allocations[{i}].{key}", valid="the same GPUs for every job of a group")
    # one group per GPU set; no GPU used by two groups
    groups: list[GpuGroup] = []
    used: dict[tuple[str, int, int], str] = {}
    seen: set[str] = set()
    for i, fields in placed:
        if fields["job"] in seen:
            continue
        members = [(i, fields)] + [(index_of[o], entries[index_of[o]]) for o in fields["others"]]
        for node in fields["nodes"]:
            for gpu in fields["gpus"]:
                slot = (fields["gpu_type"], node, gpu)
                if slot in used:
                    raise InputError(f"GPU {gpu} of {fields['gpu_type']} node {node} is given to both "
                                     f"{used[slot]!r} and {fields['job']!r}", source=source,
                                     field=f"allocations[{i}].gpus", valid="GPUs shared only by partners")
                used[slot] = fields["job"]
        modes = {f["sharing"] for _, f in members if f["sharing"] is not None}
        if len(modes) > 1:
            raise InputError(f"partners of {fields['job']!r} ask for different sharing modes", source=source,
                             field=f"allocations[{i}].sharing", valid="the same mode for both jobs of a pair")
        mode = "none" if len(members) == 1 else (modes.pop() if modes else sharing)
        jobs = tuple(
            _resolve_job(f, k, source=source, applications=applications or {}, batch_sizes=batch_sizes or {},
                         commands=commands or {}, image_size=image_size)
            for k, f in members
        )
        seen.update(job.name for job in jobs)
        groups.append(GpuGroup(len(groups), fields["gpu_type"], fields["nodes"], fields["gpus"], jobs, mode))
    return LaunchPlan(tuple(groups), tuple(not_launched), source)
