"""What `colocate jobs` and the event log say about a job: a job restarted alone is `restarted` (not
`repacked`), a restarted job no longer shows its last out-of-memory text, an error is cut at a word boundary."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from colocate.commands.jobs import _why
from scheduler.service.rounds import Slot, change_kind
from scheduler.service.state.store import StateStore
from tests.serve_helpers import kill_groups
from tests.test_serve_live_rules import _job, _server


def _row(tmp_path: Path, **fields: object):  # -> JobRow
    state = StateStore(tmp_path / "rows")
    state.submit(_job(tmp_path, "a", 10))
    row = state.job("a")
    assert row is not None
    return dataclasses.replace(row, **fields)


def test_a_job_that_starts_alone_after_a_pair_is_restarted_not_repacked(tmp_path: Path) -> None:
    before = _row(tmp_path, started_at=1.0, gpu_type="t4", num_gpus=1, batch_size=16, partner="b")
    alone = Slot("a", "t4", 1, 16, (), (0,), (0,))
    beside_c = Slot("a", "t4", 1, 16, ("c",), (0,), (0,))
    assert change_kind(alone, before) == "restarted"
    assert change_kind(beside_c, before) == "repacked"


def test_an_error_is_cut_at_a_word_boundary() -> None:
    text = "oom: reached 3.10 GiB of its 2.00 GiB limit at step 0 (batch 128); its estimate was raised to 3.60 GiB"
    shown = _why({"error": text})
    assert len(shown) <= 80 and shown.endswith("…") and text.startswith(shown[:-1])
    assert text[len(shown) - 1] == " "  # the cut falls between two words


def test_a_restarted_job_no_longer_shows_its_last_out_of_memory_text(tmp_path: Path) -> None:
    state, server = _server(tmp_path, gpus=1, round_s=0.2)
    try:
        state.submit(_job(tmp_path, "j", 100000))
        with state.transaction() as db:
            db.update_job("j", error="oom: reached 3.1 GiB of its 2.0 GiB limit")
        server.round()
        row = state.job("j")
        assert row is not None and row.state == "running" and row.error == "", row
    finally:
        kill_groups(state.dir)
