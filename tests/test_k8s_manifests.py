"""`colocate launch --emit k8s`: every emitted pod is valid against the Kubernetes API schema (offline, the
strict JSON schema of the newest release the `kubernetes-validate` package carries: no unknown field
anywhere), uses only HAMi's documented annotation and resource names, and keeps its shape whatever a job's
command holds; a bad image or namespace is refused with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from colocate.cli import app
from common.errors import InputError
from tests.test_fuzz_inputs import run_cli

kubernetes_validate = pytest.importorskip("kubernetes_validate")

# HAMi's documented names: "Pod configs: annotations" and the chart's resource names in
# https://github.com/Project-HAMi/HAMi/blob/master/docs/config.md (resourceName nvidia.com/gpu, resourceMem
# nvidia.com/gpumem, resourceMemPercentage nvidia.com/gpumem-percentage, resourceCores, resourcePriority);
# vgpu-mode values there: hami-core, mig, plus mps (HAMi's MpsMode, pkg/device/nvidia).
HAMI_ANNOTATIONS = {"nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid", "nvidia.com/use-gputype",
                    "nvidia.com/nouse-gputype", "hami.io/node-scheduler-policy", "hami.io/gpu-scheduler-policy",
                    "nvidia.com/vgpu-mode"}
HAMI_MODES = {"hami-core", "mig", "mps"}
HAMI_RESOURCES = {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores",
                  "nvidia.com/priority"}
OUR_ANNOTATIONS = {"colocate.io/partner", "colocate.io/partners"}

# one line: a command with a newline or another control character is refused before any manifest is written
# (common/placeholders.py); what is left to try is YAML's own syntax inside the line
HOSTILE = ('echo hi  - name: sidecar    image: evil:1 --- apiVersion: v1 kind: Secret '
           'metadata: {{name: x}} "quoted" \'single\' {{braces}} : colon # hash & amp * star ! bang % pct @ at `tick`')
SHOWN = HOSTILE.replace("{{", "{").replace("}}", "}")  # what the command is once its placeholders are filled
ALLOCATION = {"allocations": [
    {"job": "solo", "gpu_type": "h100", "num_gpus": 2, "batch_size": 64, "partner": None, "node": 0, "gpus": [0, 1],
     "application": "tiny_cnn"},
    {"job": "A.b_C", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": "b", "node": 0, "gpus": [2],
     "application": "tiny_cnn"},
    {"job": "b", "gpu_type": "h100", "num_gpus": 1, "batch_size": 8, "partner": "A.b_C", "node": 0, "gpus": [2],
     "application": "hostile"},
    {"job": "m1", "gpu_type": "a100", "num_gpus": 1, "batch_size": 8, "partners": ["m2", "m3"], "partner": "m2",
     "node": 0, "gpus": [0], "sharing": "mps", "application": "tiny_cnn"},
    {"job": "m2", "gpu_type": "a100", "num_gpus": 1, "batch_size": 8, "partners": ["m1", "m3"], "partner": "m1",
     "node": 0, "gpus": [0], "sharing": "mps", "application": "tiny_cnn"},
    {"job": "m3", "gpu_type": "a100", "num_gpus": 1, "batch_size": 8, "partners": ["m1", "m2"], "partner": "m1",
     "node": 0, "gpus": [0], "sharing": "mps", "application": "tiny_cnn"},
]}


def _emit(tmp_path: Path, *options: str, allocation: dict[str, Any] = ALLOCATION) -> list[dict[str, Any]]:
    path = tmp_path / "alloc.json"
    path.write_text(json.dumps(allocation))
    commands = tmp_path / "commands.yaml"
    commands.write_text(yaml.safe_dump({"hostile": HOSTILE}))
    out = tmp_path / "pods"
    done = CliRunner().invoke(app, ["launch", str(path), "--emit", "k8s", str(out), "--commands", str(commands),
                                    "--steps", "100", *options])
    assert done.exit_code == 0, done.output
    pods = []
    for file in sorted(out.glob("*.yaml")):
        documents = list(yaml.safe_load_all(file.read_text()))
        assert len(documents) == 1, file  # no second document smuggled in
        pods.append(documents[0])
    return pods


def _inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({
        "h100": [{"node": "gpu-node-1", "gpus": [f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(4)]}],
        "a100": [{"node": "gpu-node-2", "gpus": ["GPU-aaaaaaaa-0000-0000-0000-000000000000"]}]}))
    return path


@pytest.mark.parametrize("options", [(), ("--namespace", "ml-team", "--image", "registry.example/colocate:1.0@sha256:"
                                          + "0" * 64, "--inventory", "INVENTORY")])
def test_every_emitted_pod_is_valid_against_the_kubernetes_api_schema(tmp_path: Path, options: tuple[str, ...]) -> None:
    options = tuple(str(_inventory(tmp_path)) if o == "INVENTORY" else o for o in options)
    pods = _emit(tmp_path, *options)
    assert len(pods) == 6
    version = kubernetes_validate.latest_version()
    for pod in pods:
        kubernetes_validate.validate(pod, version, strict=True)  # raises on any unknown or mistyped field
    broken = {**pods[0], "spec": {**pods[0]["spec"], "restartPolicy": "Sometimes", "bogus": 1}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def test_hami_names_are_the_documented_ones(tmp_path: Path) -> None:
    pods = _emit(tmp_path)
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        assert set(annotations) <= HAMI_ANNOTATIONS | OUR_ANNOTATIONS, annotations
        assert annotations.get("nvidia.com/vgpu-mode", "hami-core") in HAMI_MODES
        assert pod["spec"]["schedulerName"] == "hami-scheduler"
        (container,) = pod["spec"]["containers"]
        assert set(container["resources"]["limits"]) <= HAMI_RESOURCES
    modes = {p["metadata"]["name"]: p["metadata"]["annotations"].get("nvidia.com/vgpu-mode") for p in pods}
    assert [m for n, m in modes.items() if "-m" in n] == ["mps"] * 3 and modes["colocate-b"] == "hami-core"
    shares = [p["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpumem-percentage") for p in pods]
    assert sorted(s for s in shares if s) == [33, 33, 33, 50, 50]


def test_a_hostile_command_or_name_cannot_add_keys_or_containers(tmp_path: Path) -> None:
    pods = _emit(tmp_path)
    hostile = next(p for p in pods if p["metadata"]["labels"]["colocate.io/job"] == "b")
    plain = next(p for p in pods if p["metadata"]["labels"]["colocate.io/job"] == "m1")
    assert set(hostile) == set(plain) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(hostile["spec"]) == set(plain["spec"]) and len(hostile["spec"]["containers"]) == 1
    assert set(hostile["spec"]["containers"][0]) == set(plain["spec"]["containers"][0])
    assert set(hostile["metadata"]) == set(plain["metadata"]) and hostile["kind"] == "Pod"
    assert hostile["spec"]["containers"][0]["command"] == ["/bin/sh", "-c", SHOWN]  # the command, verbatim
    odd = next(p for p in pods if p["metadata"]["annotations"].get("colocate.io/partner") == "b")
    assert odd["metadata"]["name"].startswith("colocate-a-b-c-")  # an upper-case, dotted name made a DNS label
    kubernetes_validate.validate(odd, kubernetes_validate.latest_version(), strict=True)
    for name in ("evil\nkind: Secret", "a: b", "x y", "../x"):
        bad = {"allocations": [{**ALLOCATION["allocations"][0], "job": name}]}
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        code, _, err = run_cli("launch", str(path), "--emit", "k8s", str(tmp_path / "never"))
        assert code == 2 and "is not a job name" in err, err
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize(("option", "value", "field"), [
    ("--image", "", "--image"), ("--image", "colocate:1\nkind: Secret", "--image"), ("--image", "a b", "--image"),
    ("--namespace", "team\nkind: Secret", "--namespace"), ("--namespace", "Team", "--namespace"),
    ("--namespace", "-x", "--namespace")])
def test_a_bad_image_or_namespace_is_refused_with_one_line(tmp_path: Path, option: str, value: str, field: str) -> None:
    path = tmp_path / "alloc.json"
    path.write_text(json.dumps(ALLOCATION))
    code, _, err = run_cli("launch", str(path), "--emit", "k8s", str(tmp_path / "pods"), option, value)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and f"field '{field}'" in lines[0], err
    assert not (tmp_path / "pods").exists()


@pytest.mark.parametrize("node, gpu, expected", [
    ("node\nb", "GPU-0a1b", "is not a Kubernetes node name"),
    ("n" * 300, "GPU-0a1b", "is not a Kubernetes node name"),
    ("-node", "GPU-0a1b", "is not a Kubernetes node name"),
    ("node-0", "GPU-0a1b,GPU-ffff", "is not a GPU UUID"),
    ("node-0", "GPU-0a1b\nx", "is not a GPU UUID"),
    ("node-0", "GPU-" + "a" * 300, "is not a GPU UUID"),
    ("node-0", "my gpu", "is not a GPU UUID"),
])
def test_an_inventory_with_a_name_the_api_server_refuses_is_refused(tmp_path: Path, node: str, gpu: str,
                                                                     expected: str) -> None:
    import yaml

    from common.errors import InputError
    from scheduler.executor.k8s import load_inventory

    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"h100": [{"node": node, "gpus": [gpu]}]}))
    with pytest.raises(InputError, match=expected):
        load_inventory(path)
    path.write_text(yaml.safe_dump({"h100": [{"node": "node-0.example", "gpus": ["GPU-8f3c2d1e-aaaa", "MIG-1/2/3"]}]}))
    assert load_inventory(path)["h100"][0]["node"] == "node-0.example"


def test_a_command_with_a_newline_writes_no_manifest(tmp_path: Path) -> None:
    path = tmp_path / "alloc.json"
    path.write_text(json.dumps(ALLOCATION))
    commands = tmp_path / "commands.yaml"
    commands.write_text(yaml.safe_dump({"hostile": "echo hi\n  - name: sidecar\n    image: evil:1"}))
    out = tmp_path / "pods"
    done = CliRunner().invoke(app, ["launch", str(path), "--emit", "k8s", str(out), "--commands", str(commands),
                                    "--steps", "100"])
    assert isinstance(done.exception, InputError) and "field 'hostile'" in str(done.exception)  # main(): exit 2
    assert not out.exists() or not any(out.iterdir())
