"""Validation: decode, check the contracts, track the ordered streams.

A validation turns a message's bytes into a ``ConsumedTurn`` or a
``Rejection``. Nothing a message holds can make it raise: whatever goes
wrong, the message is rejected with a typed reason and the error.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence

import structlog

from turnaudit._native import ConsumeStep, reserve_event_ids
from turnaudit.consumers.runtime.consumer_metrics import CHAIN_BREAK_KINDS, ConsumerMetrics
from turnaudit.consumers.runtime.handover import HandedBatch
from turnaudit.consumers.runtime.native_batch import NativeBatch, not_a_turn, step_outlet
from turnaudit.consumers.runtime.sink import IN_ORDER, ConsumedTurn, Rejection, Sink
from turnaudit.contracts import CONTRACT_RULE, Breach, Contract, check_key, identity_breach
from turnaudit.dead_letters import DeadLetterReason
from turnaudit.errors import SchemaNotFoundError, SerializationError, UnknownFramingError
from turnaudit.htir import HtirTrace
from turnaudit.identity import StreamTracker, TrackResult, TurnOutcome
from turnaudit.records import Record
from turnaudit.serialization.wire import (
    DecodedTurnEvent,
    Framing,
    TurnEventDeserializer,
    UnusableSchemaError,
)

log = structlog.get_logger("turnaudit.consumer")

_tuple_new = tuple.__new__
_NEW = TurnOutcome.NEW  # a module constant: the enum's class attribute costs a lookup per message
_CONFLUENT = Framing.CONFLUENT
# Contracts 1-4: the rule ``check_event`` calls, called without that wrapper's frame.
_check_event = CONTRACT_RULE

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


def breach_texts(found: Sequence[Breach], recorded: Sequence[str]) -> tuple[str, ...]:
    """A turn's breaches as ``contract: detail``: the consumer's own findings,
    then what the producer recorded that the consumer did not find itself."""
    texts = [str(b) for b in found]
    seen = {b.contract.value for b in found}
    for name in recorded:
        if name not in seen:
            seen.add(name)
            texts.append(f"{name}: recorded by the producer")
    return tuple(texts)


def decode_failure(exc: SerializationError) -> Rejection:
    reason = next(r for kind, r in _DECODE_FAILURES if isinstance(exc, kind))
    return Rejection(reason, str(exc))


def decode_message(
    decode: TurnEventDeserializer | Decoder, value: bytes | None
) -> DecodedTurnEvent | Rejection:
    """The message decoded, or why it does not decode (nothing escapes)."""
    try:
        return decode(value)
    except Exception as exc:
        return decode_rejection(exc)


def decode_rejection(exc: Exception) -> Rejection:
    """Why a message did not decode, from what its decoder raised."""
    if isinstance(exc, SerializationError):
        return decode_failure(exc)
    # A decoder bug must not stop the service either.
    return Rejection(DeadLetterReason.UNDECODABLE, f"decoder failed: {exc!r}")


class Validation(abc.ABC):
    """How a service turns messages of its topic into turns for its sink."""

    @abc.abstractmethod
    def examine(
        self, value: bytes | None, key: bytes | None, topic: str, partition: int, offset: int
    ) -> ConsumedTurn | Rejection: ...

    def forget_partitions(self, partitions: set[int]) -> None:  # noqa: B027 - optional state
        """Partitions moved to another member: drop what was tracked for them."""

    def examine_batch(self, records: Sequence[Record]) -> HandedBatch | None:
        """A whole batch at once, for a service whose sink takes nothing turn by turn
        (the follower's: its batch goes through verify's native step); None: record by
        record, through ``examine``, as every other service."""
        return None

    def deliver_to(self, sink: Sink, reject: Callable[[Record, Rejection], None]) -> None:  # noqa: B027
        """The service's sink and dead-letter path, given once before the first batch:
        a validation that hands whole batches over itself (``examine_batch``) keeps
        them; the others need neither."""


class StreamTracking:
    """Contracts 5 and 7, behind one call: the stream tracker (``turnaudit.identity``).

    Dedupe by event id, gaps and late arrivals per ordered stream (session,
    producer), the hash chain; the one place the runtime touches the tracker.
    """

    def __init__(
        self,
        max_streams: int,
        metrics: ConsumerMetrics,
        max_event_ids: int = 500_000,
        *,
        start_gaps: bool = True,
    ) -> None:
        self._tracker = StreamTracker(
            max_streams=max_streams, max_event_ids=max_event_ids, start_gaps=start_gaps
        )
        # Its event-id table sized to the bound now: grown by doubling, it would rehash
        # every id held inside one observe (a batch held 50-500 ms at 114,688 ids).
        reserve_event_ids(self._tracker)
        metrics.watch(self._tracker)
        self.tracker = self._tracker  # the native batch step places with it too
        # The tracker's own method: no call in between on the per-message path.
        self.observe: Callable[..., TrackResult] = self._tracker.observe

    def forget_partitions(self, partitions: set[int]) -> None:
        self._tracker.forget_partitions(partitions)


class TurnEventValidation(Validation):
    """TurnEvents: decode (either framing, any version), contracts 1-4, stream order."""

    def __init__(
        self,
        decode: TurnEventDeserializer | Decoder,
        metrics: ConsumerMetrics,
        max_sessions: int,
        max_event_ids: int = 500_000,
        *,
        start_gaps: bool = True,
    ) -> None:
        self._decode = decode
        # A Confluent id names no fingerprint: the chain hash binds the one of the schema
        # the id resolved to, which only the deserializer knows (a bare decoder: none).
        self._registry_fingerprint: Callable[[DecodedTurnEvent], bytes | None] = getattr(
            decode, "writer_fingerprint", lambda _: None
        )
        self._metrics = metrics
        self._streams = StreamTracking(max_sessions, metrics, max_event_ids, start_gaps=start_gaps)
        self._observe = self._streams.observe
        self._batch: NativeBatch | None = None  # given a tallying sink (``deliver_to``)

    def examine(
        self, value: bytes | None, key: bytes | None, topic: str, partition: int, offset: int
    ) -> ConsumedTurn | Rejection:
        try:  # decode_message, inline: this runs once per message
            decoded = self._decode(value)
        except Exception as exc:
            return decode_rejection(exc)
        event = decoded.event
        try:
            if decoded.framing is _CONFLUENT:
                sequence = self._observe(
                    event,
                    value,
                    partition=partition,
                    offset=offset,
                    fingerprint=self._registry_fingerprint(decoded),
                )
            else:  # the single-object header names the fingerprint: the tracker reads it
                sequence = self._observe(event, value, partition=partition, offset=offset)
        except Exception as exc:
            # Decodable but not shaped like a TurnEvent (a foreign schema gone wrong).
            return not_a_turn(exc)
        return self.conclude(
            decoded, sequence, key, topic=topic, partition=partition, offset=offset
        )

    def conclude(
        self,
        decoded: DecodedTurnEvent,
        sequence: TrackResult,
        key: bytes | None,
        *,
        topic: str,
        partition: int,
        offset: int,
    ) -> ConsumedTurn | Rejection:
        """A decoded message the tracker placed: the key and contracts 1-4 checked, the
        tracker's verdict and the breaches counted and logged (the native batch step
        hands back here every message it placed but does not settle)."""
        event = decoded.event
        try:
            key_breach = check_key(key, event)
            breaches = _check_event(event)
        except Exception as exc:
            return not_a_turn(exc)
        if (
            sequence.outcome is not _NEW
            or sequence.missing_opened
            or (sequence.chain_break is not None or key_breach is not None)
        ):  # the common case (a new turn in order) is counted by the tracker itself
            self._count_identity(
                sequence, key_breach is not None, topic, partition, offset, pack_id=event["pack_id"]
            )
        if key_breach is not None:
            breaches.insert(0, key_breach)
        recorded = event.get("breaches")  # v4: what the producer's own check found
        if breaches or recorded:
            text = breach_texts(breaches, recorded or ())
            if sequence.counts_as_turn:  # a redelivery's breaches were counted with the turn
                pack = event["pack_id"]
                for contract in dict.fromkeys(t.partition(":")[0] for t in text):
                    self._metrics.breach(pack, contract)
                log.warning(
                    "turn_contract_breach",
                    event_id=event.get("event_id"),
                    session_id=event.get("session_id"),
                    pack_id=pack,
                    breaches=list(text),
                    topic=topic,
                    partition=partition,
                    offset=offset,
                )
            return ConsumedTurn(decoded, sequence, topic, partition, offset, text)
        # The named tuple built without its Python-level __new__ (one per message).
        return _tuple_new(ConsumedTurn, (decoded, sequence, topic, partition, offset, (), False))

    def deliver_to(self, sink: Sink, reject: Callable[[Record, Rejection], None]) -> None:
        # A sink the native step serves (the metrics service's tallies, the log sink's
        # lines, the HTIR feeder's turns; not wrapped under --workers) and a decoder with
        # native plans: ordinary turns never reach Python.
        native_plans = getattr(self._decode, "native_plans", None)
        served = step_outlet(sink)
        if served is not None and native_plans is not None:
            outlet, stepping = served
            step = ConsumeStep(
                self._decode, self._streams.tracker, _check_event, native_plans(), **outlet
            )
            self._batch = NativeBatch(step, self, stepping, reject)

    def examine_batch(self, records: Sequence[Record]) -> HandedBatch | None:
        return None if self._batch is None else self._batch.hand_over(records)

    def _count_identity(
        self,
        result: TrackResult,
        key_mismatch: bool,
        topic: str,
        partition: int,
        offset: int,
        *,
        pack_id: str,
    ) -> None:
        """The stream tracker's verdict on one message, in the metrics and the log."""
        metrics = self._metrics
        if result.redelivered:
            metrics.redelivered.inc()
        if result.missing_opened:
            metrics.sequence_gaps.inc()
            metrics.missing_turns.inc(result.missing_opened)
            metrics.breach(pack_id, Contract.SEQUENCE.value)
        if result.gap_closed:
            metrics.gaps_closed.inc()
        if key_mismatch:
            metrics.key_mismatches.inc()
        breach = identity_breach(result)
        if breach is not None:
            kind = result.outcome.value if result.outcome.value in CHAIN_BREAK_KINDS else "chain"
            metrics.chain_breaks.labels(kind).inc()
            metrics.breach(pack_id, Contract.CHAIN.value)
        if result.missing_opened or breach is not None:
            log.warning(
                "turn_stream_gap" if breach is None else "turn_chain_break",
                session_id=result.stream[0],
                producer_id=result.stream[1],
                sequence=result.sequence,
                missing=result.missing_opened,
                detail=None if breach is None else breach.detail,
                topic=topic,
                partition=partition,
                offset=offset,
            )

    def forget_partitions(self, partitions: set[int]) -> None:
        # Streams of a partition that moves on are tracked afresh on return.
        self._streams.forget_partitions(partitions)


class HtirTraceValidation(Validation):
    """HTIR traces: decode any shipped version; the record must make an ``HtirTrace``."""

    def __init__(self, decode: TurnEventDeserializer | Decoder) -> None:
        self._decode = decode

    def examine(
        self, value: bytes | None, key: bytes | None, topic: str, partition: int, offset: int
    ) -> ConsumedTurn | Rejection:
        decoded = decode_message(self._decode, value)
        if isinstance(decoded, Rejection):
            return decoded
        try:
            HtirTrace.from_avro(decoded.event)
        except Exception as exc:
            return Rejection(DeadLetterReason.UNDECODABLE, f"not an HTIR trace: {exc!r}")
        return ConsumedTurn(decoded, IN_ORDER, topic, partition, offset)
