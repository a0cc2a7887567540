"""Inputs of the H100-typed cluster runs (NOTES.md, section 8): Sia's profiles with an ``h100`` type, and a pair table.

    python results/sim/packing-pays/h100/inputs.py PROFILES_DIR TABLE_CSV

* ``PROFILES_DIR`` (not committed: Sia's artifact carries no licence): a copy of Sia's traces directory
  (``$COLOCATE_SHARED_DATA/sia/traces``) in which every application's A100 files (``placements-dgx-ext.csv``,
  ``scalability-dgx-ext.csv``) are also written as ``placements-h100.csv`` and ``scalability-h100.csv``. Nobody has
  profiled Sia's applications on an H100, so the ``h100`` type runs at the A100's step times: a faster GPU is a
  lower load, which the load sweep covers.
* ``TABLE_CSV``: pair ratios for ``h100``: the pairs this project measured on the H100 under MPS where one of Sia's
  applications trains that network (cifar10 + imagenet: ResNet-18 + ResNet-50, the model-level rows of
  ``scheduler/data/colocation-h100-mps.csv``), every other pair transferred from Gavel's V100 by
  :mod:`scheduler.formats.transfer` (its rule for Sia's A100 and RTX 2080Ti).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from scheduler.formats.bundled_files import measured_table_file
from scheduler.formats.colocation_table import read_colocation_table, write_colocation_table
from scheduler.formats.shared_data import gavel_throughputs_path, shared_data_dir
from scheduler.formats.transfer import transferred_frame


def write_profiles(out: Path) -> None:
    shutil.copytree(shared_data_dir() / "sia" / "traces", out, dirs_exist_ok=True)
    for app in sorted(p for p in out.iterdir() if (p / "placements-dgx-ext.csv").is_file()):
        for kind in ("placements", "scalability"):
            shutil.copyfile(app / f"{kind}-dgx-ext.csv", app / f"{kind}-h100.csv")


def write_table(path: Path) -> None:
    measured = read_colocation_table(measured_table_file("h100", "mps"))
    models = measured[~measured["type_a"].str.contains("@") & ~measured["type_b"].str.contains("@")]
    frame = transferred_frame(gavel_throughputs_path(), gpu_types=("h100",), gpu_map={"h100": "v100"}, own=models)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_colocation_table(frame, path)
    own = frame[~frame["transferred"]]
    print(f"wrote {path}: {len(frame)} pairs on h100, measured on the H100: "
          + ", ".join(f"{r.type_a}+{r.type_b} {r.ratio_a:.3f}/{r.ratio_b:.3f}" for r in own.itertuples()))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip())
        return 2
    write_profiles(Path(argv[0]))
    write_table(Path(argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
