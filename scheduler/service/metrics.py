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
``colocate_gpu_jobs{gpu_type,      gauge      jobs on each GPU of the cluster (0 idle, 1 alone, 2-3 shared)
node,gpu}``
``colocate_job_samples_per_second  gauge      per running job: its last measured samples/s
{job_name,gpu_type,partners}``
``colocate_job_slowdown{job,       gauge      per running member of a group: its last measured time per step over
gpu_type,partners}``                          its solo time on that GPU type, count and batch (measured alone, else
                                             the estimate its bound is judged by; from the first measurement)
``colocate_job_memory_limit_bytes  gauge      per running member of a group: its hard GPU-memory limit per GPU
{job_name,gpu_type,partners}``
``colocate_ooms_total{gpu_type}``  counter    out-of-memory failures (``oom`` events)
``colocate_splits_total``          counter    groups split because a member was measured past its slowdown bound
``colocate_round_failures_total``  counter    rounds that failed (an error escaped: ``round-failed`` events)
``colocate_api_refused_total       counter    API calls refused: ``authentication`` (no, a wrong, expired or
{reason}``                                    revoked token), ``forbidden`` (not the job's owner or an admin),
                                             ``rate``, ``body``, ``input``, ``timeout``
=================================  =========  ================================================================

The per-job series carry bounded labels (``job_name``, its GPU type, its partners comma-joined: at most two) and are
removed when the job stops running, so a long-lived server exports series for its running jobs only. The job's label
is ``job_name``, not ``job``: Prometheus gives every scraped series its scrape job's name as ``job``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.errors import InputError
from scheduler.service.state.store import ACTIVE_STATES, FINAL_STATES, RUNNING

if TYPE_CHECKING:  # pragma: no cover
    from scheduler.service.rounds import RoundStats
    from scheduler.service.server import Server

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
        self.gpu_jobs = Gauge("colocate_gpu_jobs", "Jobs on each GPU.", ["gpu_type", "node", "gpu"], registry=r)
        per_job = ["job_name", "gpu_type", "partners"]  # not "job": Prometheus sets that to the scrape target's
        self.job_rate = Gauge("colocate_job_samples_per_second", "A running job's measured samples/s.", per_job,
                              registry=r)
        self.job_slowdown = Gauge("colocate_job_slowdown", "A running member's measured time per step over its solo "
                                  "time (same GPU type, count and batch).", per_job, registry=r)
        self.job_limit = Gauge("colocate_job_memory_limit_bytes", "A running member's GPU-memory limit per GPU.",
                               per_job, registry=r)
        self.ooms = Counter("colocate_ooms", "Out-of-memory failures.", ["gpu_type"], registry=r)
        self.splits = Counter("colocate_splits", "Groups split: a member measured past its slowdown bound.", registry=r)
        self.api_refused_total = Counter("colocate_api_refused", "API calls refused, by reason.", ["reason"],
                                         registry=r)
        self.round_failures = Counter("colocate_round_failures", "Rounds that failed (round-failed events).",
                                      registry=r)
        self._job_series: dict[Any, set[tuple[str, ...]]] = {}
        self._ooms_seen: dict[str, int] | None = None
        self._splits_seen = 0
        self._restarts_seen: int | None = None
        self._http: Any = None
        self._reasons: set[str] = set()

    def serve(self, port: int) -> Any:
        """Expose the metrics on ``127.0.0.1:port``; a port in use is an input error."""
        from prometheus_client import start_http_server

        try:
            self._http = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        except OSError as err:
            raise InputError(f"cannot listen on 127.0.0.1:{port} ({err.strerror or err})", field="metrics_port",
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
        from scheduler.service.front.views import learned_pairs
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
        self._per_gpu(server, sharing)
        self._per_job(server, rows, SoloTimes(measurements))
        self._failures(server)
        self.round_seconds.observe(stats.total_s)
        self.rounds.inc()

    def api_refused(self, reason: str) -> None:
        """One refused API call (called from the API's thread: prometheus_client's counters are thread-safe)."""
        self.api_refused_total.labels(reason).inc()

    def round_failed(self, server: "Server") -> None:
        """A round failed (:mod:`.state.health` logged and recorded it): counted; the other series keep the last
        good round's values."""
        self.round_failures.inc()

    def _per_gpu(self, server: "Server", sharing: dict[tuple[str, int, int], int]) -> None:
        for t in server.cluster:
            for node in range(t.nodes):
                for gpu in range(t.gpus_per_node):
                    self.gpu_jobs.labels(gpu_type=t.name, node=str(node), gpu=str(gpu)).set(
                        sharing.get((t.name, node, gpu), 0))

    def _per_job(self, server: "Server", rows: list[Any], solo: Any) -> None:
        """The running jobs' series; those of jobs no longer running (or running elsewhere) are removed."""
        from scheduler.service.contract import load_solo_estimates, measured_slowdown
        from scheduler.service.front.views import running_limits

        limits = running_limits(server.state)
        estimates = load_solo_estimates(server.state)
        now: dict[Any, set[tuple[str, ...]]] = {self.job_rate: set(), self.job_slowdown: set(), self.job_limit: set()}
        for r in rows:
            if r.state != RUNNING or not r.gpu_type:
                continue
            labels = (r.name, r.gpu_type, ",".join(sorted(r.others)))
            slowdown = measured_slowdown(r, solo, estimates)
            values = {self.job_rate: r.samples_per_s, self.job_slowdown: slowdown[0] if slowdown else None,
                      self.job_limit: limits.get(r.name)}
            for gauge, value in values.items():
                if value is not None:
                    gauge.labels(*labels).set(value)
                    now[gauge].add(labels)
        for gauge, series in now.items():
            for stale in self._job_series.get(gauge, set()) - series:
                gauge.remove(*stale)
        self._job_series = now

    def _failures(self, server: "Server") -> None:
        """Out-of-memory failures by GPU type (from the jobs' records) and splits, as counters."""
        from scheduler.service.contract import memory_records, oom_totals

        ooms = oom_totals(memory_records(server.state))
        seen_before = self._ooms_seen if self._ooms_seen is not None else server.ooms_at_start
        for gpu, count in ooms.items():
            self.ooms.labels(gpu_type=gpu)  # the series exists (at 0) from the first failure's GPU type on
            if count > seen_before.get(gpu, 0):
                self.ooms.labels(gpu_type=gpu).inc(count - seen_before.get(gpu, 0))
        self._ooms_seen = ooms
        if server.splits > self._splits_seen:
            self.splits.inc(server.splits - self._splits_seen)
        self._splits_seen = server.splits
