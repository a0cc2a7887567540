"""Reading `colocate schedule --json` output into GPU groups: grouping, what each job runs, one-line errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from common.errors import InputError
from scheduler.executor.plan import build_plan, load_plan

TWO_PAIRS_AND_A_SOLO: dict[str, Any] = {
    "allocations": [
        {"job": "a", "gpu_type": "h100", "num_gpus": 1, "batch_size": 64, "partner": "b", "node": 0, "gpus": [1]},
        {"job": "b", "gpu_type": "h100", "num_gpus": 1, "batch_size": 32, "partner": "a", "node": 0, "gpus": [1]},
        {"job": "c", "gpu_type": "a100", "num_gpus": 2, "batch_size": 128, "partner": None, "node": 1, "gpus": [2, 3]},
        {"job": "d", "gpu_type": "a100", "num_gpus": 1, "batch_size": 16, "partner": "e", "node": 0, "gpus": [0],
         "sharing": "mps"},
        {"job": "e", "gpu_type": "a100", "num_gpus": 1, "batch_size": 16, "partner": "d", "node": 0, "gpus": [0]},
        {"job": "f", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": None, "node": None, "gpus": []},
    ],
    "unallocated": ["g"], "objective": 1.0, "solver": {"name": "highs", "status": "Optimal", "time_s": 0.1, "gap": 0},
}
APPS = {"a": "resnet18", "b": "tiny_cnn", "c": "imagenet", "d": "tiny_cnn", "e": "bert", "f": "tiny_cnn"}


def test_groups_are_solos_and_pairs_on_the_same_gpus() -> None:
    plan = build_plan(TWO_PAIRS_AND_A_SOLO, applications=APPS, commands={"bert": "python bert.py --bs {batch_size}"})
    assert [(g.label, g.gpu_type, g.nodes, g.gpus, g.sharing) for g in plan.groups] == [
        ("a+b", "h100", (0,), (1,), "timeslice"),
        ("c", "a100", (1,), (2, 3), "none"),
        ("d+e", "a100", (0,), (0,), "mps"),
    ]
    assert plan.not_launched == ("g", "f")  # unallocated, then unplaced (node null)
    jobs = {job.name: job for job in plan.jobs}
    assert (jobs["a"].model, jobs["a"].image_size, jobs["a"].partner) == ("resnet18", 32, "b")
    assert (jobs["c"].model, jobs["c"].image_size, jobs["c"].num_gpus) == ("resnet50", 224, 2)  # alias
    assert jobs["e"].command == "python bert.py --bs 16" and not jobs["e"].builtin
    assert plan.node_keys() == [("h100", 0), ("a100", 1), ("a100", 0)]
    assert [g.label for g in plan.on_node("a100", 0).groups] == ["d+e"]


def test_a_job_name_command_wins_over_its_application_and_placeholders_fill_in() -> None:
    commands = {"e": "run {job} with {partner} on {gpu_type} node {node} gpus {gpus} x{num_gpus} {{literal}}",
                "bert": "unused"}
    plan = build_plan(TWO_PAIRS_AND_A_SOLO, applications=APPS, commands=commands)
    job = next(j for j in plan.jobs if j.name == "e")
    assert job.command == "run e with d on a100 node 0 gpus 0 x1 {literal}"


def test_load_plan_reads_files_and_takes_applications_from_the_jobs_csv(tmp_path: Path) -> None:
    allocation = tmp_path / "alloc.json"
    allocation.write_text(json.dumps(TWO_PAIRS_AND_A_SOLO))
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("name,application\n" + "".join(f"{n},{a}\n" for n, a in APPS.items()) + "g,tiny_cnn\n")
    commands = tmp_path / "commands.yaml"
    commands.write_text("bert: ./train_bert.sh --batch {batch_size}\n")
    plan = load_plan(allocation, jobs_path=jobs, commands_path=commands, sharing="mps")
    assert plan.source == str(allocation)
    assert [g.sharing for g in plan.groups] == ["mps", "none", "mps"]  # --sharing applies where unset


def _broken(mutate) -> dict[str, Any]:
    data = copy.deepcopy(TWO_PAIRS_AND_A_SOLO)
    mutate(data)
    return data


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d.pop("allocations"), "allocations"),
    (lambda d: d["allocations"].append("x"), "allocations[6]"),
    (lambda d: d["allocations"][0].update(job=""), "allocations[0].job"),
    (lambda d: d["allocations"][0].update(num_gpus=0), "allocations[0].num_gpus"),
    (lambda d: d["allocations"][0].update(num_gpus=True), "allocations[0].num_gpus"),
    (lambda d: d["allocations"][2].update(num_gpus=3), "allocations[2].num_gpus"),
    (lambda d: d["allocations"][0].update(gpus=[1, 1]), "allocations[0].gpus"),
    (lambda d: d["allocations"][0].update(node=-1), "allocations[0].node"),
    (lambda d: d["allocations"][0].update(batch_size="big"), "allocations[0].batch_size"),
    (lambda d: d["allocations"][0].update(sharing="mig"), "allocations[0].sharing"),
    (lambda d: d["allocations"][1].update(partner=None), "allocations[0].partner"),  # a names b, b names nobody
    (lambda d: d["allocations"][1].update(gpus=[2]), "allocations[0].gpus"),  # partners on different GPUs
    (lambda d: d["allocations"][2].update(gpu_type="h100", node=0, gpus=[1], num_gpus=1), "allocations[2].gpus"),
    (lambda d: d["allocations"].append(dict(d["allocations"][2])), "allocations[6].job"),
    (lambda d: d["allocations"][4].update(sharing="timeslice"), "allocations[3].sharing"),
    (lambda d: d.update(unallocated="g"), "unallocated"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_malformed_allocations_are_one_line_errors_naming_the_field(mutate, field: str) -> None:
    with pytest.raises(InputError) as info:
        build_plan(_broken(mutate), source="alloc.json", applications=APPS, commands={"bert": "x"})
    message = str(info.value)
    assert info.value.field == field, message
    assert message.startswith("alloc.json:") and "valid:" in message and "\n" not in message


def test_a_job_with_nothing_to_run_names_the_fix() -> None:
    with pytest.raises(InputError) as info:
        build_plan(TWO_PAIRS_AND_A_SOLO, applications=APPS)  # bert: not a model, no command
    assert info.value.field == "allocations[4].application" and "--commands" in str(info.value)
    with pytest.raises(InputError) as info:
        build_plan(TWO_PAIRS_AND_A_SOLO)  # no jobs CSV at all
    assert "--jobs" in str(info.value)


@pytest.mark.parametrize("command", ["run {model}", "run {job", "awk '{print $1}'"])
def test_bad_placeholders_are_rejected(command: str) -> None:
    with pytest.raises(InputError) as info:
        build_plan(TWO_PAIRS_AND_A_SOLO, applications=APPS, commands={"bert": command})
    assert info.value.field == "bert" and "{{" in str(info.value)


def test_unreadable_files_are_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "alloc.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON at line 1"):
        load_plan(bad)
    with pytest.raises(InputError, match="not found"):
        load_plan(tmp_path / "missing.json")
    bad.write_text(json.dumps(TWO_PAIRS_AND_A_SOLO))
    commands = tmp_path / "c.yaml"
    commands.write_text("bert: [1, 2]\n")
    with pytest.raises(InputError) as info:
        load_plan(bad, commands_path=commands)
    assert info.value.field == "bert"
