"""More than one core through Kafka itself: one service, N worker processes.

* Each worker is a whole ``ConsumerService`` in its own process (``spawn``),
  a full member of the service's consumer group: Kafka's group protocol gives
  each its partitions, nothing here assigns any. With static membership each
  worker is ``<instance id>-w<index>``, so a restarted worker takes its own
  partitions back at once.
* The supervisor (the process the command started) serves the service's one
  HTTP port: ``/metrics`` through prometheus-client's multiprocess mode (a
  fresh ``PROMETHEUS_MULTIPROC_DIR`` per run, removed at exit), and
  ``/livez``, ``/readyz``, ``/healthz`` from the state each worker writes
  every second (``WorkersHealth``).
* SIGTTIN adds a worker, SIGTTOU drains and retires the newest one (as in
  gunicorn): the group rebalances, nothing else moves.
* SIGTERM/SIGINT: forwarded to every worker, each drains (batch finished,
  offsets stored and committed, group left, sink closed); the supervisor
  exits 0 when all of them did.
* A worker whose supervisor is killed notices within a second and drains.
* A worker that dies is never restarted silently: a ``worker_exited`` error
  line (index, pid, exit code or signal), ``turnaudit_worker_restarts_total``,
  then a restart under the same member name, after a back-off that grows
  while it keeps dying young (1 s, doubling to 30 s; reset after a minute up).
* Redeliveries across workers are marked (``redelivery``); callback figures
  reach the multiprocess files through ``worker_metrics.MirroringRegistry``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from multiprocessing.connection import wait as wait_for_sentinels
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.multiprocess import mark_process_dead

from turnaudit.consumers.runtime.health import WorkersHealth
from turnaudit.consumers.runtime.http import ServiceHttp
from turnaudit.consumers.runtime.multiprocess_files import SettledMultiProcessCollector
from turnaudit.consumers.runtime.settings import ServiceSettings
from turnaudit.consumers.runtime.worker_metrics import WorkerProcesses
from turnaudit.consumers.runtime.worker_process import (
    STATE_INTERVAL_S,
    LoggingContext,
    ServiceFactory,
    WorkerPlan,
    run_worker,
)
from turnaudit.files import private_dir

log = structlog.get_logger("turnaudit.workers")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
RESTART_BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
STABLE_AFTER_S = 60.0  # a worker up this long starts its back-off afresh when it dies


# -- in the supervisor -----------------------------------------------------------------


class WorkerSupervisor:
    """Starts N workers of one service, serves its HTTP, drains them all on a signal."""

    def __init__(
        self,
        settings: ServiceSettings,
        factory: ServiceFactory,
        count: int,
        *,
        registry: CollectorRegistry,
        logging_context: LoggingContext,
        log_level: str = "INFO",
        max_workers: int = 64,
    ) -> None:
        self.settings = settings
        self._factory = factory
        self._count = count
        self._max_workers = max_workers
        self._add_requests = 0
        self._retire_requests = 0
        self._retiring: set[int] = set()
        self._logging_context = logging_context
        self._log_level = log_level
        self._registry = registry
        self._stopping = threading.Event()
        self._processes: dict[int, BaseProcess] = {}
        self._started_at: dict[int, float] = {}
        self._deaths: dict[int, int] = {}  # consecutive early deaths, per worker
        self._due: dict[int, float] = {}  # restart time of a dead worker
        self._context = multiprocessing.get_context("spawn")
        self._run_dir = Path(tempfile.mkdtemp(prefix=f"turnaudit-{settings.service.value}-"))
        self.metrics_dir = self._run_dir / "metrics"
        self.state_dir = self._run_dir / "state"
        self.restarts = Counter(
            "turnaudit_worker_restarts",
            "Worker processes that died and were started again, by worker.",
            ["worker"],
            registry=registry,
        )
        self._workers_gauge = Gauge(
            "turnaudit_workers", "Worker processes the service runs.", registry=registry
        )
        self._workers_gauge.set(count)
        registry.register(WorkerProcesses(self.pids))
        self.health = WorkersHealth(
            {
                "service": settings.service.value,
                "group_id": settings.group_id,
                "topic": settings.kafka.topics.turn_events,
            },
            self.state_dir,
            pids=self.pids,
        )
        self._http: ServiceHttp | None = None

    # -- public ----------------------------------------------------------------------
    def pids(self) -> dict[int, int | None]:
        """Worker index -> pid of its running process (None while it is down)."""
        processes = list(self._processes.items())  # the HTTP thread asks while workers change
        return {i: (p.pid if p.is_alive() else None) for i, p in sorted(processes)}

    @property
    def http_port(self) -> int | None:
        return None if self._http is None else self._http.port

    def install_signal_handlers(self) -> None:
        def handle(signum: int, _frame: FrameType | None) -> None:
            log.info("workers_stopping", signal=signal.Signals(signum).name)
            self.stop()

        def more(_signum: int, _frame: FrameType | None) -> None:
            self._add_requests += 1

        def fewer(_signum: int, _frame: FrameType | None) -> None:
            self._retire_requests += 1

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
        signal.signal(signal.SIGTTIN, more)
        signal.signal(signal.SIGTTOU, fewer)

    def stop(self) -> None:
        self.health.stopping = True
        self._stopping.set()

    def run(self) -> int:
        """Until a signal (or ``stop()``): 0 when every worker drained cleanly."""
        self._prepare_dirs()
        # The workers' prometheus_client picks multiprocess mode at import:
        # the variable is in their environment from the start (spawn).
        previous = os.environ.get(MULTIPROC_ENV)
        os.environ[MULTIPROC_ENV] = str(self.metrics_dir)
        SettledMultiProcessCollector(  # type: ignore[no-untyped-call]  # prometheus_client's is untyped
            self._registry, path=str(self.metrics_dir)
        )
        try:
            self._http = ServiceHttp(
                self.settings.http_host, self.settings.http_port, self._registry, self.health
            )
            self._http.start()
            for index in range(self._count):
                self._start(index)
            self.health.running = True
            log.info(
                "workers_started",
                workers=self._count,
                pids=[p.pid for p in self._processes.values()],
                group_id=self.settings.group_id,
                http_port=self.http_port,
            )
            while not self._stopping.is_set():
                self._watch()
            return self._drain()
        finally:
            self.health.running = False
            if previous is None:
                os.environ.pop(MULTIPROC_ENV, None)
            else:
                os.environ[MULTIPROC_ENV] = previous
            if self._http is not None:
                self._http.close()
            shutil.rmtree(self._run_dir, ignore_errors=True)

    # -- workers ----------------------------------------------------------------------
    def _prepare_dirs(self) -> None:
        for folder in (self.metrics_dir, self.state_dir):
            shutil.rmtree(folder, ignore_errors=True)  # fresh for this run
            private_dir(folder)

    def _start(self, index: int) -> None:
        plan = WorkerPlan(index, True, str(self.state_dir), self._log_level, str(self.metrics_dir))
        process = self._context.Process(
            target=run_worker,
            args=(self._factory, plan, self._logging_context),
            name=f"{self.settings.service.value}-worker-{index}",
        )
        process.start()
        self._processes[index] = process
        self._started_at[index] = time.monotonic()
        self._due.pop(index, None)

    def _resize(self) -> None:
        """SIGTTIN / SIGTTOU since the last look: one worker more, or one fewer."""
        while self._add_requests > 0:
            self._add_requests -= 1
            index = max(self._processes, default=-1) + 1
            if index >= self._max_workers:
                log.warning(
                    "worker_not_added", workers=len(self._processes), limit=self._max_workers
                )
                continue
            self._start(index)
            log.info("worker_added", worker=index, pid=self._processes[index].pid)
        while self._retire_requests > 0:
            self._retire_requests -= 1
            candidates = [i for i in self._processes if i not in self._retiring]
            if len(candidates) <= 1:
                log.warning("worker_not_retired", reason="the last worker stays")
                continue
            index = max(candidates)
            self._retiring.add(index)
            process = self._processes[index]
            if index in self._due or process.pid is None or not process.is_alive():
                self._forget_worker(index)
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)  # drains like a stop
            log.info("worker_retiring", worker=index, pid=process.pid)
        self._workers_gauge.set(len(self._processes) - len(self._retiring))

    def _forget_worker(self, index: int) -> None:
        self._processes.pop(index, None)
        self._due.pop(index, None)
        self._retiring.discard(index)
        self.health.worker_exited(index, "retired")

    def _watch(self) -> None:
        """Wait for a worker to exit (or a second), report and schedule its restart."""
        alive = [p.sentinel for i, p in self._processes.items() if i not in self._due]
        wait_for_sentinels(alive, timeout=STATE_INTERVAL_S)
        self._resize()
        now = time.monotonic()
        for index, process in list(self._processes.items()):
            if index in self._retiring:
                if not process.is_alive():
                    self._reap(index, process)
                    self._forget_worker(index)
                    log.info(
                        "worker_retired",
                        worker=index,
                        pid=process.pid,
                        exit=_describe_exit(process.exitcode),
                    )
                continue
            if index in self._due:
                if now >= self._due[index] and not self._stopping.is_set():
                    self.restarts.labels(str(index)).inc()
                    self._start(index)
                    log.warning("worker_restarted", worker=index, pid=self._processes[index].pid)
                continue
            if process.is_alive() or self._stopping.is_set():
                continue
            self._reap(index, process)
            up_for = now - self._started_at[index]
            deaths = 0 if up_for >= STABLE_AFTER_S else self._deaths.get(index, 0) + 1
            self._deaths[index] = deaths
            delay = (
                0.0
                if deaths == 0
                else RESTART_BACKOFF_S[min(deaths - 1, len(RESTART_BACKOFF_S) - 1)]
            )
            self._due[index] = now + delay
            log.error(
                "worker_exited",
                worker=index,
                pid=process.pid,
                exit=_describe_exit(process.exitcode),
                up_for_s=round(up_for, 1),
                restart_in_s=delay,
            )

    def _reap(self, index: int, process: BaseProcess) -> None:
        process.join(0)
        if process.pid is not None:
            # Its live gauges leave the sums; its counters stay counted.
            mark_process_dead(  # type: ignore[no-untyped-call]  # prometheus_client's is untyped
                process.pid, str(self.metrics_dir)
            )
        self.health.worker_exited(index, _describe_exit(process.exitcode))

    def _drain(self) -> int:
        """SIGTERM to every worker; each finishes its batch, commits, leaves, closes."""
        running = {i: p for i, p in self._processes.items() if i not in self._due}
        for process in running.values():
            if process.pid is not None and process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.drain_timeout_s + 15.0
        clean = True
        for index, process in running.items():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.error("worker_not_drained", worker=index, pid=process.pid)
                process.kill()
                process.join(5)
            if process.exitcode != 0:
                clean = False
                log.error(
                    "worker_stopped_badly", worker=index, exit=_describe_exit(process.exitcode)
                )
            self._reap(index, process)
        log.info("workers_stopped", clean=clean)
        return 0 if clean else 1


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"
