"""Preflight: can this machine run a campaign's GPU and MPS paths? (``colocate env --check``)

Every check says what it found and, when it fails, what is missing. The MPS check does what a campaign
does: starts a private daemon pinned to the GPU by UUID, runs a tiny CUDA client under it, proves the
client joined (``get_client_list`` or NVML's MPS process list), stops the client and quits the daemon. It
never changes a GPU setting; stale daemons left by a killed campaign of ours are quit first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common.errors import InputError
from profiler.gpu.devices import resolve_device
from profiler.gpu.mps import (
    MpsUnavailable,
    foreign_mps_processes,
    mps_unavailable_reason,
    reap_stale_daemons,
    start_daemon,
    stop_daemon,
)
from profiler.gpu.nvml import (
    compute_mode,
    compute_mode_problem,
    device_info,
    gpm_supported,
    mps_client_pids,
    nvml_status,
)

# The tiny client: initialise CUDA (this is when it connects to the daemon), run a kernel, say "ready",
# then wait for a line on stdin so the coordinator can check membership while the context is alive.
CLIENT_SCRIPT = (
    "import sys, torch; x = torch.ones(256, 256, device='cuda'); y = (x @ x).sum().item(); "
    "torch.cuda.synchronize(); print('ready', y, flush=True); sys.stdin.readline()"
)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None = information only
    detail: str


def _torch_checks() -> list[Check]:
    import torch

    checks = [Check("torch", None, f"{torch.__version__}, built with CUDA {torch.version.cuda or 'none'}")]
    if not torch.cuda.is_available():
        checks.append(Check("CUDA", False, "no CUDA device: torch.cuda.is_available() is False "
                                           f"(torch built with CUDA {torch.version.cuda or 'none'})"))
        return checks
    # No CUDA context here (is_available/device_count do not create one): under EXCLUSIVE_PROCESS a context
    # of ours would keep the MPS server from starting.
    checks.append(Check("CUDA", True, f"{torch.cuda.device_count()} device(s) visible to torch"))
    return checks


def check_cuda_usable(device: str, *, source: str | Path | None, field: str = "device",
                      valid: str = "device: cpu, a machine with a GPU and a CUDA build of torch, or --dry-run to plan "
                                   "the runs here") -> None:
    """Refuse a CUDA ``device`` that this machine's torch cannot use (a CPU-only build, no GPU): every run of a
    campaign (every job ``colocate serve`` starts here) would fail. Checked before a local campaign runs; planning
    (``--dry-run``) skips it."""
    if not device.startswith("cuda"):
        return
    import torch

    if torch.cuda.is_available():
        return
    why = "a CPU-only build" if torch.version.cuda is None else f"built with CUDA {torch.version.cuda}, no GPU visible"
    raise InputError(f"{device!r}, but this machine's torch {torch.__version__} cannot use CUDA ({why})",
                     source=source, field=field, valid=valid)


def _gpu_checks(device: str) -> tuple[list[Check], Any]:
    target = resolve_device(device)
    nvml_ok, nvml_why = nvml_status()
    checks = [Check("NVML", nvml_ok, nvml_why)]
    if target.nvml_index is None:
        why = "device is not a GPU" if not device.startswith("cuda") else (
            f"CUDA_VISIBLE_DEVICES entry '{target.physical_gpu}' matches no NVML GPU")
        checks.append(Check("GPU", False, why))
        return checks, target
    info = device_info(target.nvml_index)
    if not info:
        checks.append(Check("GPU", False, f"NVML knows no GPU at index {target.nvml_index} ({nvml_why})"))
        return checks, target
    checks.append(Check("GPU", True, f"{target.name} ({target.gpu_type}), NVML index {target.nvml_index}, "
                                     f"UUID {target.uuid}, driver {info.get('driver')}"))
    free, total = info.get("memory_free_mib"), info.get("memory_total_mib")
    checks.append(Check("memory", None, f"{free:.0f} MiB free of {total:.0f} MiB"))
    mode = compute_mode(target.nvml_index)
    problem = compute_mode_problem(mode) if mode is not None else "NVML did not report the compute mode"
    checks.append(Check("compute mode", problem is None, f"{mode}" + ("" if problem is None else
                                                                    f" — {problem}; campaigns need DEFAULT")))
    gpm_ok, gpm_why = gpm_supported(target.nvml_index)
    checks.append(Check("GPM", None, f"{'yes' if gpm_ok else 'no'} ({gpm_why})"))
    return checks, target


def _mps_check(target: Any, timeout_s: float) -> Check:
    reason = mps_unavailable_reason(target.spec_device)
    if reason:
        return Check("MPS", False, reason)
    try:
        daemon = start_daemon(target.pin, nvml_index=target.nvml_index)
    except MpsUnavailable as exc:
        return Check("MPS", False, str(exc))
    client = None
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_") and k != "CUDA_VISIBLE_DEVICES"}
        env.update(daemon.client_env())
        client = subprocess.Popen([sys.executable, "-c", CLIENT_SCRIPT], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = _read_line(client, timeout_s)
        if not line.startswith("ready"):
            return Check("MPS", False, f"the test client failed under the daemon: {line.strip()[-300:]}")
        missing = daemon.missing_clients([client.pid], mps_client_pids)
        if missing:
            return Check("MPS", False, f"the test client (pid {client.pid}) ran but is not an MPS client: it "
                                       "could not reach our daemon and ran as plain CUDA")
        return Check("MPS", True, f"private daemon on {target.pin} answered; test client pid {client.pid} joined")
    finally:
        if client is not None:
            _finish(client)
        if not stop_daemon(daemon):
            print(f"warning: our MPS daemon in {daemon.root} did not quit", file=sys.stderr)


def _read_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    import selectors

    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    lines = []
    while time.monotonic() < deadline:
        if selector.select(timeout=0.5):
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("ready"):
                return line
    return "".join(lines) or f"no answer within {timeout_s:.0f} s"


def _finish(process: subprocess.Popen[str]) -> None:
    try:
        if process.stdin is not None:
            process.stdin.write("\n")
            process.stdin.flush()
        process.wait(timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
        process.wait(timeout=10)


def run_preflight(device: str = "cuda", *, client_timeout_s: float = 120.0) -> dict[str, Any]:
    """All checks for ``device``; ``ok`` is True when every pass/fail check passed."""
    checks = _torch_checks()
    gpu_checks, target = _gpu_checks(device)
    checks.extend(gpu_checks)
    stale = reap_stale_daemons() if target.nvml_index is not None else []
    foreign = foreign_mps_processes()
    checks.append(Check("foreign MPS", None, "none visible" if not foreign else "; ".join(
        f"{p['command']} pid {p['pid']} (pipe {p['pipe_dir']})" for p in foreign)
        + (f"; quit {len(stale)} stale daemon(s) of ours" if stale else "")))
    checks.append(_mps_check(target, client_timeout_s))
    verdicts = [c.ok for c in checks if c.ok is not None]
    return {"device": device, "ok": all(verdicts), "checks": [asdict(c) for c in checks]}
