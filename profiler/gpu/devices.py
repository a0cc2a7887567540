"""What device a campaign runs on: its name, short type, NVML index and the value of CUDA_VISIBLE_DEVICES.

The coordinator never creates a CUDA context (it would hold memory and, under MPS, become a client), so
everything here comes from NVML, the environment and /proc — not from torch.cuda.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from profiler.gpu.nvml import device_info, gpu_inventory, nvml_index_for

# Families we recognise in NVML/CUDA device names, most specific first.
_GPU_FAMILIES = (
    "gh200", "h200", "h100", "h800", "h20", "b200", "b100", "gb200", "a100", "a800", "a40", "a30", "a10g",
    "a10", "a6000", "l40s", "l40", "l4", "t4", "v100", "p100", "p40", "p4", "k80",
)


def gpu_type_from_name(name: str) -> str:
    """Short GPU type used across the project ('NVIDIA H100 80GB HBM3' → 'h100'); 'cpu' for CPUs."""
    lowered = name.lower()
    if lowered == "cpu" or not lowered:
        return "cpu"
    tokens = re.split(r"[^a-z0-9]+", lowered)
    for family in _GPU_FAMILIES:
        if family in tokens:
            return family
    for token in tokens:  # e.g. "rtx 2080 ti" → "2080"
        if re.fullmatch(r"[a-z]*\d{2,}[a-z]*", token) and token not in {"nvidia", "tesla"}:
            return token
    return re.sub(r"[^a-z0-9]+", "-", lowered).strip("-")


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"


@dataclass(frozen=True)
class DeviceTarget:
    """The device of a campaign as the coordinator and its workers see it."""

    spec_device: str  # as written in the spec: cpu | cuda | cuda:N
    worker_device: str  # what a worker passes to torch: cpu | cuda:0
    physical_gpu: str | None  # CUDA_VISIBLE_DEVICES entry for workers and the MPS daemon
    nvml_index: int | None
    name: str
    gpu_type: str
    memory_total_mib: float | None
    uuid: str | None = None  # NVML UUID: how the MPS daemon is pinned (indices can be renumbered)

    @property
    def pin(self) -> str | None:
        """The most specific CUDA_VISIBLE_DEVICES value for our GPU: its UUID when NVML knows it."""
        return self.uuid or self.physical_gpu

    def worker_env(self) -> dict[str, str]:
        """Environment of a plain (non-MPS) worker: only our GPU visible, so "cuda:0" is the right one.

        MPS clients get no CUDA_VISIBLE_DEVICES: the daemon owns the device and is pinned with :attr:`pin`.
        """
        if self.physical_gpu is None:
            return {}
        return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": self.pin or self.physical_gpu}

    def free_memory_mib(self) -> float | None:
        if self.nvml_index is None:
            return None
        return device_info(self.nvml_index).get("memory_free_mib")


def resolve_device(spec_device: str) -> DeviceTarget:
    """Map the spec's device to a physical GPU (honouring an existing CUDA_VISIBLE_DEVICES)."""
    if not spec_device.startswith("cuda"):
        return DeviceTarget(spec_device, "cpu", None, None, cpu_name(), "cpu", None)
    index = int(spec_device.split(":", 1)[1]) if ":" in spec_device else 0
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    physical = visible[index] if index < len(visible) else str(index)
    inventory = gpu_inventory()
    # A UUID (GPU-…, or a prefix of one, as CUDA accepts) resolves through NVML; MIG instances do not.
    nvml_index = nvml_index_for(physical, inventory)
    info = device_info(nvml_index) if nvml_index is not None else {}
    uuid = next((gpu["uuid"] for gpu in inventory if gpu["index"] == nvml_index), None)
    name = info.get("name", f"CUDA device {physical}")
    return DeviceTarget(spec_device, "cuda:0", physical, nvml_index, name, gpu_type_from_name(name),
                        info.get("memory_total_mib"), uuid)
