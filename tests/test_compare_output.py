"""compare's words and progress: counts agree with their nouns ("1 workload", "1 file"), and without a terminal
each finished run is one whole line (a progress bar written to a file is cut at a guessed width, mid-word)."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

from colocate.commands import _output
from colocate.commands.compare import _progress_bar
from scheduler.sim.compare import _count


def test_counts_agree_with_their_nouns() -> None:
    assert [_count(1, "file"), _count(2, "file"), _count(1, "policy", "policies"), _count(3, "policy", "policies")] \
        == ["1 file", "2 files", "1 policy", "3 policies"]


def test_without_a_terminal_each_finished_run_is_one_whole_line() -> None:
    workload = "a-workload-with-a-rather-long-name-that-would-not-fit-on-an-eighty-column-line-0123456789"
    err = io.StringIO()
    console = _output.error_console
    saved = console.file
    console.file = err  # what a redirected stderr is: not a terminal
    try:
        with redirect_stderr(err), _progress_bar("2 policies × 1 workload × 1 load (1 worker)", 2, 0) as done:
            done({"workload": workload, "policy": "colocate", "avg_jct_s": 7200.0})
            done({"workload": workload, "policy": "sia", "error": "boom"})
    finally:
        console.file = saved
    lines = err.getvalue().splitlines()
    assert lines == ["2 policies × 1 workload × 1 load (1 worker): 0/2 done",
                     f"1/2 {workload}/colocate: avg JCT 2.00 h", f"2/2 {workload}/sia: FAILED (see the report)"], lines
