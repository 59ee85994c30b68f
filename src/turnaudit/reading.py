"""The public, typed API for Python subscribers: read and decode the turn-audit topics.

Everything a Python consumer needs to read what the pipeline wrote, in one import, stable
across releases (the modules behind it may move; these names stay):

* ``decoder_for(settings)``: a decoder of TurnEvent messages in both framings (single-object
  and Confluent) and every schema version, shipped or announced on the schemas topic since.
  Calling it on a message value gives a ``DecodedTurnEvent``; it raises a
  ``SerializationError`` (``turnaudit.errors``) for bytes it cannot read, never anything else.
* ``DecodedTurnEvent``: ``event`` (the record in today's reader shape), ``writer_version``,
  ``framing``, ``writer_fingerprint``. ``turn_event(decoded)`` gives ``event`` typed as a
  ``TurnEvent``, so ``mypy --strict`` reaches its fields.
* ``TurnEvent`` and the per-version ``TurnEventV1`` .. ``TurnEventV4``, with their parts
  (``TurnVerdicts``, ``ActionAssessment``, ...): ``TypedDict`` s held to ``schemas/*.avsc``.
  ``occurred_at`` is epoch milliseconds; ``occurred_moment`` makes it a ``datetime``.
* ``RangeSpec`` / ``resolve_range`` / ``read_range``: a bounded range of a topic (by broker
  time and/or offsets) read by an assigned consumer that joins no group and commits nothing,
  so it never takes partitions from a live group. ``read_turn_events`` does all three.
* Sealed surfaces (docs/privacy.md): ``read_turn_events`` opens them with the keyring
  ``TURNAUDIT_SURFACE_KEYRING`` names (or the ``KeyDirectory`` given), writing the text
  into the event's fields; without the key the fields hold a ``[sealed: <reason>]``
  placeholder and ``ReadTurn.sealing`` says why (``Opened`` / ``Sealed``), never an error.
  A long-running subscriber opens each turn with ``KeyDirectory.open_in_place``.
* ``KafkaSettings.from_env()``: the cluster, topic prefix and client options, from the same
  variables as the services (``KAFKA_BOOTSTRAP_SERVERS``, ``TURNAUDIT_*``).

A long-running subscriber uses its own consumer group with any Kafka client and calls the
decoder on each value (docs/subscribers.md). ``docs/examples/read_turns.py`` is a complete
example; the suite runs it against a real broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, cast

from turnaudit.errors import SerializationError
from turnaudit.events import (
    ActionAssessment,
    EthicsVerdict,
    IdentityScore,
    ModelIdentity,
    RuntimeIdentity,
    SafetyVerdict,
    TaskContext,
    ToolStep,
    TraceContext,
    TurnEvent,
    TurnEventV1,
    TurnEventV2,
    TurnEventV3,
    TurnEventV4,
    TurnVerdicts,
    occurred_moment,
)
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import RangeSpec, ResolvedRange, resolve_range
from turnaudit.kafka.reading import read_range
from turnaudit.records import Record
from turnaudit.sealing import KeyDirectory, Opened, Sealed, SealedReason, SealState
from turnaudit.sealing.key_topic import load_directory, reader_directory
from turnaudit.serialization.wire import DecodedTurnEvent, Framing, TurnEventDeserializer
from turnaudit.settings import KafkaSettings

__all__ = [
    "ActionAssessment",
    "DecodedTurnEvent",
    "EthicsVerdict",
    "Framing",
    "IdentityScore",
    "KafkaSettings",
    "KeyDirectory",
    "ModelIdentity",
    "Opened",
    "RangeSpec",
    "ReadTurn",
    "Record",
    "ResolvedRange",
    "RuntimeIdentity",
    "SafetyVerdict",
    "SealState",
    "Sealed",
    "SealedReason",
    "SerializationError",
    "TaskContext",
    "ToolStep",
    "TraceContext",
    "TurnEvent",
    "TurnEventDeserializer",
    "TurnEventV1",
    "TurnEventV2",
    "TurnEventV3",
    "TurnEventV4",
    "TurnVerdicts",
    "decoder_for",
    "load_directory",
    "occurred_moment",
    "read_range",
    "read_turn_events",
    "resolve_range",
    "turn_event",
]


def turn_event(decoded: DecodedTurnEvent) -> TurnEvent:
    """The decoded record as a ``TurnEvent`` (a TurnEvent decoder made it in that shape)."""
    return cast(TurnEvent, decoded.event)


class ReadTurn(NamedTuple):
    """One message of a range: where it is, and the turn it holds, or why it holds none."""

    partition: int
    offset: int
    key: bytes | None
    event: TurnEvent | None  # None: the message does not decode (see ``error``)
    writer_version: int | None
    error: SerializationError | None
    sealing: SealState | None = None  # None: the turn is not sealed (or does not decode)


def read_turn_events(
    settings: KafkaSettings,
    spec: RangeSpec | None = None,
    *,
    decoder: TurnEventDeserializer | None = None,
    timeout: float = 60.0,
    keys: KeyDirectory | None = None,
) -> Iterator[ReadTurn]:
    """Every message of the turn-events topic in ``spec`` (default: the whole retained
    stream, up to its end now), decoded, partition by partition in offset order.

    A message that does not decode is yielded with its ``error`` (the services park such
    messages on the dead-letter topic), never skipped. Sealed surfaces are opened with
    ``keys`` (default: the keyring ``TURNAUDIT_SURFACE_KEYRING`` names, if any).
    """
    topic = settings.topics.turn_events
    resolved = resolve_range(settings, topic, spec or RangeSpec())
    decode = decoder or decoder_for(settings)
    directory = keys if keys is not None else reader_directory(settings)
    for record in read_range(settings, topic, resolved.start, resolved.end, timeout=timeout):
        partition, offset = record.partition(), record.offset()
        assert partition is not None
        assert offset is not None  # an assigned reader's records have both
        try:
            decoded = decode(record.value())
        except SerializationError as exc:
            yield ReadTurn(partition, offset, record.key(), None, None, exc)
            continue
        event = turn_event(decoded)
        sealing = directory.open_in_place(event)
        yield ReadTurn(
            partition, offset, record.key(), event, decoded.writer_version, None, sealing
        )
