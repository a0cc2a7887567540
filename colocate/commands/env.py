"""``colocate env``: versions, devices and what is usable (MPS, NVML, GPM, ncu) — for bug reports.

``colocate env --check`` is the preflight a GPU user runs before a campaign (:mod:`profiler.gpu.preflight`):
it proves MPS works end to end and exits 1 when a check fails.
"""

from __future__ import annotations

import json
import platform
import shutil
from importlib import metadata
from typing import Any

from colocate import cli_kit
from colocate.cli_config import input_option

PACKAGES = ("colocate", "torch", "numpy", "pandas", "pyarrow", "networkx", "pulp", "highspy", "nvidia-ml-py",
            "nvtx", "click", "rich", "matplotlib", "ray")


def register(app: cli_kit.App) -> None:
    app.command("env")(env)


def collect_env() -> dict[str, Any]:
    """Everything a bug report needs, as a plain dict."""
    import torch

    from profiler.gpu.mps import CONTROL_BINARY
    from profiler.gpu.nvml import device_info, gpm_supported, nvml_status

    versions: dict[str, str | None] = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    cuda = torch.cuda.is_available()
    devices: list[dict[str, Any]] = []
    if cuda:
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append({"index": index, "name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                            "capability": f"{props.major}.{props.minor}", "sms": props.multi_processor_count})
    nvml_ok, nvml_why = nvml_status()
    gpus: list[dict[str, Any]] = []
    if nvml_ok:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        for index in range(count):
            gpm_ok, gpm_why = gpm_supported(index)
            gpus.append({"nvml_index": index, **device_info(index), "gpm": gpm_ok, "gpm_why": gpm_why})
    return {
        "platform": platform.platform(),
        "versions": versions,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "cuda_available": cuda,
        "cuda_devices": devices,
        "nvml": {"usable": nvml_ok, "why": nvml_why, "gpus": gpus},
        "mps_control": shutil.which(CONTROL_BINARY),
        "ncu": shutil.which("ncu"),
        "nsys": shutil.which("nsys"),
        "cpu_threads": torch.get_num_threads(),
    }


def env(
    as_json: bool = input_option("as_json", False),
    check: bool = cli_kit.Option(False, "--check", help="Preflight: prove MPS works (private daemon + a tiny "
                               "CUDA client), report compute mode, foreign MPS daemons, NVML/GPM, memory."),
    device: str = cli_kit.Option("cuda", "--device", help="GPU the preflight checks: cuda or cuda:N."),
) -> None:
    """Print versions, devices and whether MPS, NVML and GPM are usable (--check: run the preflight)."""
    from rich.table import Table

    from colocate.commands._output import console

    if check:
        _preflight(device, as_json)
        return
    info = collect_env()
    if as_json:
        print(json.dumps(info, indent=2))
        return
    table = Table(title="colocate env", show_header=False)
    table.add_column("item", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("platform", info["platform"])
    for name, version in info["versions"].items():
        table.add_row(name, version or "[dim]not installed[/]")
    table.add_row("torch CUDA", str(info["torch_cuda"]))
    table.add_row("CUDA available", str(info["cuda_available"]))
    for cuda_device in info["cuda_devices"]:
        table.add_row(f"cuda:{cuda_device['index']}", f"{cuda_device['name']}, {cuda_device['memory_gib']} GiB, "
                      f"sm_{cuda_device['capability']}, {cuda_device['sms']} SMs")
    table.add_row("NVML", f"{'yes' if info['nvml']['usable'] else 'no'} ({info['nvml']['why']})")
    for gpu in info["nvml"]["gpus"]:
        table.add_row(f"  GPU {gpu['nvml_index']}", f"{gpu.get('name')} driver {gpu.get('driver')}; "
                      f"GPM {'yes' if gpu['gpm'] else 'no'} ({gpu['gpm_why']})")
    table.add_row("MPS", info["mps_control"] or "no (nvidia-cuda-mps-control not on PATH)")
    table.add_row("Nsight Compute", info["ncu"] or "no (ncu not on PATH)")
    table.add_row("CPU threads", str(info["cpu_threads"]))
    console.print(table)


def _preflight(device: str, as_json: bool) -> None:
    from rich.table import Table

    from colocate.commands._output import console
    from common.errors import InputError
    from profiler.campaign.spec import DEVICE_PATTERN
    from profiler.gpu.preflight import run_preflight

    if not DEVICE_PATTERN.match(device):
        raise InputError(f"'{device}' is not a device", field="--device", valid="cuda or cuda:N")
    report = run_preflight(device)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        table = Table(title=f"colocate preflight ({device})", show_header=False)
        table.add_column("check", style="bold")
        table.add_column("", width=4)
        table.add_column("detail", overflow="fold")
        marks = {True: "[green]ok[/]", False: "[red]FAIL[/]", None: "[dim]info[/]"}
        for item in report["checks"]:
            table.add_row(item["name"], marks[item["ok"]], item["detail"])
        console.print(table)
        console.print("[green]ready for GPU campaigns[/]" if report["ok"] else
                      "[red]not ready[/]: see the FAIL rows (they say what is missing)")
    if not report["ok"]:
        raise cli_kit.Exit(1)
