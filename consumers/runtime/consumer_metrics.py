"""What every service exports about its consumption (labels from closed sets)."""

from __future__ import annotations

import enum

from prometheus_client import CollectorRegistry, Counter, Gauge

from turnaudit.contracts import Contract
from turnaudit.kafka.dead_letters import DeadLetterOutcome, DeadLetterReason


class MessageOutcome(enum.StrEnum):
    ACCEPTED = "accepted"  # handed to the sink
    DEAD_LETTERED = "dead_lettered"


class ConsumerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
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
            "turnaudit_contract_breaches",
            "Contract breaches found (PIPELINE.md 1-5), by contract.",
            ["contract"],
            registry=registry,
        )
        self.sequence_gaps = Counter(
            "turnaudit_sequence_gaps",
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
            "Events whose sequence number was already seen (at-least-once redelivery).",
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
        )
        self.ready = Gauge(
            "turnaudit_consumer_ready",
            "1 while the service is ready (partitions held, broker reachable).",
            registry=registry,
        )
        # Every closed-set label value exists from the start at 0, so rate()
        # and increase() see the first event of each kind.
        for outcome in MessageOutcome:
            self.messages.labels(outcome.value)
        for reason in DeadLetterReason:
            self.dead_letters.labels(reason.value)
        for contract in Contract:
            self.contract_breaches.labels(contract.value)

    def dead_letter_settled(self, outcome: DeadLetterOutcome) -> None:
        if outcome.truncated:
            self.dead_letters_truncated.inc()
        if outcome.failed:
            self.dead_letter_failures.inc()
