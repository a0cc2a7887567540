"""GPU-rounds each pair of applications spent packed, per GPU type, over the runs of ``colocate compare`` reports.

Reads ``runs/<workload>/<policy>/allocations.parquet`` (one row per job and round; a packed job names its partner)
and prints, per report directory, the total and the most-packed pair types.

Usage: python scripts/packed_pairs.py REPORT_DIR [REPORT_DIR ...] [--policy colocate] [--top 6]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def packed_gpu_rounds(report: Path, policy: str) -> pd.Series:
    """(gpu type, application, partner application) → GPU-rounds packed, summed over the report's workloads."""
    files = sorted(report.glob(f"runs/*/{policy}/allocations.parquet"))
    if not files:
        raise SystemExit(f"packed_pairs: {report}: no runs/*/{policy}/allocations.parquet (a colocate compare report)")
    frames = []
    for f in files:
        a = pd.read_parquet(f, columns=["job", "gpu_type", "num_gpus", "partner"])
        a = a[a["partner"].notna()]
        app, partner = a["job"].str.rsplit("-", n=1).str[0], a["partner"].str.rsplit("-", n=1).str[0]
        keep = app <= partner  # each pair once
        frames.append(pd.DataFrame({"gpu_type": a["gpu_type"][keep], "pair": (app + "+" + partner)[keep],
                                    "gpus": a["num_gpus"][keep]}))
    rows = pd.concat(frames, ignore_index=True)
    return rows.groupby(["gpu_type", "pair"])["gpus"].sum().sort_values(ascending=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--policy", default="colocate")
    parser.add_argument("--top", type=int, default=6)
    args = parser.parse_args()
    for report in args.reports:
        packed = packed_gpu_rounds(report, args.policy)
        top = "; ".join(f"{gpu} {pair} {int(n)}" for (gpu, pair), n in packed.head(args.top).items())
        print(f"{report}: {int(packed.sum())} GPU-rounds packed | {top}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
