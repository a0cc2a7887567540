"""Warm start across rounds: what one round's LP leaves for the next.

In a live or simulated run most jobs keep their allocation from one round to the next, so the previous
round's LP is nearly the next one's: the same jobs, the same columns, slightly different weights. A
:class:`WarmStart` kept by the policy carries three things over, all keyed by job *names* and
configurations (indices change between rounds):

* the **basis** of the last LP solved (which columns and rows were basic, which columns sat at their
  upper bound), mapped onto the new round's LP before its first solve. Columns and rows that are new get
  the slack basis (columns at 0, new job rows basic); the count of basic variables is then repaired to the
  number of rows. The basis is only a starting point of the dual simplex: the LP optimum is unchanged.
* the **groups** in that basis (pairs and triples of job names, basic or at 1): seeded as candidates of
  the new round in place of the compatibility graph's top-k seeds, which only jobs new to the round get;
  pricing adds whatever else has a negative reduced cost. They are ordinary candidates: every column
  check applies.
* the **held-back singles** in that basis (large rounds, see ``build._hold_back_singles``): they join the
  first LP again, so that the basis can be mapped.

The basis changes only where the dual simplex starts. The seeded groups change which columns the first
LP has: pricing then converges to the LP over every single, the seeds and what it prices in. With jobs
running, a pair's value depends on the pair (the move rule), so pricing by rank reaches an LP a little
above the all-pairs LP; the seeds are pairs of that kind, and in the tests the warm LP lies between the
all-pairs LP and the cold round's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from scheduler.model.configs import Configuration

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.ilp.problem import RoundProblem

# HiGHS basis status codes (highspy.HighsBasisStatus): kLower 0, kBasic 1, kUpper 2.
LOWER, BASIC, UPPER = 0, 1, 2

ColumnKey = tuple[tuple[str, ...], Configuration]


@dataclass
class WarmStart:
    """State one round leaves for the next (kept by the policy; empty at the first round)."""

    columns: dict[ColumnKey, int] = field(default_factory=dict)   # non-lower column statuses
    job_rows: dict[str, int] = field(default_factory=dict)        # job name -> row status
    capacity_rows: dict[str, int] = field(default_factory=dict)   # GPU type -> row status
    groups: set[tuple[str, ...]] = field(default_factory=set)     # groups priced in (job names)
    rounds: int = 0                                                # rounds remembered so far

    @property
    def empty(self) -> bool:
        return not self.columns and not self.groups

    def clear(self) -> None:
        for kept in (self.columns, self.job_rows, self.capacity_rows):
            kept.clear()
        self.groups.clear()

    # ---- seeds for the build -------------------------------------------------------------------------
    def new_jobs(self, problem: "RoundProblem") -> set[int]:
        """Indices of this round's jobs that the last round's LP did not have."""
        return {i for i, job in enumerate(problem.jobs) if job.name not in self.job_rows}

    def seed_groups(self, problem: "RoundProblem", size: int) -> set[tuple[int, ...]]:
        """Last round's groups of ``size`` jobs that are all in this round (as sorted job indices)."""
        index = _job_index(problem)
        found: set[tuple[int, ...]] = set()
        for names in self.groups:
            if len(names) == size and all(n in index for n in names):
                found.add(tuple(sorted(index[n] for n in names)))
        return found

    def released_singles(self, problem: "RoundProblem") -> "np.ndarray":
        """Indices into ``problem.reserved`` of the held-back singles in the last LP's basis or at 1."""
        res = problem.reserved
        if res is None or not self.columns:
            return np.zeros(0, dtype=np.int64)
        index = _job_index(problem)
        conf_index = {c: ci for ci, c in enumerate(problem.configs)}
        width = len(problem.configs)
        wanted = [index[group[0]] * width + conf_index[config] for group, config in self.columns
                  if len(group) == 1 and group[0] in index and config in conf_index]
        return np.nonzero(np.isin(res.job * width + res.conf, np.asarray(wanted, dtype=np.int64)))[0]

    # ---- the basis -------------------------------------------------------------------------------------
    def remember(self, h: Any, problem: "RoundProblem", job_row: dict[int, int], cap_row: dict[str, int]) -> None:
        """Record the final LP's basis and the groups in it (basic or at 1)."""
        basis = h.getBasis()
        if not basis.valid:
            return
        col_status = np.fromiter((int(s) for s in basis.col_status), dtype=np.int64)
        row_status = np.fromiter((int(s) for s in basis.row_status), dtype=np.int64)
        names = [job.name for job in problem.jobs]
        self.clear()
        for j in np.nonzero(col_status[:problem.num_columns] != LOWER)[0].tolist():
            self.columns[self.key(problem, j, names)] = int(col_status[j])
        self.job_rows = {names[i]: int(row_status[row]) for i, row in job_row.items()}
        self.capacity_rows = {t: int(row_status[row]) for t, row in cap_row.items()}
        self.groups = {group for group, _ in self.columns if len(group) >= 2}
        self.rounds += 1

    @staticmethod
    def key(problem: "RoundProblem", j: int, names: list[str]) -> ColumnKey:
        return tuple(sorted(names[i] for i in problem.members[j])), problem.configs[problem.conf[j]]

    def apply_basis(self, h: Any, problem: "RoundProblem", job_row: dict[int, int], cap_row: dict[str, int]) -> bool:
        """Hand HiGHS a starting basis mapped from the last round's; False when there is nothing to map."""
        import highspy

        if not self.columns:
            return False
        num_rows, num_cols = h.getNumRow(), h.getNumCol()
        names = [job.name for job in problem.jobs]
        index = _job_index(problem)
        conf_index = {c: ci for ci, c in enumerate(problem.configs)}
        column_of = {(m, ci): j for j, (m, ci) in enumerate(zip(problem.members, problem.conf))}
        cols = np.full(num_cols, LOWER, dtype=np.int64)
        for (group, config), status in self.columns.items():
            if config in conf_index and all(name in index for name in group):
                j = column_of.get((tuple(sorted(index[n] for n in group)), conf_index[config]))
                if j is not None and j < num_cols:
                    cols[j] = status
        rows = np.full(num_rows, BASIC, dtype=np.int64)  # new rows: their slack is basic
        # rows are bounded above only (or fixed, for a pinned job): a nonbasic row sits at its upper bound
        for i, row in job_row.items():
            rows[row] = BASIC if self.job_rows.get(names[i], BASIC) == BASIC else UPPER
        for t, row in cap_row.items():
            rows[row] = BASIC if self.capacity_rows.get(t, BASIC) == BASIC else UPPER
        _repair_count(cols, rows, num_rows)
        basis = highspy.HighsBasis()
        kinds = highspy.HighsBasisStatus
        table = {LOWER: kinds.kLower, BASIC: kinds.kBasic, UPPER: kinds.kUpper}
        basis.col_status = [table[int(s)] for s in cols]
        basis.row_status = [table[int(s)] for s in rows]
        basis.valid = True
        return h.setBasis(basis) == highspy.HighsStatus.kOk


def _job_index(problem: "RoundProblem") -> dict[str, int]:
    """Job name -> its index in this round (names are what carries over between rounds)."""
    return {job.name: i for i, job in enumerate(problem.jobs)}


def _repair_count(cols: "np.ndarray", rows: "np.ndarray", num_rows: int) -> None:
    """Make the number of basic variables equal the number of rows (a basis needs exactly that many).

    Too few (columns of finished jobs left the basis): make nonbasic row slacks basic, job rows first.
    Too many (rows of finished jobs left): drop basic columns from the basis, last columns first. Any
    singularity left is HiGHS's to repair (it swaps in slacks when the factorisation finds one)."""
    excess = int((cols == BASIC).sum() + (rows == BASIC).sum()) - num_rows
    if excess < 0:
        nonbasic = np.nonzero(rows != BASIC)[0][: -excess]
        rows[nonbasic] = BASIC
    elif excess > 0:
        basic = np.nonzero(cols == BASIC)[0][::-1][:excess]
        cols[basic] = LOWER
