"""Prometheus metrics of ``colocate serve --metrics-port N`` (``prometheus-client``, served on 127.0.0.1).

=================================  =========  ================================================================
metric                             type       what
=================================  =========  ================================================================
``colocate_jobs{state}``           gauge      jobs by state (queued, running, completed, failed, cancelled)
``colocate_waiting_jobs{reason}``  gauge      queued jobs by why they wait (:mod:`.waiting` codes)
``colocate_gpus{gpu_type}``        gauge      GPUs of the cluster
``colocate_gpus_used{gpu_type}``   gauge      GPUs running at least one job
``colocate_gpus_packed{gpu_type}`` gauge      GPUs shared by two or more jobs
``colocate_round_seconds``         histogram  duration of a round (collect, decide, enact)
``colocate_restarts_total``        counter    job restarts for a change (stopped, then resumed)
``colocate_rounds_total``          counter    rounds run
``colocate_learned_pairs``         gauge      pairs learned: both members measured together and alone (what
                                             ``colocate learned`` counts and ``learned --out`` writes)
=================================  =========  ================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.errors import InputError
from scheduler.service.store import ACTIVE_STATES, FINAL_STATES, RUNNING

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.service.server import RoundStats, Server

ROUND_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ServeMetrics:
    """The metrics of one server, updated at the end of every round."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Gauge("colocate_jobs", "Jobs by state.", ["state"], registry=r)
        self.waiting = Gauge("colocate_waiting_jobs", "Queued jobs by why they wait.", ["reason"], registry=r)
        self.gpus = Gauge("colocate_gpus", "GPUs of the cluster.", ["gpu_type"], registry=r)
        self.gpus_used = Gauge("colocate_gpus_used", "GPUs running at least one job.", ["gpu_type"], registry=r)
        self.gpus_packed = Gauge("colocate_gpus_packed", "GPUs shared by two or more jobs.", ["gpu_type"], registry=r)
        self.round_seconds = Histogram("colocate_round_seconds", "Duration of a round.", buckets=ROUND_BUCKETS,
                                       registry=r)
        self.restarts = Counter("colocate_restarts", "Job restarts for a change.", registry=r)
        self.rounds = Counter("colocate_rounds", "Rounds run.", registry=r)
        self.learned_pairs = Gauge("colocate_learned_pairs", "Pairs learned (measured together and alone).", registry=r)
        self._restarts_seen: int | None = None
        self._http: Any = None
        self._reasons: set[str] = set()

    def serve(self, port: int) -> Any:
        """Expose the metrics on ``127.0.0.1:port``; a port in use is an input error."""
        from prometheus_client import start_http_server

        try:
            self._http = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        except OSError as err:
            raise InputError(f"cannot listen on 127.0.0.1:{port} ({err.strerror or err})", field="--metrics-port",
                             valid="a free TCP port in 1..65535") from None
        return self._http

    def shutdown(self) -> None:
        """Stop serving (the port is free again)."""
        http, self._http = self._http, None
        if isinstance(http, tuple):  # prometheus-client >= 0.17: (server, thread)
            http[0].shutdown()
            http[0].server_close()

    def update(self, server: "Server", stats: "RoundStats") -> None:
        """Refresh every metric from the state after a round."""
        from scheduler.learning.measured import SoloTimes, learned_ratios
        from scheduler.service.views import learned_pairs
        from scheduler.service.waiting import META_KEY, loads

        rows = server.state.jobs()
        for state in (*ACTIVE_STATES, *FINAL_STATES):
            self.jobs.labels(state=state).set(sum(r.state == state for r in rows))
        restarts = sum(r.restarts for r in rows)
        if self._restarts_seen is not None and restarts > self._restarts_seen:
            self.restarts.inc(restarts - self._restarts_seen)
        self._restarts_seen = restarts
        used: dict[str, set[tuple[int, int]]] = {}
        sharing: dict[tuple[str, int, int], int] = {}
        for r in rows:
            if r.state == RUNNING and r.gpu_type:
                for n in r.nodes:
                    for g in r.gpus:
                        used.setdefault(r.gpu_type, set()).add((n, g))
                        sharing[(r.gpu_type, n, g)] = sharing.get((r.gpu_type, n, g), 0) + 1
        for t in server.cluster.type_names:
            self.gpus.labels(gpu_type=t).set(server.cluster.capacity(t))
            self.gpus_used.labels(gpu_type=t).set(len(used.get(t, ())))
            self.gpus_packed.labels(gpu_type=t).set(sum(1 for (gt, _, _), k in sharing.items() if gt == t and k > 1))
        counts: dict[str, int] = {}
        queued = {r.name for r in rows if r.state == "queued"}
        for name, reason in loads(server.state.meta(META_KEY)).items():
            if name not in queued:  # a running job's note (why it is not scaled up) is no waiting reason
                continue
            counts[reason.get("code", "?")] = counts.get(reason.get("code", "?"), 0) + 1
        for code in self._reasons | set(counts):
            self.waiting.labels(reason=code).set(counts.get(code, 0))
        self._reasons |= set(counts)
        measurements = server.state.measurements()
        self.learned_pairs.set(learned_pairs(learned_ratios(measurements, SoloTimes(measurements))))
        self.round_seconds.observe(stats.total_s)
        self.rounds.inc()
