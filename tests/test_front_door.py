"""The front door of ``colocate serve`` stays light: ``submit`` and ``jobs --json`` import neither torch nor the
numeric or display stack (nor pydantic: the command line is Click's), and a submit of several files is one
transaction. (Timings are in ``scripts/bench_front_door.py``, not here.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from common.errors import InputError

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "numpy", "pandas", "rich", "pydantic", "scipy", "pulp", "ray")
PROBE = """import json, sys
import click
own = sorted(m for m in sys.modules if "." not in m)  # what Click imports by itself
from colocate.cli import main
sys.argv = ["colocate", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    code = e.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if "." not in m), "click": own}))
"""


def _run_cli(*args: str) -> tuple[int, set[str], str]:
    """Exit code, the top-level modules our code imported, and the output of ``colocate ARGS`` in a fresh
    interpreter."""
    import json

    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    last = json.loads(out.stdout.strip().splitlines()[-1])
    ours = set(last["modules"]) - set(last["click"])  # what this project's code imported, Click's own aside
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
