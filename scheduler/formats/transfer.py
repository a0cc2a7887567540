"""Co-location ratios for Sia's applications and GPU types, transferred from Gavel's measured pairs.

Nobody has measured Sia's six applications co-located on Sia's GPU types (T4 ``aws``, A100 ``dgx-ext``,
RTX 2080Ti ``rtx``). Gavel (OSDI'20, MIT licence) measured 26 job types alone and in every pair on K80,
P100 and V100 (``simulation_throughputs.json``). This module transfers those measurements by two documented
mappings and says, row by row, where each value came from.

**Application mapping** (:data:`SIA_TO_GAVEL`; Gavel model, batch sizes matching the app's per-GPU batch):

=============  ==================  ==================  ==================================================
Sia app        Gavel model         Gavel batch sizes   why
=============  ==================  ==================  ==================================================
cifar10        ResNet-18           64, 128, 256        the same network (Sia trains ResNet-18 on CIFAR-10)
imagenet       ResNet-50           32, 64, 128         the same network (ResNet-50 on ImageNet)
bert           Transformer         16, 32              both attention models; bert's local batch is 4-48
ncf            Recommendation      512 ... 8192        both embedding-heavy recommenders (NCF)
deepspeech2    LM                  10, 20, 40, 80      both recurrent sequence models (LSTM LM vs. RNN ASR)
yolov3         ResNet-50           16, 32              YOLOv3's Darknet-53 is a deep residual CNN on large
                                                       images at a small batch (4-32 per GPU); ResNet-50 at
                                                       a small batch is Gavel's closest job (CycleGAN is a
                                                       generator/discriminator pair, A3C an RL agent)
=============  ==================  ==================  ==================================================

For a pair of apps, every feasible combination of their Gavel batch sizes is a measured pair; the
transferred value is the *medoid* pair (the one whose Σ ratio is the median), so it is one real
measurement, not an average. If most combinations are infeasible (Gavel's ``[0, 0]``: out of memory) the
pair is infeasible (0, 0). Ratios are clipped to ≤ 1 (co-location never speeds a job up; Gavel has a few
1.00x values from measurement noise).

**GPU mapping** (:data:`SIA_GPU_TO_GAVEL`, by FP32 throughput): T4 (8.1 TFLOPS, 16 GB) ← P100 (9.3, 16 GB);
RTX 2080Ti (13.4, 11 GB) ← V100 (15.7, 16 GB); A100 (19.5, 40 GB) ← V100. Caveat: the 2080Ti has less
memory than the V100, so some transferred pairs may not fit there; the A100 has more, so some pairs Gavel
found infeasible would fit.

Where our own colocation table has a row for the same GPU type (by name) and a mapped model
(:data:`SIA_TO_OWN_MODEL`: cifar10 ↔ resnet18, imagenet ↔ resnet50), that measurement replaces the
transferred value (``source`` = ``measured:...``).

Regenerate the bundled table with ``python -m scheduler.formats.transfer scheduler/examples/colocation-sia-transferred.csv``.
"""

from __future__ import annotations

import itertools
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import InputError
from profiler.campaign.spec import parse_job_type
from scheduler.formats.colocation_table import load_colocation_tables
from scheduler.formats.gavel_format import parse_gavel_key, read_gavel_json
from scheduler.model.jobs import APPLICATION_MODELS

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from scheduler.model.colocation import ColocationTable

SIA_TO_GAVEL: Mapping[str, tuple[str, tuple[int, ...]]] = {
    "cifar10": ("ResNet-18", (64, 128, 256)),
    "imagenet": ("ResNet-50", (32, 64, 128)),
    "bert": ("Transformer", (16, 32)),
    "ncf": ("Recommendation", (512, 1024, 2048, 4096, 8192)),
    "deepspeech2": ("LM", (10, 20, 40, 80)),
    "yolov3": ("ResNet-50", (16, 32)),
}
# For reading Gavel traces: Gavel model -> Sia application (A3C and CycleGAN have no Sia counterpart; they
# are mapped to the application of similar size and shape: a small job and an image CNN).
GAVEL_TO_SIA: Mapping[str, str] = {
    "ResNet-18": "cifar10", "ResNet-50": "imagenet", "Transformer": "bert", "Recommendation": "ncf",
    "LM": "deepspeech2", "A3C": "cifar10", "CycleGAN": "yolov3",
}
SIA_GPU_TO_GAVEL: Mapping[str, str] = {"aws": "p100", "rtx": "v100", "dgx-ext": "v100", "dgx": "v100",
                                       "azure": "v100", "quad": "v100"}
SIA_TO_OWN_MODEL: Mapping[str, str] = {app: model for app, (model, _) in APPLICATION_MODELS.items()}
DEFAULT_TABLE = Path(__file__).resolve().parents[1] / "examples" / "colocation-sia-transferred.csv"

def _gavel_name(model: str, batch: int) -> str:
    return f"{model} (batch size {batch})"


def read_gavel_isolated(path: str | Path) -> dict[tuple[str, str, int], float]:
    """``(worker type, job type, scale factor)`` → isolated steps/s from Gavel's throughput file."""
    data = read_gavel_json(path)
    out: dict[tuple[str, str, int], float] = {}
    for gpu, jobs in data.items():
        for key, entry in jobs.items():
            name, sf = parse_gavel_key(key, path, gpu)
            value = entry.get("null") if isinstance(entry, dict) else None
            if isinstance(value, (int, float)) and value > 0:
                out[(gpu, name, sf)] = float(value)
    return out


def read_gavel_pairs(path: str | Path, scale_factor: int = 1) -> dict[tuple[str, str, str], tuple[float, float]]:
    """``(worker type, job a, job b)`` → ``(ratio_a, ratio_b)`` (co-located / isolated steps/s; 0 = infeasible)."""
    data = read_gavel_json(path)
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    for gpu, jobs in data.items():
        if gpu.endswith("_unconsolidated"):
            continue
        iso: dict[str, float] = {}
        for key, entry in jobs.items():
            name, sf = parse_gavel_key(key, path, gpu)
            if sf == scale_factor and isinstance(entry, dict) and isinstance(entry.get("null"), (int, float)):
                iso[name] = float(entry["null"])
        for key, entry in jobs.items():
            name, sf = parse_gavel_key(key, path, gpu)
            if sf != scale_factor or not isinstance(entry, dict):
                continue
            for other_key, value in entry.items():
                if other_key == "null":
                    continue
                other, other_sf = parse_gavel_key(other_key, path, gpu)
                if other_sf != scale_factor or not isinstance(value, (list, tuple)) or len(value) != 2:
                    continue
                a, b = float(value[0]), float(value[1])
                if a <= 0 or b <= 0 or iso.get(name, 0) <= 0 or iso.get(other, 0) <= 0:
                    out[(gpu, name, other)] = (0.0, 0.0)
                else:
                    out[(gpu, name, other)] = (a / iso[name], b / iso[other])
    return out


def _transfer_pair(pairs: Mapping[tuple[str, str, str], tuple[float, float]], gpu: str, app_a: str, app_b: str
                   ) -> tuple[float, float, str] | None:
    """The medoid measured pair for two Sia apps on a Gavel GPU, or None without data."""
    model_a, batches_a = SIA_TO_GAVEL[app_a]
    model_b, batches_b = SIA_TO_GAVEL[app_b]
    combos = []
    for ba, bb in itertools.product(batches_a, batches_b):
        na, nb = _gavel_name(model_a, ba), _gavel_name(model_b, bb)
        hit = pairs.get((gpu, na, nb))
        if hit is not None:
            combos.append((hit, f"{model_a}@{ba}+{model_b}@{bb}"))
    if not combos:
        return None
    feasible = [(r, label) for r, label in combos if r[0] > 0 and r[1] > 0]
    if len(feasible) * 2 < len(combos):
        return 0.0, 0.0, f"gavel:{gpu} {model_a}+{model_b}: {len(combos) - len(feasible)}/{len(combos)} OOM"
    feasible.sort(key=lambda item: (item[0][0] + item[0][1], item[1]))
    target = statistics.median_low([r[0] + r[1] for r, _ in feasible])
    (ra, rb), label = next(item for item in feasible if item[0][0] + item[0][1] == target)
    return min(ra, 1.0), min(rb, 1.0), f"gavel:{gpu} {label} (medoid of {len(feasible)})"


def transferred_frame(gavel_json: str | Path, gpu_types: Sequence[str] = ("aws", "dgx-ext", "rtx"),
                      applications: Sequence[str] | None = None,
                      gpu_map: Mapping[str, str] = SIA_GPU_TO_GAVEL,
                      own: "pd.DataFrame | None" = None) -> "pd.DataFrame":
    """Colocation rows ``gpu_type,type_a,type_b,ratio_a,ratio_b,source,transferred`` for Sia's apps.

    ``own`` is one of our colocation tables (validated frame); rows for a GPU type named like a Sia type
    and for mapped models replace the transferred values.
    """
    import pandas as pd

    apps = sorted(applications or SIA_TO_GAVEL)
    unknown = [a for a in apps if a not in SIA_TO_GAVEL]
    if unknown:
        raise InputError(f"no Gavel counterpart for {unknown[0]!r}", source="transfer", field="applications",
                         valid=", ".join(sorted(SIA_TO_GAVEL)))
    pairs = read_gavel_pairs(gavel_json)
    own_rows = _own_lookup(own) if own is not None else {}
    rows = []
    for gpu_type in gpu_types:
        gavel_gpu = gpu_map.get(gpu_type)
        if gavel_gpu is None:
            raise InputError(f"no Gavel GPU mapped to {gpu_type!r}", source="transfer", field="gpu_types",
                             valid=", ".join(sorted(gpu_map)))
        for a, b in itertools.combinations_with_replacement(apps, 2):
            measured = own_rows.get((gpu_type, a, b))
            if measured is not None:
                rows.append((gpu_type, a, b, measured[0], measured[1], measured[2], False))
                continue
            hit = _transfer_pair(pairs, gavel_gpu, a, b)
            if hit is None:
                continue
            rows.append((gpu_type, a, b, round(hit[0], 4), round(hit[1], 4), hit[2], True))
    return pd.DataFrame(rows, columns=["gpu_type", "type_a", "type_b", "ratio_a", "ratio_b", "source", "transferred"])


def _own_lookup(frame: "pd.DataFrame") -> dict[tuple[str, str, str], tuple[float, float, str]]:
    """Our measured rows keyed by (gpu_type, sia app a, sia app b), both orders."""
    model_to_app = {m: a for a, m in SIA_TO_OWN_MODEL.items()}
    out: dict[tuple[str, str, str], tuple[float, float, str]] = {}
    for r in frame.itertuples(index=False):
        app_a = model_to_app.get(parse_job_type(str(r.type_a), strict=False)[0])
        app_b = model_to_app.get(parse_job_type(str(r.type_b), strict=False)[0])
        if app_a is None or app_b is None:
            continue
        label = f"measured:{r.gpu_type} {r.type_a}+{r.type_b}"
        out.setdefault((r.gpu_type, app_a, app_b), (float(r.ratio_a), float(r.ratio_b), label))
        out.setdefault((r.gpu_type, app_b, app_a), (float(r.ratio_b), float(r.ratio_a), label))
    return out


def default_table_files() -> list[Path]:
    """The files of the simulator's default table: the transferred tables of Sia's GPU types and of the bundled
    types, and the pairs this project measured on a GPU under :data:`~scheduler.formats.bundled_files.SIMULATOR_SHARING`."""
    from scheduler.formats.bundled_files import (
        COLOCATION_FILE,
        MEASURED_GPU_TYPES,
        SIMULATOR_SHARING,
        measured_table_file,
    )

    measured = [measured_table_file(gpu, SIMULATOR_SHARING) for gpu in MEASURED_GPU_TYPES]
    return [DEFAULT_TABLE, COLOCATION_FILE, *(f for f in measured if f.is_file())]


def default_table() -> "ColocationTable":
    """The union of :func:`default_table_files`: Sia's GPU types
    (``scheduler/examples/colocation-sia-transferred.csv``), the bundled types ``t4``/``v100``
    (``scheduler/data/colocation-default.csv``) and ``h100`` (``scheduler/data/colocation-h100-mps.csv``)."""
    return load_colocation_tables(default_table_files())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m scheduler.formats.transfer OUT.csv [GAVEL_JSON]``: write the transferred table."""
    from scheduler.formats.colocation_table import write_colocation_table
    from scheduler.formats.shared_data import gavel_throughputs_path

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(__doc__.split("\n\n")[0])
        print("usage: python -m scheduler.formats.transfer OUT.csv [simulation_throughputs.json]")
        return 2
    gavel = Path(args[1]) if len(args) > 1 else gavel_throughputs_path()
    frame = transferred_frame(gavel)
    write_colocation_table(frame, args[0])
    print(f"wrote {len(frame)} rows to {args[0]}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
