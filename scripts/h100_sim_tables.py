"""Sia's transferred colocation table with the A100's (``dgx-ext``) pairs of cifar10 and imagenet replaced by the
pairs measured on the H100 (ResNet-18 and ResNet-50, the networks those applications train), one table per sharing
mode: the inputs of the simulator comparison in results/h100/sim (``colocate compare --colocation``).

The A100 is the nearest of Sia's GPU types to the H100; the other pairs keep their values transferred from Gavel's
V100. The H100 pairs were measured at 224-pixel images, so for cifar10 (32-pixel images) they are a transfer too.

Usage: python scripts/h100_sim_tables.py OUT_DIR [GPU_TYPE]   (GPU_TYPE: the Sia type to replace, dgx-ext)
"""

from __future__ import annotations

import sys
from pathlib import Path

from scheduler.formats.bundled_files import SHARING_MODES, measured_table_file
from scheduler.formats.colocation_table import read_colocation_table, write_colocation_table
from scheduler.formats.shared_data import gavel_throughputs_path
from scheduler.formats.transfer import SIA_GPU_TO_GAVEL, transferred_frame


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__.strip().splitlines()[-1])
        return 2
    out, target = Path(argv[0]), argv[1] if len(argv) > 1 else "dgx-ext"
    if target not in SIA_GPU_TO_GAVEL:
        print(f"h100_sim_tables: GPU_TYPE: {target!r} is not a Sia GPU type; valid: {', '.join(SIA_GPU_TO_GAVEL)}")
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for sharing in SHARING_MODES:
        measured = read_colocation_table(measured_table_file("h100", sharing))
        models = measured[~measured["type_a"].str.contains("@") & ~measured["type_b"].str.contains("@")]
        frame = transferred_frame(gavel_throughputs_path(), own=models.assign(gpu_type=target))
        path = out / f"colocation-sia-{target}-h100-{sharing}.csv"
        write_colocation_table(frame, path)
        replaced = frame[~frame["transferred"]]
        print(f"wrote {path}: {len(frame)} pairs, {len(replaced)} measured on the H100 under {sharing}: "
              + ", ".join(f"{r.type_a}+{r.type_b} {r.ratio_a:.3f}/{r.ratio_b:.3f}" for r in replaced.itertuples()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
