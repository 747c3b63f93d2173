"""Prometheus metrics a worker serves on a port you choose (`durajobs worker --metrics-port`).

Two kinds of series:
- this process's own, counted as it happens: jobs_total{queue,outcome} (outcome ok, failed or
  dead; a suspension, a drain's interrupted attempt, a park, a cancel add nothing),
  job_leases_lost_total{queue}; and job_worker_in_flight and job_worker_capacity, each the sum
  over the live workers of the process (a stopped worker leaves both), so an autoscaler needs
  pods = ceil((queue_depth + sum of job_worker_in_flight) / job_worker_capacity);
- the queue's, read from the database at scrape time (one short connection, three statements):
  queue_depth{queue} (the autoscaler's number, jobs.queue_depth), queue_oldest_ready_seconds
  {queue} and queue_dead_jobs{queue} (jobs.queue_stats); and per limit (jobs.limits: a job's
  declared one per key, a set one per tenant where it counts each apart)
  limit_held_back_jobs{scope,job,key,queue,tenant} (due rows waiting because the limit has no
  room) and limit_running_jobs{...}. A scrape the database cannot answer leaves them out and
  logs why; the process series still answer.
Each worker has its own CollectorRegistry, so two workers in one process never collide. The
same port answers a supervisor's probes, /healthz and /readyz (durajobs.observe.health).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from threading import Thread
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from durajobs._db import calls
from durajobs._db.execute import execute
from durajobs.observe.health import Readiness, with_probes

log = logging.getLogger(__name__)

# what one attempt's outcome adds to jobs_total (execution.Outcome values)
OUTCOME_LABELS = {
    "completed": "ok",
    "retried": "failed",
    "dropped": "failed",
    "refused": "failed",
    "dead-lettered": "dead",
}


class LiveWorkers:
    """The workers of this process that are running: what the worker gauges sum over."""

    def __init__(self) -> None:
        self._workers: dict[int, tuple[Callable[[], int], Callable[[], int]]] = {}

    def join(self, key: object, in_flight: Callable[[], int], capacity: Callable[[], int]) -> None:
        self._workers[id(key)] = (in_flight, capacity)

    def leave(self, key: object) -> None:
        self._workers.pop(id(key), None)

    def in_flight(self) -> int:
        return sum(in_flight() for in_flight, _ in list(self._workers.values()))

    def capacity(self) -> int:
        return sum(capacity() for _, capacity in list(self._workers.values()))


# one per process: the gauges of every worker's registry answer the same sums
LIVE_WORKERS = LiveWorkers()


class QueueCollector(Collector):
    """Reads the queue gauges from the database when Prometheus scrapes."""

    def __init__(self, database_url: str, queues: Sequence[str]) -> None:
        self._database_url = database_url
        self._queues = list(queues)

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "queue_depth",
            "Jobs running plus due, minus what draining workers hold",
            labels=["queue"],
        )
        oldest = GaugeMetricFamily(
            "queue_oldest_ready_seconds",
            "How long the oldest ready and due job has waited past its run_at",
            labels=["queue"],
        )
        dead = GaugeMetricFamily(
            "queue_dead_jobs", "Jobs in the dead-letter state", labels=["queue"]
        )
        limit_labels = ["scope", "job", "key", "queue", "tenant"]
        held_back = GaugeMetricFamily(
            "limit_held_back_jobs",
            "Due jobs waiting because a limit has no room (running at its cap, or its rate used)",
            labels=limit_labels,
        )
        limit_running = GaugeMetricFamily(
            "limit_running_jobs", "Attempts running under a limit", labels=limit_labels
        )
        horizon_age = GaugeMetricFamily(
            "database_xmin_horizon_age_seconds",
            "How long the oldest open transaction or snapshot of the database has held its xmin"
            " horizon (0: nothing holds it); dead rows behind it cannot be vacuumed",
        )
        horizon_xids = GaugeMetricFamily(
            "database_xmin_horizon_xid_age",
            "How many transactions old the database's xmin horizon is",
        )
        try:
            with psycopg.connect(self._database_url, autocommit=True, connect_timeout=5) as db:
                holder = execute(db, calls.horizon())
                stats = execute(db, calls.queue_stats(self._queues))
                depths = {
                    row.queue: row.depth for row in execute(db, calls.queue_depth(self._queues))
                }
                limits = execute(db, calls.limits())
        except Exception as failure:
            log.warning("jobs.metrics.scrape-failed", extra={"error": str(failure)})
            return
        for stat in stats:
            depth.add_metric([stat.queue], float(depths.get(stat.queue, 0)))
            age = stat.oldest_ready_age.total_seconds() if stat.oldest_ready_age else 0.0
            oldest.add_metric([stat.queue], age)
            dead.add_metric([stat.queue], float(stat.dead))
        for limit in limits:
            labels = [
                limit.scope,
                limit.name or "",
                limit.concurrency_key or "",
                limit.queue or "",
                limit.tenant_id or "",
            ]
            held_back.add_metric(labels, float(limit.held_back))
            limit_running.add_metric(labels, float(limit.running))
        horizon_age.add_metric([], (holder.age_seconds or 0.0) if holder else 0.0)
        horizon_xids.add_metric([], float(holder.xid_age) if holder else 0.0)
        yield depth
        yield oldest
        yield dead
        yield held_back
        yield limit_running
        yield horizon_age
        yield horizon_xids


class _QuietHandler(WSGIRequestHandler):
    """A scrape or a probe every few seconds is not worth a line on stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class WorkerMetrics:
    """The series of one worker process, and the HTTP server that exposes them."""

    def __init__(
        self,
        database_url: str,
        queues: Sequence[str],
        *,
        in_flight: Callable[[], int],
        capacity: Callable[[], int],
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.jobs_total = Counter(
            "jobs",
            "Attempts this worker ended, by queue and outcome (ok, failed, dead)",
            ["queue", "outcome"],
            registry=self.registry,
        )
        self.leases_lost = Counter(
            "job_leases_lost",
            "Attempts whose lease another worker took while this one still ran them",
            ["queue"],
            registry=self.registry,
        )
        self._in_flight, self._capacity = in_flight, capacity
        in_flight_gauge = Gauge(
            "job_worker_in_flight",
            "Attempts the running workers of this process run now",
            registry=self.registry,
        )
        in_flight_gauge.set_function(lambda: float(LIVE_WORKERS.in_flight()))
        capacity_gauge = Gauge(
            "job_worker_capacity",
            "Attempts the running workers of this process may run at once",
            registry=self.registry,
        )
        capacity_gauge.set_function(lambda: float(LIVE_WORKERS.capacity()))
        self.registry.register(QueueCollector(database_url, queues))
        self._counters: dict[tuple[str, str], Counter | None] = {}
        self._server: WSGIServer | None = None
        self._thread: Thread | None = None
        self.port: int | None = None

    def join(self) -> None:
        """Count this worker in the process's gauges: it runs."""
        LIVE_WORKERS.join(self, self._in_flight, self._capacity)

    def leave(self) -> None:
        """Take this worker out of them: it stopped."""
        LIVE_WORKERS.leave(self)

    def observe(self, queue: str, outcome: str, count: int = 1) -> None:
        """Count `count` attempts' outcome (an execution.Outcome value)."""
        counter = self._counters.get((queue, outcome))
        if counter is None:
            counter = self._counters[queue, outcome] = self._counter_for(queue, outcome)
        if counter is not None:
            counter.inc(count)

    def _counter_for(self, queue: str, outcome: str) -> Counter | None:
        # looked up once per pair: labels() costs more than the increment, once per job
        label = OUTCOME_LABELS.get(outcome)
        if label is not None:
            return self.jobs_total.labels(queue=queue, outcome=label)
        if outcome == "lease-lost":
            return self.leases_lost.labels(queue=queue)
        return None

    def serve(
        self, port: int, host: str = "0.0.0.0", readiness: Callable[[], Readiness] | None = None
    ) -> int:
        """Serve /metrics, /healthz and /readyz on host:port (0 picks a free port); answers the
        port bound."""
        app = with_probes(make_wsgi_app(self.registry), readiness)
        server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
        thread = Thread(target=server.serve_forever, daemon=True, name="durajobs-metrics")
        thread.start()
        self._server, self._thread = server, thread
        self.port = int(server.server_address[1])
        log.info("jobs.metrics.serving", extra={"host": host, "port": self.port})
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def sample(self, name: str, labels: dict[str, Any] | None = None) -> float | None:
        """One sample's value, for tests and the demo."""
        return self.registry.get_sample_value(name, labels or {})
