"""Prometheus metrics of the runtime, on a registry owned by one ``Manager``.

No global registry: every ``Manager`` (and every test) gets its own ``CollectorRegistry``, so two
managers in one process never collide. Metric names follow controller-runtime and client-go so
existing dashboards read them:

- ``controller_runtime_reconcile_total{controller,result}`` with result ``success``, ``error``
  (a terminal error too, as upstream counts it), ``requeue_after``, ``requeue`` (never produced:
  our Result has no bare requeue, but upstream creates the series and dashboards sum over it)
- ``controller_runtime_reconcile_errors_total{controller}``
- ``controller_runtime_terminal_reconcile_errors_total{controller}`` (the terminal ones alone)
- ``controller_runtime_reconcile_time_seconds{controller}`` (histogram)
- ``controller_runtime_active_workers{controller}``,
  ``controller_runtime_max_concurrent_reconciles{controller}``
- ``workqueue_depth{name,controller,priority}`` (priority always empty: keys of every
  priority together; controller-runtime's priority queue has a series per priority),
  ``workqueue_adds_total{name,controller}``, ``workqueue_retries_total{name,controller}``,
  ``workqueue_queue_duration_seconds{name,controller}`` (histogram: time from add to a worker
  picking it up), ``workqueue_work_duration_seconds{name,controller}`` (histogram: time a
  worker spent on a key); ``name`` and ``controller`` are both the controller's name, as in
  controller-runtime 0.24, whose dashboards group by either
- ``rest_client_requests_total{verb,resource,code}`` (fed by ``Client``'s ``on_request`` hook)
- ``leader_election_master_status{name}`` (1 while this manager, or with sharding the ring's
  assigner, holds that Lease)

and two of our own, read from the process's state on each scrape (``StateCollector``), for
watching a process's footprint over time (bench/bench_soak.py) and alerting on a leak:

- ``machinepool_asyncio_tasks`` (asyncio tasks alive on the process's event loop)
- ``machinepool_informer_objects{cluster,group,kind}`` (objects held by the informer caches,
  summed per kind; ``cluster`` is ``management`` or a workload Cluster's ``namespace/name``)

Every labelled series a controller owns is created at zero when the controller is registered,
so rates and alerts work before the first event.
"""

from __future__ import annotations

import asyncio
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

InformerSizes = Callable[[], Iterable[tuple[str, str, str, int]]]
"""(cluster, group, kind, objects) of each informer a cache holds; called on every scrape."""

MANAGEMENT = "management"
"""The ``cluster`` label of the management cluster's informers."""

RESULTS = ("success", "error", "requeue_after", "requeue")

_RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
_QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0)


class RuntimeMetrics:
    """The runtime's metric families on ``registry`` (a fresh one when omitted)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Reconciliations by controller and result.",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Reconciliations that raised.",
            ["controller"],
            registry=r,
        )
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Reconciliations that raised a TerminalError (not retried).",
            ["controller"],
            registry=r,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Duration of reconciliations.",
            ["controller"],
            buckets=_RECONCILE_BUCKETS,
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Workers currently reconciling.",
            ["controller"],
            registry=r,
        )
        self.max_workers = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Configured worker count.",
            ["controller"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "workqueue_depth",
            "Keys waiting in the work queue.",
            ["name", "controller", "priority"],
            registry=r,
        )
        self.queue_adds = Counter(
            "workqueue_adds_total",
            "Keys added to the work queue.",
            ["name", "controller"],
            registry=r,
        )
        self.queue_retries = Counter(
            "workqueue_retries_total",
            "Rate-limited re-adds.",
            ["name", "controller"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "workqueue_queue_duration_seconds",
            "Seconds a key waited in the queue before a worker took it.",
            ["name", "controller"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.queue_work = Histogram(
            "workqueue_work_duration_seconds",
            "Seconds a worker spent processing a key.",
            ["name", "controller"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "rest_client_requests_total",
            "Kubernetes API requests by verb, resource and HTTP status code.",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "1 while this manager holds the leader Lease.",
            ["name"],
            registry=r,
        )
        self.state = StateCollector()
        r.register(self.state)

    def add_informer_source(self, source: InformerSizes) -> None:
        """Report the informers ``source`` yields in ``machinepool_informer_objects``."""
        self.state.sources.append(source)

    def init_controller(self, name: str, concurrency: int) -> None:
        """Create every series of controller ``name`` at zero."""
        for result in RESULTS:
            self.reconcile_total.labels(name, result)
        self.reconcile_errors.labels(name)
        self.terminal_errors.labels(name)
        self.reconcile_time.labels(name)
        self.active_workers.labels(name).set(0)
        self.max_workers.labels(name).set(concurrency)
        self.queue_depth.labels(name, name, "").set(0)
        self.queue_adds.labels(name, name)
        self.queue_retries.labels(name, name)
        self.queue_wait.labels(name, name)
        self.queue_work.labels(name, name)

    def on_request(self, verb: str, resource: str, status: int) -> None:
        """A ``Client`` ``on_request`` hook: count one API request."""
        self.requests.labels(verb, resource, str(status)).inc()

    def queue_hooks(self, name: str) -> QueueMetrics:
        return QueueMetrics(self, name)


class QueueMetrics:
    """``QueueHooks`` for one named queue, bound to its labelled series once."""

    def __init__(self, metrics: RuntimeMetrics, name: str) -> None:
        self._adds = metrics.queue_adds.labels(name, name)
        self._retries = metrics.queue_retries.labels(name, name)
        self._depth = metrics.queue_depth.labels(name, name, "")
        self._wait = metrics.queue_wait.labels(name, name)

    def added(self) -> None:
        self._adds.inc()

    def retried(self) -> None:
        self._retries.inc()

    def depth(self, depth: int) -> None:
        self._depth.set(depth)

    def waited(self, seconds: float) -> None:
        self._wait.observe(seconds)


class StateCollector(Collector):
    """``machinepool_asyncio_tasks`` and ``machinepool_informer_objects``, computed when
    scraped rather than kept up to date on every event: counting a few dozen informers' stores
    and the loop's tasks every 15 s costs nothing, while a gauge moved per watch event would
    sit on the hot path of every informer.

    The loop is the running one (a scrape is served on it); ``bind`` names it for a scrape
    from elsewhere (a test calling ``generate_latest`` outside the loop). Both families exist
    from the start: the task gauge always has its sample, and each informer a source knows has
    its series, at zero until its first list.
    """

    def __init__(self) -> None:
        self.sources: list[InformerSizes] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def _tasks(self) -> int:
        loop: asyncio.AbstractEventLoop | None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = self._loop
        return 0 if loop is None else len(asyncio.all_tasks(loop))

    def collect(self) -> Iterator[Metric]:
        tasks = GaugeMetricFamily(
            "machinepool_asyncio_tasks", "asyncio tasks alive on the process's event loop."
        )
        tasks.add_metric([], self._tasks())
        yield tasks
        objects = GaugeMetricFamily(
            "machinepool_informer_objects",
            "Objects held by the informer caches, per cluster and kind.",
            labels=["cluster", "group", "kind"],
        )
        totals: Tally[tuple[str, str, str]] = Tally()
        for source in self.sources:
            for cluster, group, kind, count in source():
                totals[(cluster, group, kind)] += count
        for labels, count in sorted(totals.items()):
            objects.add_metric(list(labels), count)
        yield objects
