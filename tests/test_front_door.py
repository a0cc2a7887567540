"""The front door of ``colocate serve`` stays light: ``submit`` and ``jobs --json`` import neither torch nor the
numeric or display stack, Typer's pydantic-free conversion of plain parameters equals its own, and a submit of
several files is one transaction. (Timings are in ``scripts/bench_front_door.py``, not here.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest

from common.errors import InputError

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "numpy", "pandas", "rich", "pydantic", "scipy", "pulp", "ray")
PROBE = """import json, sys
import typer
own = sorted(m for m in sys.modules if "." not in m)  # what Typer imports by itself
from colocate.cli import main
sys.argv = ["colocate", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    code = e.code
else:
    code = 0
bypass = getattr(getattr(typer.core, "build_runtime_param", None), "plain_params", False)
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if "." not in m), "typer": own,
                  "bypass": bypass}))
"""


def _run_cli(*args: str) -> tuple[int, set[str], str]:
    """Exit code, the top-level modules our code imported, and the output of ``colocate ARGS`` in a fresh
    interpreter."""
    import json

    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    last = json.loads(out.stdout.strip().splitlines()[-1])
    # what this project's code imported: Typer's own imports do not count, nor pydantic where Typer converts
    # parameters through it (a Typer release the bypass of colocate/cli_params.py was not checked against)
    ours = set(last["modules"]) - set(last["typer"]) - (set() if last["bypass"] else {"pydantic"})
    return last["code"], ours, out.stdout + out.stderr


def _job(path: Path, name: str, extra: str = "") -> Path:
    path.write_text(f"name: {name}\ncommand: sleep 1 # {{job}} {{batch_size}}\napplication: app\nsteps: 10\n"
                    f"batch_size: 4\n{extra}")
    return path


def test_submit_and_jobs_json_import_no_heavy_module(tmp_path: Path) -> None:
    state = tmp_path / "state"
    model_job = tmp_path / "m.yaml"
    model_job.write_text("name: m\nmodel: tiny_cnn\nsteps: 10\nbatch_size: 8\n")
    code, modules, out = _run_cli("submit", "--state", str(state), str(_job(tmp_path / "a.yaml", "a")),
                                  str(model_job))
    assert code == 0 and out.split()[:2] == ["a", "m"], out
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))
    code, modules, out = _run_cli("jobs", "--state", str(state), "--json")
    assert code == 0 and '"name": "a"' in out and '"name": "m"' in out, out
    assert not modules & {*HEAVY, "yaml"}, sorted(modules & {*HEAVY, "yaml"})


def test_a_refused_submit_still_says_why_on_one_line(tmp_path: Path) -> None:
    bad = _job(tmp_path / "bad.yaml", "bad", "min_gpus: 0\n")
    code, _, out = _run_cli("submit", "--state", str(tmp_path / "state"), str(bad))
    assert code == 2 and "bad.yaml" in out and "min_gpus" in out


def _plain_params() -> list[tuple[str, Any]]:
    from typer.main import get_command

    from colocate import cli_params
    from colocate.cli import build_app

    group = get_command(build_app())
    found = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        for param in command.params:
            desc = getattr(param, "type_descriptor", None)
            if desc is not None and desc.file_annotation is None and cli_params.plain(desc.annotation,
                                                                                      desc.parameter_info):
                found.append((f"{name} {param.name}", param))
    return found


def _convert(build: Any, param: Any, value: Any) -> tuple[str, Any, Any]:
    """(outcome, the result's type, the result) — or the error's type and message: both must fail alike."""
    import click

    try:
        got = build(param.type_descriptor).coerce(value, param=param, ctx=click.Context(click.Command("x")))
    except Exception as err:
        return "error", type(err).__name__, str(err)
    return "ok", [type(v) for v in got] if isinstance(got, (list, tuple)) else type(got), got


def test_plain_parameters_convert_as_typer_does_without_pydantic(tmp_path: Path) -> None:
    from typer import core

    import colocate.cli  # noqa: F401  (installs the conversion)

    fast = getattr(core, "build_runtime_param", None)
    original = getattr(fast, "original", None)
    if original is None:
        pytest.fail("colocate.cli_params found no conversion layer of the shape it knows in this Typer")
    params = _plain_params()
    annotations = {repr(p.type_descriptor.annotation) for _, p in params}
    assert {"<class 'str'>", "<class 'pathlib.Path'>",
            "<class 'bool'>"} <= annotations and any("list" in a for a in annotations), annotations
    existing = tmp_path / "f.txt"
    existing.write_text("x")
    texts = ["x", "", "a/b/../c", "~/z", str(existing), str(tmp_path), str(tmp_path / "missing")]
    for label, param in params:
        annotation = param.type_descriptor.annotation
        if annotation is bool:
            values: list[Any] = [True, False, "true"]
        elif get_origin(annotation) is list:
            values = [tuple(texts), ()]
        else:
            values = [*texts, None]
        for value in values:
            assert _convert(fast, param, value) == _convert(original, param, value), (label, value)
            if get_origin(annotation) is list and value:
                assert isinstance(_convert(fast, param, value)[2][0], get_args(annotation)[0])


def test_several_files_are_one_transaction_and_a_used_name_queues_none(tmp_path: Path) -> None:
    from scheduler.service.front.client import submit_jobs
    from scheduler.service.state.store import StateStore

    state = tmp_path / "state"
    files = [_job(tmp_path / f"j{i}.yaml", f"j{i}") for i in range(3)]
    assert submit_jobs(files[:1], state) == ["j0"]
    with pytest.raises(InputError, match="j0.yaml.*already submitted"):
        submit_jobs([files[1], files[0], files[2]], state)  # j1 valid, j0 taken: neither j1 nor j2 queued
    twin = _job(tmp_path / "twin.yaml", "j1")
    with pytest.raises(InputError, match="twin.yaml.*already submitted"):
        submit_jobs([files[1], twin], state)  # the same name twice in one call
    store = StateStore(state, create=False, readonly=True)
    assert [r.name for r in store.jobs()] == ["j0"]
    assert submit_jobs(files[1:], state) == ["j1", "j2"]
    assert [(r.name, r.state) for r in store.jobs()] == [("j0", "queued"), ("j1", "queued"), ("j2", "queued")]
    assert [e["job"] for e in store.events() if e["kind"] == "submitted"] == ["j0", "j1", "j2"]


def test_the_learned_view_reads_the_same_ratios_as_the_goodput_model() -> None:
    from scheduler.learning.measured import SoloTimes, learned_ratios
    from scheduler.learning.online import LearnedGoodputModel

    def row(app: str, n: int, batch: int, partner: str, t: float, count: int = 1) -> dict[str, Any]:
        return {"application": app, "gpu_type": "t4", "num_gpus": n, "batch_size": batch, "partner_type": partner,
                "iter_time_s": t, "count": count}

    rows = [row("tiny_cnn", 1, 8, "", 0.01, 3), row("resnet18", 1, 4, "", 0.04), row("tiny_cnn", 1, 8, "resnet18@4", 0.02),
            row("resnet18", 1, 4, "tiny_cnn@8", 0.05, 2), row("tiny_cnn", 2, 8, "resnet18@4", 0.012),
            row("resnet18", 2, 4, "tiny_cnn@8", 0.001), row("vgg11", 1, 8, "a+b", 0.3)]
    light = learned_ratios(rows, SoloTimes(rows))
    assert light == learned_ratios(rows, LearnedGoodputModel(rows, {}))
    assert sorted(r["solo_source"] for r in light) == ["measured", "pending"]
