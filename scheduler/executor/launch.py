"""Carry out a scheduling decision: an allocation JSON → a launch plan → one back end runs or emits it.

``colocate launch`` parses its options into a :class:`LaunchRequest` and calls :func:`launch`; everything
between (checks, plan, node selection, which executor, its options) happens here, so scripts and services
can launch an allocation without the CLI. Back ends come from the executor registry
(:mod:`scheduler.executor.registry`: ``local`` for this node, ``ray`` for a Ray cluster), the same objects
``colocate serve`` drives; emitters write files instead of running: ``slurm`` (sbatch scripts) and ``k8s``
(HAMi pod manifests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common.bounds import MAX_SECONDS, check_number
from common.errors import InputError
from common.names import safe_name, shown
from common.options import option, shared_option
from profiler.gpu.sharing import sharing_mode_names
from scheduler.executor.base import DEVICES, JobStatus, LaunchReport, LaunchSettings, Runtime
from scheduler.executor.command import RunSettings
from scheduler.executor.plan import LaunchPlan, load_plan
from scheduler.executor.registry import LAUNCH_BACKENDS, make_executor

BACKENDS = LAUNCH_BACKENDS  # slurm runs serve's groups; launch writes sbatch scripts instead (--emit slurm)
EMITTERS = ("slurm", "k8s")


def _backend_names() -> tuple[str, ...]:
    return LAUNCH_BACKENDS


@dataclass(frozen=True)
class LaunchRequest:
    """Everything ``colocate launch`` can be asked; the one source of its defaults, help and checks."""

    allocation: Path = option(help="Output of colocate schedule --json.", argument=True, metavar="ALLOCATION.json")
    jobs: Path | None = option(None, "Jobs CSV given to colocate schedule (applications).")
    cluster: Path | None = shared_option("cluster", None, show_default="none: node and GPU indices unchecked")
    commands: Path | None = option(None, "YAML: job or application -> shell command.")
    backend: str = option("local", "Where groups run: local (this node) or ray (needs the ray extra).",
                          choices=_backend_names)
    emit: tuple[str, Path] | None = option(None, "Write sbatch scripts or pod manifests to DIR instead.",
                                           metavar="slurm|k8s DIR", show_default=False)
    address: str | None = option(None, "Ray cluster address for --backend ray.")
    node: str | None = option(None, "local: run the groups of TYPE:N (e.g. h100:0).", show_default="all")
    sharing: str = shared_option("sharing", "timeslice", of=Runtime)
    device: str = shared_option("device", "auto", of=Runtime)
    steps: int = option(0, "Iterations per built-in job; 0 = until stopped.")
    duration_s: float | None = option(None, "Stop every job after this many seconds.", flag="--duration")
    threads: int = shared_option("threads", 1, of=Runtime)
    image_size: int | None = option(None, "Input size of built-in jobs.", show_default="32; imagenet: 224")
    log_dir: Path | None = option(None, "Logs and progress files.", show_default="launch-logs/ALLOCATION-NAME")
    grace_s: float = shared_option("grace_s", 10.0, of=Runtime)
    num_cpus: float = option(1.0, "ray: CPUs each group task reserves.")
    sbatch_options: tuple[str, ...] = option((), "slurm: extra #SBATCH line, e.g. --partition=gpu (repeatable; "
                                                 "--account, --qos, --time, ...: docs/scale-out.md).",
                                             flag="--sbatch-option", show_default=False)
    typed_gres: bool = option(False, "slurm: --gres=gpu:TYPE:N instead of --gres=gpu:N + --constraint=TYPE.")
    image: str = option("colocate:latest", "k8s: container image with colocate installed.")
    namespace: str | None = option(None, "k8s: namespace of the pods.")
    inventory: Path | None = option(None, "k8s: YAML of node names and GPU UUIDs.")

    def __post_init__(self) -> None:
        if self.sharing not in sharing_mode_names():
            raise InputError(f"unknown sharing mode {shown(self.sharing)}", field="sharing",
                             valid=", ".join(sharing_mode_names()))
        if self.device not in DEVICES:
            raise InputError(f"unknown device {shown(self.device)}", field="device", valid=", ".join(DEVICES))
        self._check_numbers()
        if self.emit is None and self.backend not in BACKENDS:
            raise InputError(f"unknown backend {shown(self.backend)}", field="backend",
                             valid=", ".join(BACKENDS) + " (Slurm: --emit slurm DIR; Kubernetes: --emit k8s DIR)")
        if self.emit is not None and self.emit[0] not in EMITTERS:
            raise InputError(f"unknown emitter {shown(self.emit[0])}", field="emit", valid="slurm DIR, k8s DIR")
        self._check_sbatch_options()
        if self.emit is not None and self.emit[0] == "k8s":
            self._check_k8s()
        self._check_outputs()

    def _check_sbatch_options(self) -> None:
        """The options the scripts pass on: one allowed sbatch option each, as sbatch reads it (no spaces)."""
        from scheduler.executor.slurm.settings import check_sbatch_option

        elsewhere = {} if self.typed_gres else {"--constraint": "the script (--constraint=GPU_TYPE; --typed-gres "
                                                                "leaves it out)"}
        for option_text in self.sbatch_options:
            check_sbatch_option(option_text, field="sbatch_options", elsewhere=elsewhere)

    def _check_k8s(self) -> None:
        """What a pod manifest carries verbatim: an image reference and a namespace Kubernetes accepts."""
        from scheduler.executor.k8s import check_k8s_options

        check_k8s_options(self.image, self.namespace)

    def _check_outputs(self) -> None:
        """Where files go, checked before anything is read or written (nothing is created here)."""
        from profiler.campaign.outdir import check_out_dir

        if self.emit is not None:
            check_out_dir(self.emit[1], field="emit")
        if self.log_dir is not None:
            check_out_dir(self.log_dir, field="log_dir")

    def _check_numbers(self) -> None:
        """Every numeric option finite and inside a documented range (NaN, inf and typos such as 1e12 refused)."""
        from models import MIN_IMAGE_SIZE

        check_number(self.steps, field="steps", low=0, high=10**9, integer=True)
        check_number(self.threads, field="threads", low=1, high=1024, integer=True)
        if self.duration_s is not None:
            check_number(self.duration_s, field="duration_s", low=0, high=MAX_SECONDS, low_open=True)
        check_number(self.grace_s, field="grace_s", low=0, high=3600, valid="seconds in [0, 3600]")
        check_number(self.num_cpus, field="num_cpus", low=0, high=1024, low_open=True)
        if self.image_size is not None:
            check_number(self.image_size, field="image_size", low=MIN_IMAGE_SIZE, high=4096, integer=True)

    @property
    def run(self) -> RunSettings:
        return RunSettings(device=self.device, steps=self.steps, threads=self.threads)

    @property
    def settings(self) -> LaunchSettings:
        log_dir = self.log_dir or Path("launch-logs") / safe_name(self.allocation.stem)
        return LaunchSettings(run=self.run, log_dir=log_dir.resolve(), duration_s=self.duration_s,
                              stop_grace_s=self.grace_s)


@dataclass(frozen=True)
class EmittedFiles:
    """What an emitter wrote, and how the user submits it."""

    kind: str
    files: tuple[Path, ...]
    hint: str


@dataclass(frozen=True)
class LaunchOutcome:
    """The plan and either the files written (``--emit``) or the jobs' final statuses (a back end ran it)."""

    plan: LaunchPlan
    emitted: EmittedFiles | None = None
    report: LaunchReport | None = None


def load_launch_plan(request: LaunchRequest) -> LaunchPlan:
    """The allocation as GPU groups; refuses an allocation that places no job, or (with ``cluster``) GPU types,
    nodes or GPU indices the cluster lacks."""
    plan = load_plan(request.allocation, jobs_path=request.jobs, commands_path=request.commands,
                     sharing=request.sharing, image_size=request.image_size)
    if request.cluster is not None:
        from scheduler.executor.plan import check_cluster
        from scheduler.model.cluster import load_cluster

        check_cluster(plan, load_cluster(request.cluster), request.cluster)
    if not plan.groups:
        raise InputError("allocates no job", source=request.allocation, field="allocations",
                         valid="at least one placed job")
    return plan


def emit_plan(request: LaunchRequest, plan: LaunchPlan) -> EmittedFiles:
    """Write sbatch scripts (``slurm``) or pod manifests (``k8s``) for ``plan`` into the ``--emit`` folder."""
    if request.emit is None:
        raise ValueError("emit_plan needs a request with emit=(kind, folder)")
    kind, out_dir = request.emit
    if kind == "slurm":
        from scheduler.executor.slurm.emit import SlurmOptions, emit_slurm

        options = SlurmOptions(extra=request.sbatch_options, typed_gres=request.typed_gres, grace_s=int(request.grace_s))
        written = emit_slurm(plan, out_dir, request.run, options)
        return EmittedFiles(kind, tuple(written), f"submit with {Path(out_dir) / 'submit_all.sh'}")
    from scheduler.executor.k8s import K8sOptions, emit_k8s, load_inventory

    inventory = load_inventory(request.inventory) if request.inventory is not None else None
    written = emit_k8s(plan, out_dir, request.run, K8sOptions(image=request.image, namespace=request.namespace),
                       inventory, str(request.inventory) if request.inventory else "<inventory>")
    hint = f"apply with kubectl apply -f {out_dir}"
    if inventory is None:
        hint += " after filling in the GPU-UUID placeholders (or pass --inventory)"
    return EmittedFiles(kind, tuple(written), hint)


def select_node(plan: LaunchPlan, node: str | None) -> LaunchPlan:
    """The groups this node runs for the local back end: ``TYPE:N``, ``all``, or the only node there is."""
    keys = plan.node_keys()
    if node is None and len(keys) > 1:
        raise InputError(f"the allocation uses {len(keys)} nodes: " + ", ".join(f"{t}:{n}" for t, n in keys),
                         field="node", valid="one of them (this node), 'all' to run every group here, "
                                               "or --backend ray / --emit slurm DIR")
    if node is None or node == "all":
        return plan
    gpu_type, _, index = node.partition(":")
    if not index.isdigit() or (gpu_type, int(index)) not in keys:
        raise InputError(f"{node!r}", field="node", valid=", ".join(f"{t}:{n}" for t, n in keys) + ", all")
    return plan.on_node(gpu_type, int(index))


def launch(
    request: LaunchRequest,
    *,
    on_plan: Callable[[LaunchPlan], None] | None = None,
    on_progress: Callable[[list[JobStatus]], None] | None = None,
) -> LaunchOutcome:
    """Emit or run ``request``'s allocation; the one library call behind ``colocate launch``.

    ``on_plan`` sees the final plan once every check has passed, before any file is written or job started;
    ``on_progress`` gets the jobs' statuses while they run.
    """
    plan = load_launch_plan(request)
    if request.emit is not None:
        if on_plan:
            on_plan(plan)
        return LaunchOutcome(plan, emitted=emit_plan(request, plan))
    settings = request.settings
    from profiler.campaign.outdir import check_out_dir

    check_out_dir(settings.log_dir, field="log_dir")  # the default one too, before any job starts
    executor = make_executor(request.backend, address=request.address, num_cpus=request.num_cpus)
    if executor.runs_here:  # a back end elsewhere (Ray) checks its cluster inside run, once connected
        plan = select_node(plan, request.node)
        executor.check(plan, settings)
    if on_plan:
        on_plan(plan)
    return LaunchOutcome(plan, report=executor.run(plan, settings, on_progress=on_progress))
