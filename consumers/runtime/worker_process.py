"""A worker process of a multi-worker service (``workers``): what it is told
(``WorkerPlan``), its own settings and files, and its main, which builds the service,
runs it and writes its state every second for the supervisor's health endpoints; a
worker whose supervisor is gone drains on its own."""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry

from turnaudit.consumers.runtime.health import WORKER_STATE_SUFFIX, ServiceHealth
from turnaudit.consumers.runtime.loop import ConsumerService
from turnaudit.consumers.runtime.settings import ServiceSettings
from turnaudit.consumers.runtime.worker_metrics import MirroringRegistry
from turnaudit.files import write_private

log = structlog.get_logger("turnaudit.workers")

STATE_INTERVAL_S = 1.0  # how often a worker writes its state and mirrors its callback figures


@dataclass(frozen=True)
class WorkerPlan:
    """What a worker process is told (picklable: it crosses ``spawn``)."""

    index: int
    supervised: bool  # one of a supervisor's workers (False: the service alone in its process)
    state_dir: str
    log_level: str
    metrics_dir: str = ""


# Builds worker ``plan.index``'s service in the worker process: a module-level
# function (``spawn`` pickles it by name), reading its settings from the
# environment like any entry point and passing them through ``worker_settings``.
ServiceFactory = Callable[[WorkerPlan, CollectorRegistry], ConsumerService]
LoggingContext = Callable[[str], AbstractContextManager[None]]


def per_worker_path(path: Path, index: int) -> Path:
    """Worker ``index``'s own file beside ``path``: ``<stem>.worker-<index><suffix>``."""
    return path.with_name(f"{path.stem}.worker-{index}{path.suffix}")


def worker_settings(settings: ServiceSettings, plan: WorkerPlan) -> ServiceSettings:
    """Worker ``plan.index``'s settings: its own member name, its own log file."""
    if not plan.supervised:
        return settings
    instance = settings.group_instance_id
    log_file = settings.log.file
    if log_file is not None:
        # One file per worker: rotation is not safe with several writers.
        log_file = per_worker_path(log_file, plan.index)
    return replace(
        settings,
        group_instance_id=f"{instance}-w{plan.index}" if instance else None,
        log=replace(settings.log, file=log_file),
    )


# -- in the worker process -----------------------------------------------------------


def run_worker(factory: ServiceFactory, plan: WorkerPlan, logging_context: LoggingContext) -> None:
    """A worker process's main: build the service, report its state, run it."""
    structlog.contextvars.bind_contextvars(worker=plan.index)
    # The runtime drops a revoked partition's lag series; the multiprocess files
    # cannot, and prometheus-client warns each time. The lag gauge is
    # "livemostrecent": the partition's new owner's figure is the one shown.
    warnings.filterwarnings(
        "ignore", message="Removal of labels has not been implemented", category=UserWarning
    )
    with logging_context(plan.log_level):
        registry = MirroringRegistry()
        try:
            service = factory(plan, registry)
        except Exception as exc:  # one line, like the CLI; the supervisor reports the exit
            log.error("worker_failed_to_start", error=str(exc) or repr(exc))
            raise SystemExit(1) from None
        service.install_signal_handlers()
        reporter = _StateReporter(
            service.health, registry, Path(plan.state_dir), plan.index, on_orphaned=service.stop
        )
        reporter.start()
        try:
            service.run()
        finally:
            reporter.stop()


class _StateReporter:
    """Every second: the worker's health into its state file, callback figures mirrored."""

    def __init__(
        self,
        health: ServiceHealth,
        registry: MirroringRegistry,
        state_dir: Path,
        index: int,
        *,
        on_orphaned: Callable[[], None],
    ) -> None:
        self._parent = os.getppid()
        self._on_orphaned = on_orphaned
        self._health = health
        self._registry = registry
        self._path = state_dir / f"worker-{index}{WORKER_STATE_SUFFIX}"
        self._index = index
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="turnaudit-state", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)
        self.report()

    def _loop(self) -> None:
        while not self._done.wait(STATE_INTERVAL_S):
            if os.getppid() != self._parent:
                # The supervisor is gone (killed): no one would stop this worker.
                log.error("worker_orphaned", supervisor_pid=self._parent)
                self._on_orphaned()  # drains like SIGTERM
                return
            try:
                self.report()
            except Exception as exc:  # a full disk must not stop the worker
                log.warning("worker_state_not_written", error=repr(exc))

    def report(self) -> None:
        self._registry.mirror()
        live, ready = self._health.liveness(), self._health.readiness()
        state = {
            "index": self._index,
            "pid": os.getpid(),
            "written_at": time.time(),
            "live": live.ok,
            "ready": ready.ok,
            "running": self._health.running,
            "readiness": ready.body,
        }
        write_private(self._path, json.dumps(state).encode(), durable=False)  # a live status
