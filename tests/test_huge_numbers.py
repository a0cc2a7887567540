"""Numbers from outside of any size: every one is range-checked before it is converted or formatted.

A number beyond a float (10⁴⁰⁰), one beyond Python's integer-to-text limit (5,000 digits), a tiny one that
rounds to zero, a negative zero and the non-finite ones reach the checkers, the JSON and YAML readers and the
records a job writes; each ends as a value in range or one refusal that names the field — never an
``OverflowError``, a ``ValueError`` or a ``KeyError`` (each of which once stopped every live round)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.bounds import check_number, shown_number
from common.errors import InputError
from common.names import shown
from common.safe_load import parse_json, parse_yaml
from scheduler.executor.job_files import BadRecord, check_oom, check_progress, read_record

PROPERTY = settings(max_examples=200, derandomize=True, database=None, deadline=None)

# integers from ordinary to far beyond a float and beyond str()'s 4,300 digits, either sign
HUGE_INTS = st.builds(lambda digits, sign: sign * 10 ** digits + sign, st.integers(0, 6000), st.sampled_from([1, -1]))
ODD_FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([-0.0, 5e-324, 1e-320, 1e308]))
NUMBERS = st.one_of(HUGE_INTS, ODD_FLOATS)
# how such a number is written in a file: plain digits, an exponent that overflows or underflows, a negative zero
NUMBER_TEXTS = st.one_of(
    HUGE_INTS.map(lambda v: str(v) if abs(v) < 10 ** 4000 else ("-" if v < 0 else "") + "1" + "0" * 5000),
    st.sampled_from(["1e400", "-1e400", "1e-400", "-0", "-0.0", "0.0", "1.5", "7", "1" + "0" * 400 + ".5"]),
)


@PROPERTY
@given(value=NUMBERS, integer=st.booleans())
def test_check_number_refuses_in_one_line_or_returns_a_value_in_range(value: float, integer: bool) -> None:
    try:
        out = check_number(value, field="steps", low=0, high=1e9, integer=integer)
    except InputError as err:
        text = str(err)
        assert "\n" not in text and "steps" in text and len(text) < 300, text
        return
    assert 0 <= out <= 1e9 and math.isfinite(out)
    assert not integer or isinstance(out, int)


@PROPERTY
@given(value=NUMBERS)
def test_shown_numbers_never_raise_and_stay_short(value: float) -> None:
    for text in (shown_number(value), shown(value)):
        assert 0 < len(text) <= 60, text


@PROPERTY
@given(text=NUMBER_TEXTS)
def test_json_numbers_read_as_numbers_a_range_check_can_refuse_by_name(text: str) -> None:
    """Beyond a float or beyond 100 digits, a JSON number reads as ±inf (never a ValueError from 4,300 digits):
    the field's range check then refuses it by name."""
    data = parse_json(f'{{"step": {text}}}', source="progress.json")
    value = data["step"]
    assert isinstance(value, (int, float)) and (not isinstance(value, int) or abs(value) < 10 ** 101)
    try:
        check_number(value, field="step", low=0, high=1e12)
    except InputError as err:
        assert "field 'step'" in str(err) and "\n" not in str(err)


@PROPERTY
@given(text=NUMBER_TEXTS)
def test_yaml_numbers_read_as_numbers_or_one_refusal(text: str) -> None:
    try:
        data = parse_yaml(f"steps: {text}\n", source="job.yaml")
    except InputError as err:
        assert "job.yaml" in str(err) and "\n" not in str(err)
        return
    assert isinstance(data["steps"], (int, float))
    with pytest.raises(InputError, match="steps"):  # whatever was read, the range check refuses or passes it
        check_number(data["steps"], field="steps", low=1, high=0.5)


@pytest.mark.parametrize("text", ['steps: !!int "1e400"', 'steps: !!int "12abc"', "steps: !!int 0b_",
                                  "steps: 0x_", "steps: 0b_", 'steps: !!bool "maybe"', 'steps: !!float "abc"',
                                  "steps: 1" + "0" * 5000])
def test_yaml_the_reader_cannot_build_is_one_refusal(text: str) -> None:
    with pytest.raises(InputError, match=r"job\.yaml.*line 1") as err:
        parse_yaml(text + "\n", source="job.yaml")
    assert "\n" not in str(err.value)


def test_yaml_numbers_that_are_numbers_still_read() -> None:
    data = parse_yaml("a: 0x1f\nb: 0o17\nc: -0b101\nd: 1_000\ne: !!int '42'\nf: !!bool 'yes'\ng: 1e3\n", source="x")
    assert data == {"a": 31, "b": 15, "c": -5, "d": 1000, "e": 42, "f": True, "g": 1000.0}


@PROPERTY
@given(value=NUMBERS, key=st.sampled_from(["step", "samples", "elapsed_s", "steps", "restored_step"]))
def test_a_progress_record_with_any_number_is_checked_or_refused(value: float, key: str) -> None:
    try:
        out = check_progress({key: value})
    except BadRecord as err:
        assert f"field '{key}'" in str(err) and "\n" not in str(err)
        return
    assert math.isfinite(out[key])


@pytest.mark.parametrize("name, text, field", [
    ("progress.json", '{"step": 1' + "0" * 400 + "}", "field 'step'"),
    ("progress.json", '{"step": 1e400, "state": "running"}', "field 'step'"),
    ("progress.json", '{"samples": 1' + "0" * 5000 + "}", "field 'samples'"),
    ("oom.json", '{"reached_bytes": 1' + "0" * 5000 + "}", "field 'reached_bytes'"),
    ("oom.json", '{"limit_bytes": 1' + "0" * 400 + "}", "field 'limit_bytes'"),
    ("oom.json", '{"limit_bytes": 1e20}', "field 'limit_bytes'"),
])
def test_a_jobs_record_with_a_huge_number_is_a_bad_record(tmp_path: Path, name: str, text: str, field: str) -> None:
    (tmp_path / name).write_text(text)
    check = check_progress if name == "progress.json" else check_oom
    with pytest.raises(BadRecord, match=field) as err:
        read_record(tmp_path, name, check)
    assert str(err.value).startswith(name) and "\n" not in str(err.value)
