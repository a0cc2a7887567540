"""Profiler benchmarks: NVML sampler overhead and campaign efficiency (measured window / wall time).

Sampler overhead: solo runs of one job type alternate sampler on / off (ABAB…, same process set-up, same
campaign invocation) and compare mean iteration times; on a machine without NVML there is nothing to
sample and the figure is reported as not applicable. Efficiency: the share of a campaign's wall time spent
inside measured windows, from a real campaign (the demo's, unless another spec is given).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from profiler.campaign.cells import Cell, JobType, Run
from profiler.campaign.driver import run_campaign
from profiler.campaign.runner import execute_run
from profiler.campaign.spec import CampaignSpec
from profiler.gpu.devices import resolve_device
from profiler.gpu.sharing import SHARING_SOLO
from profiler.measure.metrics import mean_ci


@dataclass(frozen=True)
class SamplerOverhead:
    applicable: bool
    reason: str
    t_on_s: float = math.nan
    t_off_s: float = math.nan
    overhead_pct: float = math.nan
    ci_pct: float = math.nan  # 95 % CI half-width of the per-pair differences, in % of t_off
    pairs: int = 0


def sampler_overhead(spec: CampaignSpec, job: JobType, pairs: int = 3) -> SamplerOverhead:
    target = resolve_device(spec.device)
    if target.nvml_index is None:
        return SamplerOverhead(False, f"not applicable: device '{spec.device}' has no NVML sampler")
    differences, ons, offs = [], [], []
    for repeat in range(pairs):
        times = {}
        for sample in (True, False):
            run = Run(Cell((job,), SHARING_SOLO), repeat)
            record = execute_run(run, spec, target, {}, sample_nvml=sample)
            if record.status != "ok":
                return SamplerOverhead(False, f"solo run failed: {record.run['error']}")
            times[sample] = float(record.jobs[0]["iter_time_s"])
        ons.append(times[True])
        offs.append(times[False])
        differences.append((times[True] - times[False]) / times[False] * 100)
    ci = mean_ci(differences)
    return SamplerOverhead(True, "", sum(ons) / pairs, sum(offs) / pairs, ci.mean, ci.half_width, pairs)


@dataclass(frozen=True)
class CampaignEfficiency:
    runs: int
    wall_s: float
    window_s: float

    @property
    def efficiency(self) -> float:
        return self.window_s / self.wall_s if self.wall_s > 0 else math.nan


def campaign_efficiency(spec: CampaignSpec, out: Path | None = None) -> CampaignEfficiency:
    """Run ``spec`` into a fresh directory and report window / wall time of that invocation."""
    with tempfile.TemporaryDirectory(prefix="colocate-bench-") as temp:
        store = run_campaign(replace(spec, name=f"{spec.name}-bench"), out or Path(temp))
        session = store.read_meta()["sessions"][-1]
        return CampaignEfficiency(int(session["runs_executed"]), float(session["wall_s"]),
                                  float(session["measured_window_s"]))
