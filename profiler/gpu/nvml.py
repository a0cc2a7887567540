"""NVML sampler thread: memory, utilization, SM clock, clock-event reasons, and GPM metrics on Hopper+.

``nvmlDeviceGetUtilizationRates().gpu`` only says whether *any* kernel ran in the sample period; it is kept
as ``gpu_util_mean`` and never called occupancy. Occupancy and DRAM bandwidth come from GPM
(``NVML_GPM_METRIC_SM_OCCUPANCY`` = 3, ``SM_UTIL`` = 2, ``DRAM_BW_UTIL`` = 10) over ≥ 100 ms intervals,
where the device supports it. The sampler runs in the coordinator, which never creates a CUDA context.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

GPM_SM_UTIL = 2
GPM_SM_OCCUPANCY = 3
GPM_DRAM_BW_UTIL = 10
MIN_GPM_INTERVAL_S = 0.1

# NVML clock-event (throttle) reason bits, named as in nvml.h.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def _pynvml() -> Any:
    import pynvml  # provided by nvidia-ml-py

    return pynvml


def nvml_status() -> tuple[bool, str]:
    """(usable, why) — why explains a 'no' for meta.json and ``colocate env``."""
    try:
        nvml = _pynvml()
    except ImportError:
        return False, "nvidia-ml-py is not installed"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return False, f"NVML unavailable: {exc}"
    try:
        count = nvml.nvmlDeviceGetCount()
    finally:
        nvml.nvmlShutdown()
    if count == 0:
        return False, "NVML found no GPU"
    return True, f"{count} GPU(s)"


def gpm_supported(index: int) -> tuple[bool, str]:
    """Whether NVML GPM metrics work on GPU ``index`` (Hopper and newer), with the reason if not."""
    try:
        nvml = _pynvml()
        nvml.nvmlInit()
    except Exception as exc:
        return False, f"NVML unavailable: {exc}"
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        support = nvml.nvmlGpmQueryDeviceSupport(handle)
        ok = bool(getattr(support, "isSupportedDevice", 0))
        return ok, "supported" if ok else "device does not support GPM (needs Hopper or newer)"
    except Exception as exc:
        return False, f"GPM query failed: {exc}"
    finally:
        nvml.nvmlShutdown()


def gpm_values(metrics: Any, success: int = 0) -> dict[str, float]:
    """Occupancy, SM and DRAM utilization from a filled GPM request; a metric whose own return code is
    not success is NaN — never the 0 its value field holds (NVML sets ``nvmlReturn`` per metric)."""
    values = {}
    for slot, key in enumerate(("occupancy", "sm_util", "dram")):
        metric = metrics[slot]
        values[key] = float(metric.value) if int(metric.nvmlReturn) == success else math.nan
    return values


def _with_nvml(query: Any, default: Any) -> Any:
    """Run ``query(nvml)`` between nvmlInit and nvmlShutdown; ``default`` when NVML is missing or fails."""
    try:
        nvml = _pynvml()
        nvml.nvmlInit()
    except Exception:
        return default
    try:
        return query(nvml)
    except Exception:
        return default
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def gpu_inventory() -> list[dict[str, Any]]:
    """``[{"index", "uuid", "name"}]`` of every GPU NVML sees (empty without NVML)."""
    def query(nvml: Any) -> list[dict[str, Any]]:
        rows = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            rows.append({"index": index, "uuid": _decode(nvml.nvmlDeviceGetUUID(handle)),
                         "name": _decode(nvml.nvmlDeviceGetName(handle))})
        return rows

    return _with_nvml(query, [])


def nvml_index_for(entry: str, inventory: list[dict[str, Any]]) -> int | None:
    """NVML index of a CUDA_VISIBLE_DEVICES entry: an index, a GPU UUID or a unique UUID prefix (as CUDA
    accepts); None for MIG instances and entries no GPU matches."""
    entry = entry.strip()
    if entry.isdigit():
        return int(entry)
    if entry.startswith("MIG-"):
        return None
    wanted = entry if entry.startswith("GPU-") else f"GPU-{entry}"
    matches = [gpu["index"] for gpu in inventory if str(gpu["uuid"]).startswith(wanted)]
    return matches[0] if len(matches) == 1 else None


COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}


def compute_mode(index: int) -> str | None:
    """The GPU's compute mode as NVML names it (DEFAULT, EXCLUSIVE_PROCESS, PROHIBITED), None without NVML."""
    def query(nvml: Any) -> str:
        mode = int(nvml.nvmlDeviceGetComputeMode(nvml.nvmlDeviceGetHandleByIndex(index)))
        return COMPUTE_MODES.get(mode, str(mode))

    return _with_nvml(query, None)


def mps_client_pids(index: int) -> set[int]:
    """Pids NVML lists as MPS compute processes on GPU ``index`` (empty without NVML)."""
    def query(nvml: Any) -> set[int]:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        return {int(p.pid) for p in nvml.nvmlDeviceGetMPSComputeRunningProcesses(handle)}

    return _with_nvml(query, set())


def process_memory_mib(index: int, pid: int) -> float | None:
    """Device memory NVML attributes to ``pid`` on GPU ``index`` (CUDA context included), or None.

    None when NVML is missing, the process is not listed (a pid namespace hides it) or the driver does not
    report per-process memory.
    """
    def query(nvml: Any) -> float | None:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            used = getattr(process, "usedGpuMemory", None)
            if int(process.pid) == pid and used is not None and used < 2**63:
                return float(used) / 2**20
        return None

    return _with_nvml(query, None)


def device_info(index: int) -> dict[str, Any]:
    """Name, memory and driver of GPU ``index`` via NVML (empty dict without NVML)."""
    try:
        nvml = _pynvml()
        nvml.nvmlInit()
    except Exception:
        return {}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        name = nvml.nvmlDeviceGetName(handle)
        return {
            "name": name.decode() if isinstance(name, bytes) else name,
            "memory_total_mib": memory.total / 2**20,
            "memory_free_mib": memory.free / 2**20,
            "driver": _decode(nvml.nvmlSystemGetDriverVersion()),
        }
    except Exception:
        return {}
    finally:
        nvml.nvmlShutdown()


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class NvmlSummary:
    samples: int = 0
    sm_clock_mean_mhz: float = math.nan
    sm_clock_min_mhz: float = math.nan
    clock_event_reasons: str = ""
    memory_used_max_mib: float = math.nan
    gpu_util_mean: float = math.nan
    gpm_sm_occupancy_mean: float = math.nan
    gpm_sm_util_mean: float = math.nan
    gpm_dram_bw_util_mean: float = math.nan

    def as_row(self) -> dict[str, Any]:
        return {
            "nvml_samples": self.samples,
            "sm_clock_mean_mhz": self.sm_clock_mean_mhz,
            "sm_clock_min_mhz": self.sm_clock_min_mhz,
            "clock_event_reasons": self.clock_event_reasons,
            "memory_used_max_mib": self.memory_used_max_mib,
            "gpu_util_mean": self.gpu_util_mean,
            "gpm_sm_occupancy_mean": self.gpm_sm_occupancy_mean,
            "gpm_sm_util_mean": self.gpm_sm_util_mean,
            "gpm_dram_bw_util_mean": self.gpm_dram_bw_util_mean,
        }


@dataclass
class _Series:
    clocks: list[float] = field(default_factory=list)
    reasons: int = 0
    memory: list[float] = field(default_factory=list)
    util: list[float] = field(default_factory=list)
    occupancy: list[float] = field(default_factory=list)
    sm_util: list[float] = field(default_factory=list)
    dram: list[float] = field(default_factory=list)


class NvmlSampler:
    """Samples one GPU on a background thread between ``start()`` and ``stop()`` (a context manager).

    ``mark()``/``window`` let the caller restrict the summary to the measured window.
    """

    def __init__(self, index: int, interval_s: float = 0.1) -> None:
        self.index = index
        self.interval_s = max(interval_s, MIN_GPM_INTERVAL_S)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._timed: list[tuple[float, dict[str, float]]] = []
        self._reasons: list[tuple[float, int]] = []
        self.error: str | None = None

    def __enter__(self) -> NvmlSampler:
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        try:
            nvml = _pynvml()
            nvml.nvmlInit()
        except Exception as exc:
            self.error = f"NVML unavailable: {exc}"
            return
        gpm_buffers: list[Any] = []
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(self.index)
            gpm = False
            with contextlib.suppress(Exception):
                gpm = bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
            previous = None
            if gpm:
                previous = nvml.nvmlGpmSampleAlloc()
                gpm_buffers.append(previous)
                nvml.nvmlGpmSampleGet(handle, previous)
            current = nvml.nvmlGpmSampleAlloc() if gpm else None
            if current is not None:
                gpm_buffers.append(current)
            while not self._stop.wait(self.interval_s):
                now = time.perf_counter()
                values: dict[str, float] = {}
                with contextlib.suppress(Exception):
                    values["clock"] = float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
                with contextlib.suppress(Exception):
                    values["memory"] = nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
                with contextlib.suppress(Exception):
                    values["util"] = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                with contextlib.suppress(Exception):
                    self._reasons.append((now, int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))))
                if gpm and previous is not None and current is not None:
                    with contextlib.suppress(Exception):
                        nvml.nvmlGpmSampleGet(handle, current)
                        values.update(self._gpm_metrics(nvml, previous, current))
                        previous, current = current, previous
                self._timed.append((now, values))
        except Exception as exc:
            self.error = f"NVML sampling failed: {exc}"
        finally:
            for buffer in gpm_buffers:
                with contextlib.suppress(Exception):
                    nvml.nvmlGpmSampleFree(buffer)
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()

    @staticmethod
    def _gpm_metrics(nvml: Any, first: Any, second: Any) -> dict[str, float]:
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 3
        request.sample1 = first
        request.sample2 = second
        for slot, metric_id in enumerate((GPM_SM_OCCUPANCY, GPM_SM_UTIL, GPM_DRAM_BW_UTIL)):
            request.metrics[slot].metricId = metric_id
        nvml.nvmlGpmMetricsGet(request)
        return gpm_values(request.metrics, nvml.NVML_SUCCESS)

    def summary(self, window: tuple[float, float] | None = None) -> NvmlSummary:
        """Summary over samples inside ``window`` (perf_counter times), or all samples."""
        def inside(t: float) -> bool:
            return window is None or window[0] <= t <= window[1]

        series = _Series()
        for t, values in self._timed:
            if not inside(t):
                continue
            for key, target in (("clock", series.clocks), ("memory", series.memory), ("util", series.util),
                                ("occupancy", series.occupancy), ("sm_util", series.sm_util),
                                ("dram", series.dram)):
                if key in values:
                    target.append(values[key])
        for t, bits in self._reasons:
            if inside(t):
                series.reasons |= bits
        names = [name for bit, name in CLOCK_EVENT_REASONS.items() if series.reasons & bit and name != "gpu_idle"]

        def mean(xs: list[float]) -> float:
            return float(sum(xs) / len(xs)) if xs else math.nan

        return NvmlSummary(
            samples=len([t for t, _ in self._timed if inside(t)]),
            sm_clock_mean_mhz=mean(series.clocks),
            sm_clock_min_mhz=min(series.clocks) if series.clocks else math.nan,
            clock_event_reasons="|".join(names),
            memory_used_max_mib=max(series.memory) if series.memory else math.nan,
            gpu_util_mean=mean(series.util),
            gpm_sm_occupancy_mean=mean(series.occupancy),
            gpm_sm_util_mean=mean(series.sm_util),
            gpm_dram_bw_util_mean=mean(series.dram),
        )
