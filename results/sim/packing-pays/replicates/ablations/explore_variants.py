"""The exploration level swept on issue 46's grid (NOTES.md, section 8.9): `colocate` with a belief (none,
predicted) under one setting of :class:`scheduler.learning.explore.ExploreConfig`, one JSON row per run appended
to OUT (the rows of ``colocate bench variants --json``, plus ``setting``).

    python explore_variants.py FIELD VALUE OUT WORKLOADS [BELIEFS]     (FIELD base: the defaults)
    e.g. python explore_variants.py level 0.2 level0.2-1x.jsonl "$(ls <dir>/philly-1x/*.csv | paste -sd,)" none,predicted

The workloads are Sia's traces written at one load (``write_workloads.py``). The setting is not an option of
the simulator, so this script sets it on the shared default before the simulator is imported (a frozen
dataclass: ``object.__setattr__``, for this sweep only).
"""
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[5]
sys.path.insert(0, str(REPO))
SHARED = Path(os.environ.get("COLOCATE_SHARED_DATA", REPO.parent / "shared" / "data"))

from scheduler.learning import explore  # noqa: E402

field, value, out, workloads = sys.argv[1:5]
beliefs = sys.argv[5].split(",") if len(sys.argv) > 5 else ["none"]
if field != "base":
    kind = type(getattr(explore.DEFAULT_EXPLORE, field))
    object.__setattr__(explore.DEFAULT_EXPLORE, field, kind(value) if kind is not bool else value == "True")

from scheduler.bench.variants import Variant, run_variants  # noqa: E402
from scheduler.sim.config import SimConfig  # noqa: E402

variants = [Variant(b, sim=replace(SimConfig(), belief=b)) for b in beliefs]
with open(out, "a") as fh:
    for row in run_variants(REPO / "scheduler" / "examples" / "sia-64gpu.yaml", [Path(p) for p in workloads.split(",")],
                            ["colocate"], variants, replicates=3, profiles=SHARED / "sia" / "traces"):
        row["setting"] = f"{field}={value}"
        fh.write(json.dumps(row) + "\n")
        print(row["workload"], row["replicate"], row["variant"], row["setting"], round(row["avg_jct_h"], 4),
              row["restarts"], flush=True)
