"""The cluster file's `slurm:` section and the batch script of a live group (no Slurm needed: the real runs are in
tests/test_serve_slurm.py): GPU types map to GRES types, partitions and constraints; bad values are one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from common.errors import InputError
from scheduler.executor.group_doc import GroupDoc, GroupMember
from scheduler.executor.slurm.live import group_script
from scheduler.executor.slurm.settings import load_slurm_settings, sbatch_options, slurm_settings

TYPES = ("t4", "a100")


def test_defaults_ask_for_a_gres_named_like_the_type() -> None:
    options = sbatch_options("t4", 2, 2, slurm_settings(None, TYPES), job_name="colocate-x-g00001",
                             output=Path("/s/runs/g00001.slurm.out"))
    assert options == ["--job-name=colocate-x-g00001", "--nodes=1", "--ntasks=1", "--gres=gpu:t4:2",
                       "--cpus-per-task=2", "--output=/s/runs/g00001.slurm.out", "--open-mode=append"]


def test_types_map_to_partitions_gres_types_and_constraints() -> None:
    settings = slurm_settings({"partition": "gpu", "time_limit": "1-00:00:00", "cpus_per_job": 3,
                               "options": ["--account=ml", "--exclusive"],
                               "gpu_types": {"t4": {"partition": "t4q"},
                                             "a100": {"gres": None, "constraint": "a100&ib"}}}, TYPES)
    t4 = sbatch_options("t4", 1, 2, settings, job_name="j", output=Path("o"))
    a100 = sbatch_options("a100", 4, 1, settings, job_name="j", output=Path("o"))
    assert "--gres=gpu:t4:1" in t4 and "--partition=t4q" in t4 and "--cpus-per-task=6" in t4
    assert "--gres=gpu:4" in a100 and "--constraint=a100&ib" in a100 and "--partition=gpu" in a100
    assert all(o in t4 and o in a100 for o in ("--time=1-00:00:00", "--account=ml", "--exclusive"))


@pytest.mark.parametrize(("section", "field"), [
    ({"partitoin": "gpu"}, "slurm"),
    ({"partition": "gpu\n#SBATCH --uid=0"}, "slurm.partition"),
    ({"time_limit": "soon"}, "slurm.time_limit"),
    ({"cpus_per_job": 0}, "slurm.cpus_per_job"),
    ({"start_timeout_s": float("nan")}, "slurm.start_timeout_s"),
    ({"options": "--account=ml"}, "slurm.options"),
    ({"options": ["--account=ml; rm -rf /"]}, "slurm.options[0]"),
    ({"options": ["--gres=gpu:8"]}, "slurm.options[0]"),
    # options that change what the batch job is or how many run; abbreviations sbatch expands; spaces sbatch
    # refuses; what the section's own keys set (one place per setting)
    *(({"options": ["--account=ml", option]}, "slurm.options[1]") for option in (
        "--array=1-3", "--arr=1-3", "--wrap=sleep", "--test-only", "--help", "--usage", "--version", "--parsable",
        "--wait", "--hold", "--dependency=afterok:1", "--ntasks=2", "--nodes=2", "--requeue", "--export=NONE",
        "--comment=two words", "--account", "--no-requeue=yes", "--partition=t4", "--time=10", "--constraint=ib")),
    ({"gpu_types": {"v100": {}}}, "slurm.gpu_types"),
    ({"gpu_types": {"t4": {"gres": "t4 x"}}}, "slurm.gpu_types.t4.gres"),
    ({"gpu_types": {"t4": {"qos": "high"}}}, "slurm.gpu_types.t4"),
])
def test_bad_values_are_refused_with_the_field(section: dict, field: str) -> None:
    with pytest.raises(InputError) as caught:
        slurm_settings(section, TYPES, "cluster.yaml")
    assert f"field '{field}'" in str(caught.value) and "\n" not in str(caught.value)


def test_the_section_is_read_from_the_cluster_file(tmp_path: Path) -> None:
    from scheduler.model.cluster import load_cluster

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"gpu_types": {"t4": {"nodes": 1, "gpus_per_node": 2, "memory_gb": 16}},
                                    "slurm": {"gpu_types": {"t4": {"partition": "t4"}}}}))
    assert load_cluster(path).type_names == ("t4",)  # the scheduler's view ignores the section
    assert load_slurm_settings(path).for_type("t4").partition == "t4"


@pytest.mark.parametrize("sharing", ["none", "timeslice", "mps"])
def test_the_batch_script_sets_up_the_sharing_mode_around_the_supervisor(tmp_path: Path, sharing: str) -> None:
    doc = GroupDoc("g00007", sharing, str(tmp_path / "runs" / "g00007.pid"),
                   tuple(GroupMember(n, str(tmp_path / "jobs" / n), ("true",)) for n in "ab"))
    script = group_script(doc, "/opt/py env/bin/python")
    path = tmp_path / "g.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    assert f"'/opt/py env/bin/python' -m scheduler.executor.supervise {tmp_path}/runs/g00007.json &" in script
    daemon = script.find("nvidia-cuda-mps-control -d")
    if sharing == "mps":  # the private daemon starts before the supervisor and quits in the EXIT trap
        assert 0 < daemon < script.find("-m scheduler.executor.supervise") and "echo quit |" in script
    else:
        assert daemon == -1
