"""Which job groups get a column before pricing: job classes, the networkx compatibility graph, top-k seeds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scheduler.ilp.config import IlpConfig
from scheduler.model.colocation import class_key
from scheduler.model.configs import Configuration
from scheduler.model.jobs import Job

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.ilp.columns import JobColumns
    from scheduler.model.colocation import ColocationTable


def pair_candidates(jobs: Sequence[Job], options: Sequence["JobColumns"], configs: tuple[Configuration, ...],
                    colocation: "ColocationTable", cfg: IlpConfig, only: "set[int] | None" = None
                    ) -> tuple[set[tuple[int, int]], "Any"]:
    """Unordered job pairs worth a pair variable, and the class-level compatibility graph.

    Jobs are grouped into classes (:func:`class_key`): ratios depend only on the class and GPU type.
    The networkx graph has one node per class and an edge where some GPU type gives ``ρ_a, ρ_b > 0`` and
    ``ρ_a + ρ_b ≥ 1 + β`` (weight = the best such sum). Each job takes up to ``top_k`` partners from its
    classes' neighbours, best edge first; within a partner class, partners are spread by rank (job j of
    class A meets jobs near rank j·|B|/|A| of class B, both sorted by preferred shape) so that many
    disjoint pairs exist, instead of every job naming the same few partners.
    With ``pair_candidates="all"`` every pair of jobs in adjacent classes is a candidate. ``only``: seed
    the top-k partners of these jobs only (a warm-started round seeds the jobs it has no history for).
    """
    classes: dict[tuple, list[int]] = {}
    for i, job in enumerate(jobs):
        if any(configs[ci].single_node for ci in options[i].single):
            classes.setdefault(class_key(job), []).append(i)
    graph = _class_graph(jobs, classes, colocation, cfg)
    pairs: set[tuple[int, int]] = set()
    if cfg.pair_candidates == "all":
        for a, b in graph.edges:
            for i in classes[a]:
                for k in classes[b]:
                    if i != k:
                        pairs.add((min(i, k), max(i, k)))
        return pairs, graph
    if cfg.top_k == 0:
        return pairs, graph

    def shape_key(i: int) -> tuple:
        opts = options[i].single
        best_ci = max(opts, key=lambda ci: opts[ci][0])
        c = configs[best_ci]
        return (c.gpu_type, c.num_gpus, -opts[best_ci][0], jobs[i].name)

    ordered = {key: sorted(members, key=shape_key) for key, members in classes.items()}
    rank = {i: r for members in ordered.values() for r, i in enumerate(members)}
    for a, members in ordered.items():
        neighbours = sorted(graph[a].items(), key=lambda kv: (-kv[1]["weight"], kv[0]))
        for i in members:
            if only is not None and i not in only:
                continue
            # round-robin over the neighbouring classes, best edge first: one partner from each of the
            # top classes before a second from any, so a job's candidates are not all of one kind
            chosen: list[int] = []
            offset = {b: 0 for b, _ in neighbours}
            while len(chosen) < cfg.top_k:
                progressed = False
                for b, _ in neighbours:
                    if len(chosen) >= cfg.top_k:
                        break
                    pool = ordered[b]
                    start = rank[i] + 1 if a == b else (rank[i] * len(pool)) // len(members)
                    while offset[b] < len(pool):
                        k = pool[(start + offset[b]) % len(pool)]
                        offset[b] += 1
                        if k != i and k not in chosen:
                            chosen.append(k)
                            progressed = True
                            break
                if not progressed:
                    break
            for k in chosen:
                pairs.add((min(i, k), max(i, k)))
    return pairs, graph



def held_pairs(jobs: Sequence[Job]) -> set[tuple[int, int]]:
    """Pairs running together now with a pinned member: always a candidate, since a pinned job may keep its
    partner but gets no other column. Without it, seeds and pricing (which skips pinned jobs) can miss the
    pair, and two pinned partners on one GPU leave the round infeasible (the greedy fallback then splits
    what was to be held)."""
    index = {job.name: i for i, job in enumerate(jobs)}
    out = set()
    for i, job in enumerate(jobs):
        k = index.get(job.current_partner or "")
        if k is not None and k != i and jobs[k].current_partner == job.name and (job.pinned or jobs[k].pinned):
            out.add((min(i, k), max(i, k)))
    return out


def _class_graph(jobs: Sequence[Job], classes: dict[tuple, list[int]], colocation: "ColocationTable",
                 cfg: IlpConfig) -> "Any":
    """networkx graph of job classes; an edge (weight = best ratio sum) where some GPU type makes the pair pay."""
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(classes)
    keys = list(classes)
    types = _table_types(colocation)
    for a_pos, a in enumerate(keys):
        rep_a = jobs[classes[a][0]]
        for b in keys[a_pos:]:
            rep_b = jobs[classes[b][0]]
            if a == b and len(classes[a]) < 2:
                continue
            best = 0.0
            for t in types:
                r = colocation.lookup(t, rep_a, rep_b)
                if r is None or r[0] <= 0 or r[1] <= 0:
                    continue
                best = max(best, r[0] + r[1])
            if best >= 1 + cfg.min_benefit:
                graph.add_edge(a, b, weight=best)
    return graph


_TYPES: dict[int, tuple[Any, list[str]]] = {}


def _table_types(colocation: "ColocationTable") -> list[str]:
    """The table's GPU types, sorted (a table is not changed once built; the set is read every round)."""
    hit = _TYPES.get(id(colocation))
    if hit is not None and hit[0] is colocation:  # the entry keeps its table alive, so the id is not reused
        return hit[1]
    if len(_TYPES) > 64:
        _TYPES.clear()
    types = sorted(colocation.gpu_types)
    _TYPES[id(colocation)] = (colocation, types)
    return types

