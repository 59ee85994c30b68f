"""What the project sees of a Kafka record and of a client error, without Kafka.

``Record`` is a protocol that librdkafka's consumed message satisfies as it is
(no copy per message); code outside ``turnaudit.kafka`` reads records through
it (pure code imports this module, never ``turnaudit.kafka``), and a test
builds its own records with ``StoredRecord``. ``ClientError``
is the project's copy of a librdkafka error: errors are rare, so converting
them costs nothing that matters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from turnaudit.errors import BrokerError

# Headers as the project hands them on: (name, bytes) pairs.
Headers = list[tuple[str, bytes | None]]


class Record(Protocol):
    """A consumed Kafka record (librdkafka's ``Message`` is one)."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> object: ...
    def timestamp(self) -> tuple[int, int]: ...


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record with its fields stored: what tests and pure code build by hand."""

    topic_name: str
    partition_id: int
    offset_value: int
    key_bytes: bytes | None = None
    value_bytes: bytes | None = None
    header_pairs: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int = 0

    def topic(self) -> str | None:
        return self.topic_name

    def partition(self) -> int | None:
        return self.partition_id

    def offset(self) -> int | None:
        return self.offset_value

    def key(self) -> bytes | None:
        return self.key_bytes

    def value(self) -> bytes | None:
        return self.value_bytes

    def headers(self) -> object:
        return list(self.header_pairs) or None

    def timestamp(self) -> tuple[int, int]:
        return (1, self.timestamp_ms)  # 1: the producer's create time


def record_headers(record: Record) -> Headers:
    """A record's headers as (name, bytes) pairs (librdkafka also allows a dict and str)."""
    raw = record.headers()
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list):
        pairs = raw
    else:
        return []
    return [
        (str(name), value.encode() if isinstance(value, str) else value) for name, value in pairs
    ]


def record_position(record: Record) -> tuple[str, int, int]:
    """Topic, partition and offset of a consumed record (only error events lack them)."""
    topic, partition, offset = record.topic(), record.partition(), record.offset()
    if topic is None or partition is None or offset is None:
        raise BrokerError("consumed a record without a position")
    return topic, partition, offset


@dataclass(frozen=True, slots=True)
class ClientError:
    """An error librdkafka reported: its code's name, its text, and what it means."""

    name: str
    text: str
    fatal: bool = False
    retriable: bool = False
    brokers_down: bool = False  # every broker unreachable

    def __str__(self) -> str:
        return self.text
