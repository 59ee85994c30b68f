"""Metrics of a service run as worker processes.

Callback figures a worker reads at scrape time (custom collectors, gauges
with ``set_function``) do not reach prometheus-client's multiprocess files by
themselves; ``MirroringRegistry`` copies them into file-backed metrics every
second. ``_WorkerProcesses`` is the supervisor's view of its workers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector


class MirroringRegistry(CollectorRegistry):
    """A worker's registry: callback figures copied into the multiprocess files.

    Counters and histograms made with ``registry=`` write their files
    themselves; a custom collector or a ``set_function`` gauge exists only in
    this process, so ``mirror()`` copies its samples into file-backed metrics
    of the same name (counters by their increase, gauges summed over the
    live workers).
    """

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Collector] = []
        self._counters: dict[str, tuple[Counter, dict[tuple[str, ...], float]]] = {}
        self._gauges: dict[str, Gauge] = {}
        self._lock = threading.Lock()

    def register(self, collector: Collector) -> None:
        super().register(collector)
        with self._lock:
            self._callbacks.append(collector)

    def mirror(self) -> None:
        with self._lock:
            collectors = [c for c in self._callbacks if _reads_at_scrape_time(c)]
        for collector in collectors:
            for family in collector.collect():
                if family.type == "counter":
                    self._mirror_counter(family)
                elif family.type == "gauge":
                    self._mirror_gauge(family)

    def _mirror_counter(self, family: Any) -> None:
        samples = [s for s in family.samples if s.name.endswith("_total")]
        if not samples:
            return
        labels = sorted(samples[0].labels)
        entry = self._counters.get(family.name)
        if entry is None:
            entry = self._counters[family.name] = (
                Counter(family.name, family.documentation, labels, registry=None),
                {},
            )
        counter, last = entry
        for sample in samples:
            values = tuple(sample.labels[k] for k in labels)
            increase = sample.value - last.get(values, 0.0)
            if increase > 0:
                (counter.labels(*values) if labels else counter).inc(increase)
                last[values] = sample.value

    def _mirror_gauge(self, family: Any) -> None:
        if not family.samples:
            return
        labels = sorted(family.samples[0].labels)
        gauge = self._gauges.get(family.name)
        if gauge is None:
            gauge = self._gauges[family.name] = Gauge(
                family.name,
                family.documentation,
                labels,
                registry=None,
                multiprocess_mode="livesum",
            )
        for sample in family.samples:
            values = tuple(sample.labels[k] for k in labels)
            (gauge.labels(*values) if labels else gauge).set(sample.value)


def _reads_at_scrape_time(collector: Collector) -> bool:
    if not isinstance(collector, MetricWrapperBase):
        return True  # a custom collector
    # Gauge.set_function replaces the instance's _child_samples (prometheus_client).
    return "_child_samples" in vars(collector)


_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")


class WorkerProcesses(Collector):
    """Each worker's resident memory and CPU time, read from /proc at scrape time."""

    def __init__(self, pids: Callable[[], Mapping[int, int | None]]) -> None:
        self._pids = pids  # worker index -> pid (None while it is not running)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        memory = GaugeMetricFamily(
            "turnaudit_worker_resident_memory_bytes",
            "Resident memory of each worker process.",
            labels=["worker"],
        )
        cpu = CounterMetricFamily(
            "turnaudit_worker_cpu_seconds",
            "CPU time (user and system) of each worker process since it started.",
            labels=["worker"],
        )
        for index, pid in self._pids().items():
            figures = process_figures(pid) if pid is not None else None
            if figures is not None:
                memory.add_metric([str(index)], figures[0])
                cpu.add_metric([str(index)], figures[1])
        yield memory
        yield cpu


def process_figures(pid: int) -> tuple[float, float] | None:
    """(resident bytes, CPU seconds) of a process, or None once it is gone."""
    try:
        resident = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
        # Fields after the command name (which may hold spaces): utime, stime are 14, 15.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError, ValueError):
        return None
    return float(resident), (int(fields[11]) + int(fields[12])) / _TICKS
