"""The measured tables as ``colocate jobs --json`` and ``colocate learned`` show them: solo iteration times and
the pair ratios learned against them.

Plain Python over the ``measurements`` rows (no numpy): a reader polling ``jobs --json`` pays for none of
the goodput model; :mod:`.online` builds its model and the round's belief on the same functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from scheduler.learning.pairs import DEFAULT_PAIRS, PairConfig

SoloKey = tuple[str, str, int, int]  # (application, GPU type, GPU count, global batch)


def job_type(application: str, batch_size: int) -> str:
    """The colocation-table key of an application at a global batch size."""
    return f"{application}@{batch_size}"


def solo_times(measurements: Sequence[Mapping[str, Any]]) -> dict[SoloKey, tuple[float, int]]:
    """(mean iteration time, samples) of every measured solo configuration."""
    return {(m["application"], m["gpu_type"], int(m["num_gpus"]), int(m["batch_size"])):
            (float(m["iter_time_s"]), int(m["count"])) for m in measurements if not m["partner_type"]}


class SoloLookup(Protocol):
    def measured(self, application: str, gpu_type: str, num_gpus: int, batch_size: int
                 ) -> tuple[float, int] | None: ...


class SoloTimes:
    """The measured solo times alone (what :func:`learned_ratios` needs of a goodput model)."""

    def __init__(self, measurements: Sequence[Mapping[str, Any]]) -> None:
        self.solo = solo_times(measurements)

    def measured(self, application: str, gpu_type: str, num_gpus: int, batch_size: int) -> tuple[float, int] | None:
        """(mean iteration time, samples) of a solo configuration, when measured."""
        return self.solo.get((application, gpu_type, num_gpus, batch_size))


def learned_ratios(measurements: Sequence[Mapping[str, Any]], model: SoloLookup,
                   config: PairConfig = DEFAULT_PAIRS) -> list[dict[str, Any]]:
    """One row per measured pair: ratios ``t/t'`` of both members, their sample counts and solo sources.

    A ratio is learned only against a *measured* solo time of the same configuration (application, GPU
    type, GPU count, batch): a row whose solo is not measured yet is ``pending`` (ratios None, never
    learned from; ratios None) — the model's guess of a solo time is no yardstick. Ratios are bounded to
    [``config.min_ratio``, ``config.max_ratio``].
    """
    coloc = {(m["application"], m["gpu_type"], int(m["num_gpus"]), int(m["batch_size"]), m["partner_type"]): m
             for m in measurements if m["partner_type"] and "+" not in m["partner_type"]}  # pairs (the table's rows)
    rows: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for (app, gpu, n, batch, partner_type), m in coloc.items():
        me = job_type(app, batch)
        partner_app, _, partner_batch = partner_type.rpartition("@")
        other = coloc.get((partner_app, gpu, n, int(partner_batch), me))
        if other is None or (gpu, partner_type, me, n) in rows:
            continue  # the partner's side is not measured yet, or this pair is already done
        ratio_a = _ratio(model, app, gpu, n, batch, float(m["iter_time_s"]), config)
        ratio_b = _ratio(model, partner_app, gpu, n, int(partner_batch), float(other["iter_time_s"]), config)
        known = not (math.isnan(ratio_a) or math.isnan(ratio_b))
        rows[(gpu, me, partner_type, n)] = {
            "gpu_type": gpu, "type_a": me, "type_b": partner_type, "num_gpus": n,
            "ratio_a": ratio_a if known else None, "ratio_b": ratio_b if known else None,  # None: strict JSON
            "n_a": int(m["count"]), "n_b": int(other["count"]),
            "solo_source": "measured" if known else "pending"}
    return list(rows.values())


def _ratio(model: SoloLookup, app: str, gpu: str, n: int, batch: int, coloc_time: float,
           config: PairConfig) -> float:
    hit = model.measured(app, gpu, n, batch)
    if hit is None or not hit[0] > 0 or not coloc_time > 0:
        return math.nan
    return config.bound(hit[0] / coloc_time)
