"""Validation: decode, check the contracts, track the streams.

A validation turns a message's bytes into a ``ConsumedTurn`` or a
``Rejection``. Nothing a message holds can make it raise: whatever goes
wrong, the message is rejected with a typed reason and the error.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import structlog

from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics
from turnaudit.consumers.runtime.sink import IN_ORDER, ConsumedTurn, Rejection
from turnaudit.contracts import (
    Contract,
    SequenceCheck,
    SequenceOutcome,
    SessionSequenceTracker,
    check_event,
)
from turnaudit.errors import SchemaNotFoundError, SerializationError, UnknownFramingError
from turnaudit.htir import HtirTrace
from turnaudit.kafka.dead_letters import DeadLetterReason
from turnaudit.serialization.wire import (
    DecodedTurnEvent,
    TurnEventDeserializer,
    UnusableSchemaError,
)

log = structlog.get_logger("turnaudit.consumer")

Decoder = Callable[[bytes | None], DecodedTurnEvent]

# Most specific first: the first match names the reason.
_DECODE_FAILURES: tuple[tuple[type[SerializationError], DeadLetterReason], ...] = (
    (UnknownFramingError, DeadLetterReason.UNKNOWN_FRAMING),
    (SchemaNotFoundError, DeadLetterReason.UNKNOWN_SCHEMA),
    (UnusableSchemaError, DeadLetterReason.UNUSABLE_SCHEMA),
    (SerializationError, DeadLetterReason.UNDECODABLE),
)


def contract_reason(contract: Contract) -> DeadLetterReason:
    return DeadLetterReason(f"contract:{contract.value}")


def decode_failure(exc: SerializationError) -> Rejection:
    reason = next(r for kind, r in _DECODE_FAILURES if isinstance(exc, kind))
    return Rejection(reason, str(exc))


class Validation(abc.ABC):
    """How a service turns messages of its topic into turns for its sink."""

    @abc.abstractmethod
    def examine(
        self, value: bytes | None, topic: str, partition: int, offset: int
    ) -> ConsumedTurn | Rejection: ...

    def forget_partitions(self, partitions: set[int]) -> None:  # noqa: B027 - optional state
        """Partitions moved to another member: drop what was tracked for them."""


class StreamTracking:
    """Contract 5, behind one call: what the runtime knows of each stream's order.

    The one place the runtime touches the per-session sequence tracker, so a
    different stream tracker can replace it here alone.
    """

    def __init__(self, max_sessions: int) -> None:
        self._sequences = SessionSequenceTracker(max_sessions)

    def observe(self, event: dict[str, Any], partition: int) -> SequenceCheck:
        return self._sequences.observe(event["session_id"], int(event["sequence"]), partition)

    def forget_partitions(self, partitions: set[int]) -> None:
        self._sequences.forget_partitions(partitions)


class TurnEventValidation(Validation):
    """TurnEvents: decode (either framing, any version), contracts 1-4, stream order."""

    def __init__(
        self, decode: TurnEventDeserializer | Decoder, metrics: ConsumerMetrics, max_sessions: int
    ) -> None:
        self._decode = decode
        self._metrics = metrics
        self._streams = StreamTracking(max_sessions)

    def examine(
        self, value: bytes | None, topic: str, partition: int, offset: int
    ) -> ConsumedTurn | Rejection:
        try:
            decoded = self._decode(value)
        except SerializationError as exc:
            return decode_failure(exc)
        except Exception as exc:  # a decoder bug must not stop the service either
            return Rejection(DeadLetterReason.UNDECODABLE, f"decoder failed: {exc!r}")
        event = decoded.event
        try:
            sequence = self._streams.observe(event, partition)
            breaches = check_event(event)
        except Exception as exc:
            # Decodable but not shaped like a TurnEvent (a foreign schema gone wrong).
            return Rejection(DeadLetterReason.UNDECODABLE, f"not a TurnEvent: {exc!r}")
        if sequence.outcome is not SequenceOutcome.IN_ORDER:
            self._count_sequence(sequence, event, topic, partition, offset)
        if breaches:
            for breach in breaches:
                self._metrics.contract_breaches.labels(breach.contract.value).inc()
            text = tuple(map(str, breaches))
            rejection = Rejection(
                contract_reason(breaches[0].contract), "; ".join(text), event.get("event_id")
            )
            return ConsumedTurn(decoded, sequence, topic, partition, offset, text, rejection)
        return ConsumedTurn(decoded, sequence, topic, partition, offset)

    def _count_sequence(
        self,
        sequence: SequenceCheck,
        event: dict[str, Any],
        topic: str,
        partition: int,
        offset: int,
    ) -> None:
        if sequence.outcome is SequenceOutcome.GAP:
            self._metrics.sequence_gaps.inc()
            self._metrics.missing_turns.inc(sequence.missing)
            self._metrics.contract_breaches.labels(Contract.SEQUENCE.value).inc()
            log.warning(
                "turn_sequence_gap",
                session_id=event["session_id"],
                sequence=event["sequence"],
                missing=sequence.missing,
                topic=topic,
                partition=partition,
                offset=offset,
            )
        elif sequence.outcome is SequenceOutcome.DUPLICATE:
            self._metrics.redelivered.inc()

    def forget_partitions(self, partitions: set[int]) -> None:
        # Sessions of a partition that moves on are tracked afresh on return.
        self._streams.forget_partitions(partitions)


class HtirTraceValidation(Validation):
    """HTIR traces: decode any shipped version; the record must make an ``HtirTrace``."""

    def __init__(self, decode: TurnEventDeserializer | Decoder) -> None:
        self._decode = decode

    def examine(
        self, value: bytes | None, topic: str, partition: int, offset: int
    ) -> ConsumedTurn | Rejection:
        try:
            decoded = self._decode(value)
        except SerializationError as exc:
            return decode_failure(exc)
        except Exception as exc:  # a decoder bug must not stop the service either
            return Rejection(DeadLetterReason.UNDECODABLE, f"decoder failed: {exc!r}")
        try:
            HtirTrace.from_avro(decoded.event)
        except Exception as exc:
            return Rejection(DeadLetterReason.UNDECODABLE, f"not an HTIR trace: {exc!r}")
        return ConsumedTurn(decoded, IN_ORDER, topic, partition, offset)
