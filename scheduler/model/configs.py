"""Sia's configuration set: the (GPU type, GPU count) shapes a job may be given.

Per GPU type with ``R`` GPUs per node and ``N`` nodes: powers of two inside one node (1, 2, 4, ... ≤ R),
then whole nodes (R·2, R·3, ... R·N GPUs over 2..N nodes) — Sia (SOSP'23) §3.2. Restricting shapes this
way keeps the ILP small (O(log R + N) columns per type) and makes placement always succeed when R is a
power of two, since every single-node shape divides R.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.cluster import Cluster


@dataclass(frozen=True, order=True)
class Configuration:
    """``num_gpus`` GPUs of ``gpu_type`` spread over ``num_nodes`` nodes (whole nodes when > 1)."""

    gpu_type: str
    num_nodes: int
    num_gpus: int

    @property
    def single_node(self) -> bool:
        return self.num_nodes == 1

    @property
    def label(self) -> str:
        return f"{self.gpu_type}x{self.num_gpus}"


def configurations(cluster: Cluster, max_nodes: int | None = None) -> list[Configuration]:
    """All configurations of ``cluster`` in a stable order (type order of the file, then size).

    ``max_nodes`` caps multi-node shapes (Sia caps job size; None: up to every node of the type).
    """
    out: list[Configuration] = []
    for t in cluster:
        size = 1
        while size <= t.gpus_per_node:
            out.append(Configuration(t.name, 1, size))
            size *= 2
        if t.gpus_per_node & (t.gpus_per_node - 1):  # R not a power of two: the whole node is a shape too
            out.append(Configuration(t.name, 1, t.gpus_per_node))
        top = t.nodes if max_nodes is None else min(t.nodes, max_nodes)
        for nodes in range(2, top + 1):
            out.append(Configuration(t.name, nodes, nodes * t.gpus_per_node))
    return out
