"""The `gpu_types` campaign key: validation, one typed cell per type, per-type baselines, routing names.

No Ray needed: this is the planning side of the Ray backend (and what the local backend does with it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import InputError
from profiler.campaign.cells import JobType, plan_runs, runs_for_gpu_type
from profiler.campaign.driver import baselines_from, run_campaign
from profiler.campaign.ray_backend import ray_accelerator_name, routing_resource
from profiler.campaign.spec import spec_from_dict
from profiler.results.store import ResultsStore

BASE = {"name": "typed", "models": ["tiny_cnn", "resnet18"], "batch_sizes": [4], "repeats": 2}


@pytest.mark.parametrize(("value", "field"), [
    (["H100"], "gpu_types[0]"),
    (["h100", "a 100"], "gpu_types[1]"),
    (["h100", "h100"], "gpu_types"),
    ("h100", "gpu_types"),
    ([], "gpu_types"),
])
def test_bad_gpu_types_are_one_line_errors(value: object, field: str) -> None:
    with pytest.raises(InputError) as info:
        spec_from_dict({**BASE, "gpu_types": value}, source="spec.yaml")
    assert info.value.field == field and "e.g. [h100, a100]" in str(info.value) and "\n" not in str(info.value)


def test_every_cell_is_planned_once_per_gpu_type_with_distinct_ids() -> None:
    untyped = plan_runs(spec_from_dict(BASE))
    typed = plan_runs(spec_from_dict({**BASE, "gpu_types": ["h100", "a100"]}))
    assert len(typed) == 2 * len(untyped)
    assert len({run.run_id for run in typed}) == len(typed)
    for gpu_type in ("h100", "a100"):
        mine = [run for run in typed if run.cell.gpu_type == gpu_type]
        assert sorted(r.run_id.removeprefix(f"{gpu_type}:") for r in mine) == sorted(r.run_id for r in untyped)
        assert runs_for_gpu_type(typed, gpu_type) == mine
    kinds = [run.cell.kind for run in typed]
    assert kinds.index("pair") > max(i for i, kind in enumerate(kinds) if kind == "solo")  # solos first
    assert runs_for_gpu_type(untyped, "h100") == untyped  # untyped runs run anywhere


def _solo_rows(store: ResultsStore, gpu_type: str, seconds: float) -> None:
    run_id = f"{gpu_type}:solo|none|tiny_cnn@4#r0"
    store.append_run(
        {"run_id": run_id, "cell_id": run_id.split("#")[0], "sharing": "none", "status": "ok", "kind": "solo"},
        [{"run_id": run_id, "job_index": 0, "job_type": "tiny_cnn@4", "iter_time_s": seconds,
          "peak_memory_mib": 10.0, "status": "ok"}])


def test_baselines_are_taken_per_gpu_type(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    _solo_rows(store, "h100", 0.010)
    _solo_rows(store, "a100", 0.030)
    job = JobType("tiny_cnn", 4)
    assert baselines_from(store, "h100")[job].iter_time_s == pytest.approx(0.010)
    assert baselines_from(store, "a100")[job].iter_time_s == pytest.approx(0.030)
    assert baselines_from(store, "t4") == {}
    assert baselines_from(store)[job].iter_time_s == pytest.approx(0.020)  # untyped: every solo row


def test_the_local_backend_refuses_a_spec_without_its_own_type(tmp_path: Path) -> None:
    spec = spec_from_dict({**BASE, "gpu_types": ["h100", "a100"]})  # this CPU machine is of type 'cpu'
    with pytest.raises(InputError) as info:
        run_campaign(spec, tmp_path)
    assert info.value.field == "gpu_types" and "--backend ray" in str(info.value)
    assert not (tmp_path / "runs.parquet").exists()


def test_ray_routing_names() -> None:
    assert routing_resource("h100") == "accelerator_type:H100"
    assert ray_accelerator_name("a10g") == "A10G" and ray_accelerator_name("l40s") == "L40S"
