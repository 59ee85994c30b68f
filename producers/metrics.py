"""The publisher's Prometheus metrics, on the runtime's own registry.

Counts are read from the publisher's ``stats()`` when Prometheus scrapes, so
the metrics always add up exactly like ``stats()`` does and ``publish()`` pays
nothing for them. Delivery latency is observed on the publisher's own thread,
from librdkafka's delivery reports. No label but ``reason`` (a closed set).
``BreachMetrics`` is the emitter's: breaching turns by pack (bounded) and contract.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from turnaudit.contracts import Contract
from turnaudit.label_bounds import BoundedLabelSet

if TYPE_CHECKING:
    from prometheus_client import Metric

    from turnaudit.producers.accounting import PublisherStats

PREFIX = "turnaudit_publisher"
REFUSAL_REASONS = ("spool_full", "disk_error")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0)


class StatsSource(Protocol):
    def stats(self) -> PublisherStats: ...

    @property
    def spooled_total(self) -> int: ...

    def refused_by_reason(self) -> Mapping[str, int]: ...

    def checkpoint_counts(self) -> tuple[int, int, int]: ...


class PublisherMetrics(Collector):
    """Registered on ``registry`` when given (``None``: kept unregistered)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self._source: StatsSource | None = None
        self.delivery_latency = LatencyHistogram(LATENCY_BUCKETS)
        if registry is not None:
            registry.register(self)

    def attach(self, source: StatsSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        source = self._source
        stats = source.stats() if source is not None else None
        refused = source.refused_by_reason() if source is not None else {}

        def counter(name: str, doc: str, value: int) -> CounterMetricFamily:
            return CounterMetricFamily(f"{PREFIX}_{name}", doc, value=value)

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)

        yield counter(
            "events_published",
            "Events publish() gave an id and sequence number",
            stats.published if stats else 0,
        )
        yield counter(
            "events_delivered", "Events the broker acknowledged", stats.delivered if stats else 0
        )
        yield counter(
            "events_spooled",
            "Events that went to the on-disk spool",
            source.spooled_total if source is not None else 0,
        )
        yield counter(
            "events_failed",
            "Events the broker refused for good (kept in rejected/)",
            stats.failed if stats else 0,
        )
        yield counter(
            "events_rejected",
            "Events the runtime sent to the dead-letter topic (contract breaches)",
            stats.dead_lettered if stats else 0,
        )
        family = CounterMetricFamily(
            f"{PREFIX}_events_refused",
            "Events publish() refused: neither sent nor spooled",
            labels=["reason"],
        )
        for reason in REFUSAL_REASONS:
            family.add_metric([reason], refused.get(reason, 0))
        yield family
        yield counter(
            "worker_errors",
            "Unexpected errors the background thread survived",
            stats.worker_errors if stats else 0,
        )
        yield gauge(
            "events_in_flight",
            "Events in librdkafka's queue, not yet acknowledged",
            stats.in_flight if stats else 0,
        )
        yield gauge(
            "spool_events", "Events waiting in the on-disk spool", stats.spooled if stats else 0
        )
        yield gauge(
            "spool_bytes", "Bytes held by the on-disk spool", stats.spool_bytes if stats else 0
        )
        yield gauge(
            "spool_oldest_event_age_seconds",
            "Age of the oldest event in the spool (0 when empty)",
            stats.oldest_spooled_age_s if stats else 0.0,
        )
        # Signed checkpoints (all 0 without a signing key): written, failed attempts, waiting.
        written, failures, unsent = source.checkpoint_counts() if source is not None else (0, 0, 0)
        yield counter("checkpoints_written", "Signed checkpoints the broker acknowledged", written)
        yield counter(
            "checkpoint_failures",
            "Signed checkpoints the producer refused or the broker did not take "
            "(each is sent again)",
            failures,
        )
        yield gauge("checkpoints_unsent", "Signed checkpoints waiting to be acknowledged", unsent)
        yield self.delivery_latency.family(
            f"{PREFIX}_delivery_latency_seconds",
            "Time from publish() to the broker's acknowledgement, per event",
        )


class LatencyHistogram:
    """Bucket counts kept by one writer (the thread serving delivery reports):
    no lock on the path that runs once per event; a scrape reads a snapshot."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect.bisect_left(self._bounds, seconds)] += 1
        self._sum += seconds

    def family(self, name: str, doc: str) -> HistogramMetricFamily:
        counts, total = list(self._counts), self._sum
        cumulative, buckets = 0, []
        for bound, count in zip((*map(str, self._bounds), "+Inf"), counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)


class BreachMetrics:
    """Breaching turns the runtime built, per pack and contract (``turnaudit_publisher_
    breaches_total``): the runtime's own view, before any consumer reads the turn.

    Both labels are bounded: ``contract`` is a closed set, ``pack`` names the
    first ``max_packs`` packs seen and calls the rest ``other``.
    """

    def __init__(self, registry: CollectorRegistry | None, *, max_packs: int) -> None:
        self._packs = BoundedLabelSet("pack", limit=max_packs)
        self.breaches = Counter(
            f"{PREFIX}_breaches",
            "Turns the runtime built that broke a pipeline contract, by pack and contract "
            "(published with their breaches; v1-v3 events go to the dead-letter topic)",
            ["pack", "contract"],
            registry=registry,
        )

    def count(self, pack_id: str, contracts: Iterable[Contract]) -> None:
        pack = self._packs(pack_id)
        for contract in dict.fromkeys(contracts):
            self.breaches.labels(pack, contract.value).inc()
