r"""One ILP per round for heterogeneity, adaptivity and packing: Sia's formulation plus pair variables.

Notation
--------
* ``J`` jobs; GPU types ``t`` with capacity ``K_t`` GPUs; configurations ``c`` (``n_c`` GPUs of one type,
  powers of two inside a node, then whole nodes: :mod:`scheduler.model.configs`).
* ``C_i`` — configurations valid for job ``i``: the goodput model knows the job there, its memory fits
  (``m_i ≤ M_t``), rigid jobs only at their own GPU count, a pinned job (checkpoint-restore) only at its
  current configuration.
* ``g_ic`` — goodput (samples/s × statistical efficiency) of job ``i`` alone on ``c``.
* Normalised goodput (Sia): ``G_ic = g_ic / min_{c' ∈ C_i} g_ic' · R_ic``, with the restart factor
  ``R_ic = max(T_i − N_i·S, 0) / (T_i + S)`` when job ``i`` runs now on another configuration (``T_i`` its
  age, ``N_i`` its restarts, ``S`` the restart cost), else ``R_ic = 1``. Columns with ``G_ic = 0`` are dropped.
* Group change (a change of partners is a checkpoint-restore): in a pair column ``(i, k, c)`` the member
  values are ``G'_ic = G_ic · M_ic`` and ``G'_kc = G_kc · M_kc``, where ``M = 1`` when ``i`` and ``k``
  already run as partners of each other, and otherwise ``M_ic = R_i`` for every member running now on
  ``c``'s type and GPU count (alone or with someone else); a member that runs on another configuration
  already pays ``R`` through ``G``, a job that is not running pays nothing. A member of a running group
  alone on its current shape (a split) pays ``G_ic · max(R_i, resume_floor)``. This is how ``serve``
  enacts a group change (the group is restarted whole); in the simulator one member of a formed or split
  pair moves, so charging both is also the hysteresis that keeps a pair from being formed for one round's
  instantaneous goodput and split again: with Sia's move rule (only the mover pays, a split free) pairs
  lived ~2 rounds and knowing the true ratios made jobs finish later at 1× load
  (``results/sim/packing-pays/NOTES.md``). Pair columns with ``G' = 0`` are dropped.
* Pair candidates ``P``: ``(i, k, c)`` with ``c`` single-node and in ``C_i ∩ C_k``, co-location ratios
  ``ρ_i, ρ_k > 0`` on type(c) from the colocation table (``ρ = t / t'``), ``m_i + m_k + 2·m_ctx ≤ M_t`` when
  memory is known, ``ρ_i + ρ_k ≥ 1 + β`` (minimum benefit ``β``), and ``(i, k)`` adjacent in the networkx
  compatibility graph of job classes. Not every such pair gets a variable: see "Keeping it small".

Variables ``x_ic ∈ {0, 1}`` (job ``i`` alone on ``c``), ``y_ikc ∈ {0, 1}`` (``i`` and ``k`` share ``c``).

For ``p < 0`` (Sia's default ``p = −0.5``)::

    minimise   Σ_ic G_ic^p · x_ic  +  Σ_(i,k,c)∈P [ (ρ_i G'_ic)^p + (ρ_k G'_kc)^p ] · y_ikc  +  λ Σ_i u_i
    where      u_i = 1 − Σ_c x_ic − Σ_(k,c) y_ikc                      (job i unallocated; λ = 1.1)

For ``p > 0`` (``p = 1``: the plain sum of normalised goodputs)::

    maximise   Σ_ic G_ic^p · x_ic  +  Σ_(i,k,c)∈P [ (ρ_i G'_ic)^p + (ρ_k G'_kc)^p ] · y_ikc

subject to::

    (1)  Σ_c x_ic + Σ_(k,c) y_ikc  ≤ 1          for every job i   (= 1 for a pinned job)
    (2)  Σ_(i, c of type t) n_c x_ic + Σ_((i,k,c), c of type t) n_c y_ikc  ≤ K_t     for every type t
                                                    (a pair uses its n_c GPUs once)

With ``P = ∅`` (``--no-packing``) this is exactly Sia's ILP. Because ``u_i`` is linear in the other
variables, it is substituted: the solver minimises ``Σ (cost − λ·|members|) · z`` and ``λ·|J|`` is the
objective's constant.

Groups of three (``max_group_size = 3``)
---------------------------------------
Triple variables ``w_iklc`` join the pair variables: single-node ``c`` valid for all three, memory
``m_i + m_k + m_l + 3·m_ctx ≤ M_t``, ratios predicted from the three pairs by adding slowdowns
(``1/ρ_x = 1/ρ_x|y + 1/ρ_x|z − 1``, :mod:`scheduler.ilp.triples`), ``Σ ρ ≥ 1 + β``; the column's cost is
``Σ_x w(ρ_x G'_xc)``, it uses ``n_c`` GPUs once and sits in the three jobs' rows of (1). ``G'`` applies
the group-change rule to every member running now on ``c``'s shape.

Holding decisions
-----------------
* ``keep_bonus`` ``b``: a running job's current configuration counts ``G_ic · (1 + b)`` (what runs is kept
  unless a change gains more than ``b``). 0 for ``sia`` (Sia's semantics), 0.1 for the packing policies
  (``scheduler.policies.PACKING_KEEP_BONUS``), 0.02 in ``serve``.
* ``charge_resumes`` (``serve``; off in the simulator): a queued job that ran before (``N_i > 0``) pays
  ``max(R_i, resume_floor)`` on every ``c``.

Keeping it small
----------------
All compatible pairs would be O(|J|²·|C|) variables (Gavel's packed LP: 1,837 s at 1,024 jobs). Instead:

1. *Seed*: each job's ``top_k`` partners from the compatibility graph (:func:`pair_candidates`), and every
   pair running together with a pinned member (:func:`held_pairs`: a pinned job may keep its partner).
2. *Price* (column generation, :func:`price_pair_columns`): solve the LP relaxation, read the duals ``y_i``
   (constraint 1) and ``μ_t`` (constraint 2), and add, per job, the ``top_k`` partners whose pair column
   has negative reduced cost ``w(ρ_i G_ic) − y_i + w(ρ_k G_kc) − y_k − n_c μ_t``. For one configuration
   and one pair of job classes the ratios are constants, so the reduced cost separates into
   ``a_i + b_k``; its minimum over all pairs is a rank-aligned pair of the two sorted lists, found with
   a sort instead of a pass over all pairs (:func:`dual_ranked_partners`). Repeated until no negative
   column is left, this solves the *all-pairs* LP relaxation exactly (a test checks it); by default a
   few passes are made (``pricing_passes``), within a third of the time limit. Pricing uses ``G``, not
   ``G'`` (``M`` depends on the pair, which would break the separation): as ``M ≤ 1`` the priced reduced
   cost is a lower bound of the true one, so no improving column is priced out for its restart; a priced
   column may turn out not to improve, and the exactness above is exact only for pairs with ``M = 1``.
3. *Round*: the LP is nearly integral; its rounding (:func:`greedy_selection` in LP order) is accepted
   when it is within ``mip_gap`` of the LP bound, which then bounds the whole round. Otherwise the
   columns the LP sets to 1 are fixed and the small rest is solved exactly (LP-and-fix); failing that,
   branch and bound on everything, started from the best solution so far.

Configurations dominated for a job, pair columns dominated by a smaller shape for both jobs, and pairs
beaten by running both jobs alone on the same GPUs split between them are never generated; none of these
can change the optimum.

Code map
--------
``config`` (:class:`IlpConfig`), ``objective`` (:class:`Objective`: every weight, bound and solver offset),
``problem`` (:class:`RoundProblem`, columns added only through ``add_columns``), ``columns`` (per-job
configurations, group columns), ``candidates`` (classes, compatibility graph, seeds), ``pricing`` (the
column-generation stage), ``highs`` / ``pulp_backend`` (back-ends, registered in ``solve.BACKENDS``),
``rounding`` (LP rounding, greedy), ``build`` / ``solve`` (the stages), ``policy`` (:class:`PackingPolicy`).

Solver: HiGHS by default — the column-wise matrix handed to highspy in one call, since building the same
model through ``pulp.HiGHS`` costs more than solving it — and CBC through PuLP as the fallback
(``solver="pulp-highs"`` runs HiGHS through PuLP). Always a time limit and a relative gap. The answer's
solution status is read as well as its model status: a time-limited run can report "Optimal"/"Time limit
reached" with an integer-feasible, not proven-optimal incumbent (used, and reported as such). When no
feasible solution comes back, a greedy allocation is used, so a round always yields a decision.
"""
