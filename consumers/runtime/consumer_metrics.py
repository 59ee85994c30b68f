"""What every service exports about its consumption (labels from closed sets)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from turnaudit.contracts import Contract
from turnaudit.dead_letters import DeadLetterOutcome, DeadLetterReason
from turnaudit.identity import StreamTracker, TurnOutcome
from turnaudit.label_bounds import DEFAULT_LABEL_LIMIT, OTHER, BoundedLabelSet
from turnaudit.telemetry import CONTRACT_BREACHES_TOTAL, SEQUENCE_GAPS_TOTAL


class MessageOutcome(enum.StrEnum):
    ACCEPTED = "accepted"  # handed to the sink
    REDRIVEN = "redriven"  # handed to the sink, written back from the dead-letter topic
    DEAD_LETTERED = "dead_lettered"


class ConsumerMetrics:
    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        packs: frozenset[str] = frozenset(),
        pack_limit: int = DEFAULT_LABEL_LIMIT,
    ) -> None:
        # The pack label of the breach counter: bounded like every pack label
        # (the verdict-metrics sink's allow-list and limit).
        self._packs = BoundedLabelSet("pack", allowed=packs, limit=pack_limit)
        self._breach_children: dict[tuple[str, str], Any] = {}
        self._breach_packs: set[str] = set()  # pack labels whose series exist
        self.messages = Counter(
            "turnaudit_consumer_messages",
            "Messages consumed, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "turnaudit_dead_letters",
            "Messages sent to the dead-letter topic, by reason.",
            ["reason"],
            registry=registry,
        )
        self.contract_breaches = Counter(
            CONTRACT_BREACHES_TOTAL,
            "Breaching turns (PIPELINE.md contracts 1-7; found here or recorded by the "
            "producer), by pack and contract; the turn itself is counted like any other.",
            ["pack", "contract"],
            registry=registry,
        )
        self.sequence_gaps = Counter(
            SEQUENCE_GAPS_TOTAL,
            "Sessions whose sequence numbers skipped (turns missing).",
            registry=registry,
        )
        self.missing_turns = Counter(
            "turnaudit_sequence_missing_turns",
            "Sequence numbers skipped by gaps.",
            registry=registry,
        )
        self.redelivered = Counter(
            "turnaudit_redelivered_turns",
            "Events whose event id was already seen (a redelivery or a duplicate copy).",
            registry=registry,
        )
        # Turn identity (turnaudit.identity): what each message was for its ordered stream.
        # New turns and the missing figure are read from the tracker at scrape time:
        # nothing to update per message.
        self.new_turns = _TrackerCount(
            "turnaudit_new_turns",
            "Turns seen for the first time (by event id), late arrivals included.",
        )
        registry.register(self.new_turns)
        self.forgotten_event_ids = _TrackerCount(
            "turnaudit_stream_forgotten_event_ids",
            "Event ids dropped from the dedupe memory by its bound (TURNAUDIT_MAX_EVENT_IDS); "
            "a redelivery older than the remembered ids is no longer told from a new turn "
            "by its id.",
        )
        registry.register(self.forgotten_event_ids)
        self.registry_retries = _TrackerCount(
            "turnaudit_schema_registry_retries",
            "Schema-id lookups retried after a transient Schema Registry error (connection "
            "refused, timeout, 408/429/5xx), before a message would be dead-lettered as "
            "unknown_schema.",
        )
        registry.register(self.registry_retries)
        self.gaps_closed = Counter(
            "turnaudit_stream_gaps_closed",
            "Missing positions filled by a late arrival.",
            registry=registry,
        )
        self.currently_missing = Gauge(
            "turnaudit_stream_missing_turns",
            "Positions of ordered streams skipped and not (yet) arrived.",
            registry=registry,
            multiprocess_mode="livesum",  # --workers: each worker's streams, added
        )
        self.chain_breaks = Counter(
            "turnaudit_chain_breaks",
            "Hash-chain breaks, event ids with other content and reused positions, by kind.",
            ["kind"],
            registry=registry,
        )
        self.key_mismatches = Counter(
            "turnaudit_key_mismatches",
            "Messages whose Kafka key is not their session id (dead-lettered).",
            registry=registry,
        )
        self.dead_letters_truncated = Counter(
            "turnaudit_dead_letters_truncated",
            "Dead letters written truncated: the original with headers did not fit "
            "(the original's size and position are in the dead letter's headers).",
            registry=registry,
        )
        self.dead_letter_failures = Counter(
            "turnaudit_dead_letter_failures",
            "Dead letters the broker refused for good, even truncated "
            "(the original message is named in the log).",
            registry=registry,
        )
        self.sink_failures = Counter(
            "turnaudit_sink_failures",
            "Batches the sink could not take (retried).",
            registry=registry,
        )
        self.client_errors = Counter(
            "turnaudit_kafka_client_errors",
            "Errors reported by the Kafka client (connection failures included).",
            registry=registry,
        )
        self.lag = Gauge(
            "turnaudit_consumer_lag",
            "Messages behind the partition's end (stored offset).",
            ["topic", "partition"],
            registry=registry,
            multiprocess_mode="livemostrecent",  # --workers: the partition's current owner
        )
        self.ready = Gauge(
            "turnaudit_consumer_ready",
            "1 while the service is ready (partitions held, broker reachable).",
            registry=registry,
            multiprocess_mode="livemax",  # --workers: some worker is ready
        )
        # Every closed-set label value exists from the start at 0, so rate()
        # and increase() see the first event of each kind.
        for outcome in MessageOutcome:
            self.messages.labels(outcome.value)
        for reason in DeadLetterReason:
            self.dead_letters.labels(reason.value)
        for kind in CHAIN_BREAK_KINDS:
            self.chain_breaks.labels(kind)

    def breach(self, pack_id: str, contract: str) -> None:
        """One breach of ``contract`` (a ``Contract`` value, else ``other``) by a turn of a pack."""
        key = (pack_id, contract)
        child = self._breach_children.get(key)
        if child is None:
            pack = self._packs(pack_id)
            if len(self._breach_children) > 10_000:  # raw ids flooding in: start over
                self._breach_children.clear()
            if pack not in self._breach_packs:
                self._breach_packs.add(pack)
                # A pack's series all exist from its first breach on, at 0, so
                # increase() sees the next breach of any other contract.
                for known in Contract:
                    self.contract_breaches.labels(pack, known.value)
            name = contract if contract in _CONTRACTS else OTHER
            child = self._breach_children[key] = self.contract_breaches.labels(pack, name)
        child.inc()

    def watch(self, tracker: StreamTracker) -> None:
        """Export the figures the stream tracker keeps itself."""
        self.new_turns.source = lambda: tracker.new_turns
        self.forgotten_event_ids.source = lambda: tracker.forgotten_event_ids
        self.currently_missing.set_function(lambda: tracker.currently_missing)

    def dead_letter_settled(self, outcome: DeadLetterOutcome) -> None:
        if outcome.truncated:
            self.dead_letters_truncated.inc()
        if outcome.failed:
            self.dead_letter_failures.inc()


class _TrackerCount(Collector):
    """A counter whose value an object of the service keeps (read at scrape time)."""

    def __init__(self, name: str, documentation: str) -> None:
        self._name = name
        self._documentation = documentation
        self.source: Callable[[], int] = lambda: 0

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self._name, self._documentation, value=self.source())


_CONTRACTS = frozenset(c.value for c in Contract)
CHAIN_BREAK_KINDS = ("chain", TurnOutcome.CONTENT_CHANGED.value, TurnOutcome.POSITION_REUSED.value)
