"""The solvers of a round's ILP: HiGHS through highspy (:mod:`.highs`), HiGHS or CBC through PuLP
(:mod:`.pulp_backend`), the LP rounding and greedy selection every solve falls back on (:mod:`.rounding`), and
:mod:`.quiet`, which keeps solvers' output off the terminal. :mod:`scheduler.ilp.solve` runs them with a time
limit and a gap, between pricing passes, and turns the answer into a decision."""
