"""Sia's Philly 1-3 and Saturn 1-3 written at 1x and 2x load (``Workload.at_load``) into OUT/<trace>-<load>x/."""
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[5]
sys.path.insert(0, str(REPO))
SHARED = Path(os.environ.get("COLOCATE_SHARED_DATA", REPO.parent / "shared" / "data"))

from scheduler.formats.workloads import read_workload  # noqa: E402

out = Path(sys.argv[1])
for load in (1, 2):
    for trace in ("philly", "saturn"):
        for i in (1, 2, 3):
            path = out / f"{trace}-{load}x" / f"workload-{i}.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            read_workload(SHARED / "sia" / "workloads" / trace / f"workload-{i}.csv").at_load(load).write_csv(path)
