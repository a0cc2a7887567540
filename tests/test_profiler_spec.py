"""Campaign files: validation with one-line errors, and the cell plan."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.errors import InputError
from profiler.campaign.cells import expand_cells, plan_runs
from profiler.campaign.spec import load_spec, spec_from_dict

BASE = {"name": "t", "models": ["tiny_cnn", "resnet18"], "batch_sizes": [4]}


def one_line_error(data: object) -> str:
    with pytest.raises(InputError) as info:
        spec_from_dict(data, source="spec.yaml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("spec.yaml:")
    return message


@pytest.mark.parametrize(
    ("patch", "fragments"),
    [
        ({"sharng": ["mps"]}, ["'sharng'", "valid:", "sharing"]),
        ({"sharing": ["mpss"]}, ["sharing[0]", "'mpss'", "timeslice, mps"]),
        ({"models": ["resnet181"]}, ["models[0]", "resnet18"]),
        ({"batch_sizes": [0]}, ["batch_sizes[0]", "[1, 10000000]"]),
        ({"batch_sizes": "64"}, ["batch_sizes", "integers in [1, 10000000]"]),
        ({"device": "gpu"}, ["device", "cpu, cuda or cuda:N"]),
        ({"group_sizes": [4]}, ["group_sizes", "1, 2, 3"]),
        ({"repeats": 0}, ["repeats", "[1, 1000]"]),
        ({"mps_thread_percentages": [150], "sharing": ["mps"]}, ["mps_thread_percentages[0]", "1..100"]),
        ({"mps_thread_percentages": [50]}, ["mps_thread_percentages", "'mps' is not in 'sharing'"]),
        ({"combinations": [["resnet18@x"]]}, ["combinations[0][0]"]),
        ({"min_window_seconds": -1}, ["min_window_seconds", "(0, 86400]"]),
        ({"repetition": "yes"}, ["repetition", "true or false"]),
    ],
)
def test_malformed_specs_name_the_key_and_valid_values(patch: dict, fragments: list[str]) -> None:
    message = one_line_error({**BASE, **patch})
    for fragment in fragments:
        assert fragment in message


def test_missing_required_key() -> None:
    message = one_line_error({"name": "x", "models": ["tiny_cnn"]})
    assert "batch_sizes" in message and "missing" in message


def test_files_not_yaml_or_missing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_spec(bad)
    with pytest.raises(InputError, match="no such campaign file"):
        load_spec(tmp_path / "absent.yaml")
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(InputError, match="mapping"):
        load_spec(scalar)


_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 500), st.floats(allow_nan=False), st.text(max_size=8),
                    st.lists(st.one_of(st.integers(-3, 300), st.text(max_size=6)), max_size=3))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.dictionaries(st.sampled_from(
    ["name", "models", "batch_sizes", "device", "image_size", "group_sizes", "sharing", "repeats", "seed",
     "warmup_iters", "min_window_iters", "min_window_seconds", "threads_per_job", "combinations", "bogus",
     "mps_thread_percentages", "kernels", "repetition"]), _values, max_size=8))
def test_generated_specs_either_load_or_fail_with_one_line(data: dict) -> None:
    """Whatever a user writes, the outcome is a spec or one InputError line — never another exception."""
    try:
        spec = spec_from_dict({**BASE, **data}, source="gen.yaml")
    except InputError as err:
        assert "\n" not in str(err) and str(err).startswith("gen.yaml:")
    else:
        assert spec.repeats >= 1 and spec.batch_sizes


def test_yaml_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, "sharing": ["timeslice", "mps"], "mps_thread_percentages": [50, 100]}))
    spec = load_spec(path)
    assert spec.sharing == ("timeslice", "mps") and spec.mps_thread_percentages == (50, 100)


def test_cells_and_run_order() -> None:
    spec = spec_from_dict({"name": "t", "models": ["tiny_cnn", "resnet18", "vgg11"], "batch_sizes": [4, 8],
                           "group_sizes": [1, 2, 3], "sharing": ["timeslice", "mps"], "repeats": 2})
    cells = expand_cells(spec)
    ids = [c.cell_id for c in cells]
    assert len(ids) == len(set(ids))
    solos = [c for c in cells if c.kind == "solo"]
    pairs = [c for c in cells if c.kind == "pair"]
    triples = [c for c in cells if c.kind == "triple"]
    assert len(solos) == 6  # 3 models x 2 batch sizes
    assert len(pairs) == 3 * 2 * 2  # C(3,2) x 2 batch sizes x 2 modes
    assert len(triples) == 1 * 2 * 2
    runs = plan_runs(spec)
    assert len(runs) == 2 * len(cells)
    # blocks of (batch size, group size): solos@4, pairs@4, triples@4, solos@8, pairs@8, triples@8
    block_keys = [(r.cell.batch_key, len(r.cell.jobs)) for r in runs]
    assert block_keys == sorted(block_keys)
    assert [k for i, k in enumerate(block_keys) if i == 0 or block_keys[i - 1] != k] == [
        (4, 1), (4, 2), (4, 3), (8, 1), (8, 2), (8, 3)]
    # inside a block the runs of one sharing mode are contiguous (one MPS daemon, warm workers of that mode)
    for key in set(block_keys):
        modes = [r.cell.mode_label for r in runs if (r.cell.batch_key, len(r.cell.jobs)) == key]
        assert sum(1 for i, m in enumerate(modes) if i == 0 or modes[i - 1] != m) == len(set(modes))
    assert plan_runs(spec) == runs  # seeded: the same order every time


def test_explicit_combinations_and_repetition() -> None:
    spec = spec_from_dict({**BASE, "combinations": [["resnet18", "resnet18"], ["tiny_cnn@2", "resnet18@4"]]})
    ids = {c.cell_id for c in expand_cells(spec)}
    assert "pair|timeslice|resnet18@4+resnet18@4" in ids
    assert "pair|timeslice|resnet18@4+tiny_cnn@2" in ids
    assert "solo|none|tiny_cnn@2" in ids  # every group member gets a solo baseline
    rep = spec_from_dict({**BASE, "repetition": True})
    assert "pair|timeslice|tiny_cnn@4+tiny_cnn@4" in {c.cell_id for c in expand_cells(rep)}
