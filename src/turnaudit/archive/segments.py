"""Archive segments: a partition's records, as the broker held them, in one Avro
Object Container File (fastavro).

Each record keeps what a consumer of the topic would read: topic, partition, offset,
timestamp and its type, key and value bytes (``None`` apart from empty), and the headers
in their order (a header's value ``None`` apart from empty too). A segment read back
hands the same records, byte for byte; ``replay`` can take them in place of the topic.

A segment's bytes follow from its records alone: the container's sync marker is derived
from the topic, partition and first offset (fastavro would draw a random one), and its
blocks are cut at the same byte counts. A segment written again after a restart, from
the same records, is the same file: same name, same SHA-256.

A segment's name is ``<topic>/<partition>/segments/<first>-<last>.avro`` (offsets
zero-padded to 20 digits, so names sort as offsets do).
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypedDict

import fastavro

from turnaudit.records import Record, record_headers

# Bytes of records per container block: fastavro's default, fixed here so that a
# segment's bytes never depend on the library's default.
SYNC_INTERVAL = 16_000
CODECS = ("null", "deflate")
_OFFSET_DIGITS = 20
SEGMENT_FOLDER = "segments"
_SEGMENT_NAME = re.compile(r"^(\d{20})-(\d{20})\.avro$")
_MARKER_DOMAIN = b"turnaudit-archive-sync-v1\x00"

SEGMENT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "ArchivedRecord",
    "namespace": "turnaudit.archive",
    "doc": "One Kafka record as the broker held it (turnaudit archive).",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "timestamp", "type": "long"},
        {"name": "timestamp_type", "type": "int"},
        {"name": "key", "type": ["null", "bytes"]},
        {"name": "value", "type": ["null", "bytes"]},
        {
            "name": "headers",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Header",
                    "fields": [
                        {"name": "name", "type": "string"},
                        {"name": "value", "type": ["null", "bytes"]},
                    ],
                },
            },
        },
    ],
}
_PARSED_SCHEMA = fastavro.parse_schema(SEGMENT_SCHEMA)


class _AvroHeader(TypedDict):
    name: str
    value: bytes | None


class _AvroRecord(TypedDict):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[_AvroHeader]


@dataclass(frozen=True, slots=True)
class ArchivedRecord:
    """One record of a segment: everything a consumer read of it."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # epoch milliseconds
    timestamp_type: int  # librdkafka's: 0 none, 1 create time, 2 log append time
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @classmethod
    def of(cls, record: Record) -> ArchivedRecord:
        """A consumed record as archived (its position must be known)."""
        topic, partition, offset = record.topic(), record.partition(), record.offset()
        if topic is None or partition is None or offset is None:
            raise ValueError("a record without a position cannot be archived")
        kind, timestamp = record.timestamp()
        return cls(
            topic,
            partition,
            offset,
            timestamp,
            kind,
            record.key(),
            record.value(),
            tuple(record_headers(record)),
        )

    def avro(self) -> _AvroRecord:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp,
            "timestamp_type": self.timestamp_type,
            "key": self.key,
            "value": self.value,
            "headers": [{"name": n, "value": v} for n, v in self.headers],
        }

    @classmethod
    def from_avro(cls, data: _AvroRecord) -> ArchivedRecord:
        return cls(
            data["topic"],
            data["partition"],
            data["offset"],
            data["timestamp"],
            data["timestamp_type"],
            data["key"],
            data["value"],
            tuple((h["name"], h["value"]) for h in data["headers"]),
        )

    def size(self) -> int:
        """Bytes of key, value and headers: what a segment's size bound counts."""
        return (
            len(self.key or b"")
            + len(self.value or b"")
            + sum(len(n) + len(v or b"") for n, v in self.headers)
        )


@dataclass(frozen=True, slots=True, order=True)
class SegmentName:
    """Where a segment lives: its topic, partition and offset range (both inclusive)."""

    topic: str
    partition: int
    first: int
    last: int

    def path(self) -> str:
        return (
            f"{partition_folder(self.topic, self.partition)}/{SEGMENT_FOLDER}/"
            f"{self.first:0{_OFFSET_DIGITS}d}-{self.last:0{_OFFSET_DIGITS}d}.avro"
        )

    @classmethod
    def parse(cls, topic: str, partition: int, file_name: str) -> SegmentName | None:
        """The name of a segment file in ``topic``/``partition``'s folder, or None."""
        found = _SEGMENT_NAME.match(file_name)
        if found is None:
            return None
        first, last = int(found[1]), int(found[2])
        return cls(topic, partition, first, last) if first <= last else None


def partition_folder(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def sync_marker(topic: str, partition: int, first: int) -> bytes:
    """The container's 16-byte sync marker, the same whenever this segment is written."""
    seed = f"{topic}\x00{partition}\x00{first}".encode()
    return hashlib.sha256(_MARKER_DOMAIN + seed).digest()[:16]


def encode_segment(records: Iterable[ArchivedRecord], codec: str = "deflate") -> bytes:
    """The segment file of ``records`` (one partition's, in offset order, at least one)."""
    ordered = list(records)
    if not ordered:
        raise ValueError("a segment holds at least one record")
    head = ordered[0]
    out = io.BytesIO()
    fastavro.writer(
        out,
        _PARSED_SCHEMA,
        (r.avro() for r in ordered),
        codec=codec,
        sync_interval=SYNC_INTERVAL,
        metadata={
            "turnaudit.topic": head.topic,
            "turnaudit.partition": str(head.partition),
            "turnaudit.first_offset": str(head.offset),
        },
        sync_marker=sync_marker(head.topic, head.partition, head.offset),
    )
    return out.getvalue()


def decode_segment(data: bytes) -> Iterator[ArchivedRecord]:
    """A segment's records, in their order; raises ``ValueError`` when the bytes are not
    a segment (not a container, another schema, a torn block)."""
    try:
        reader = fastavro.reader(io.BytesIO(data), reader_schema=_PARSED_SCHEMA)
        for item in reader:
            yield ArchivedRecord.from_avro(item)  # type: ignore[arg-type]  # the reader schema
    except Exception as exc:  # fastavro raises many kinds on bad bytes; one kind out
        raise ValueError(f"not a readable segment: {exc!r}") from None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
