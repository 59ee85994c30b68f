"""A ``FingerprintResolver`` reading the compacted ``<prefix>.schemas`` topic.

Publishers put every writer schema there (key = fingerprint hex, value =
schema JSON) before using it, so a reader can decode versions it does not
ship. The topic is read on a miss only, incrementally from where the last read
stopped, and at most once per ``min_refresh_interval``: a flood of messages
with unknown fingerprints cannot turn into a flood of topic reads.

Anyone who can write to the cluster can write to that topic: a record that
is not a usable writer schema is logged, counted
(``turnaudit_schema_topic_unusable_records_total`` by reason) and skipped,
never trusted and never fatal. A schema that parses but does not resolve
against the reader is caught where it is used (the deserializer refuses the
messages naming it as ``unusable_schema``).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable

import structlog
from prometheus_client import CollectorRegistry, Counter

from turnaudit.errors import TurnAuditError
from turnaudit.kafka.errors import ClientException
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.serialization.schemas import (
    SchemaCatalog,
    WriterSchema,
    schema_from_json,
    shipped_schemas,
)
from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.schema_topic")


def announce_schema(
    produce: Callable[[str, bytes, bytes], object], topic: str, schema: WriterSchema
) -> None:
    """Put a writer schema on the compacted schemas topic: key = fingerprint hex, value = JSON.

    ``produce(topic, value, key)`` is the writer's own producer, so the
    announcement is delivered no later than the writer's first flush of data
    written with the schema. Re-announcing is harmless: compaction keeps one
    record per key.
    """
    produce(topic, schema.schema_json.encode(), schema.fingerprint_hex.encode())


def announced_schemas(turn_events: SchemaCatalog, *, registered: bool) -> list[WriterSchema]:
    """What the runtime's publisher announces, as the schemas topic's one writer: every
    shipped writer schema of the other record types (HTIR traces, auditor observations:
    always single-object framing, written by principals that may not write the schemas
    topic), and the turn events' own catalog unless a schema registry holds it."""
    others = [s for s in shipped_schemas() if s.name != turn_events.name]
    return ([] if registered else list(turn_events.versions)) + others


class UnusableRecord(enum.StrEnum):
    """Why a record on the schemas topic was skipped (a closed set: metric labels)."""

    NO_KEY_OR_VALUE = "no_key_or_value"  # keyless, or a value-less record that is no tombstone
    NOT_A_SCHEMA = "not_a_schema"  # not UTF-8, not JSON, or not an Avro schema
    NOT_A_RECORD = "not_a_record"  # an Avro schema, but not a record schema
    KEY_MISMATCH = "key_mismatch"  # kept under its own fingerprint, not the key


class SchemaTopicResolver:
    """Callable ``fingerprint -> schema JSON | None`` backed by the schemas topic."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        min_refresh_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._settings = settings
        self._topic = settings.topics.schemas
        self._min_refresh_interval = min_refresh_interval
        self._clock = clock
        self._known: dict[bytes, str] = {}
        self._read_up_to: dict[int, int] = {}
        self._last_refresh: float | None = None
        self._lock = threading.Lock()
        self.unusable = Counter(
            "turnaudit_schema_topic_unusable_records",
            "Records on the schemas topic skipped as unusable, by reason.",
            ["reason"],
            registry=registry,
        )
        for reason in UnusableRecord:
            self.unusable.labels(reason.value)

    def __call__(self, fingerprint: bytes) -> str | None:
        with self._lock:
            found = self._known.get(fingerprint)
            if found is not None:
                return found
            now = self._clock()
            if (
                self._last_refresh is not None
                and now - self._last_refresh < self._min_refresh_interval
            ):
                return None
            self._last_refresh = now
            self._refresh()
            return self._known.get(fingerprint)

    def _refresh(self) -> None:
        try:
            end = end_offsets(self._settings, self._topic)
            for msg in read_range(self._settings, self._topic, self._read_up_to, end):
                self.learn(msg.key(), msg.value(), msg.partition(), msg.offset())
        except (TurnAuditError, ClientException) as exc:
            # The caller dead-letters the message as "unknown schema"; replaying
            # it later, once the topic answers, decodes it.
            log.warning("schema_topic_unreadable", topic=self._topic, error=str(exc))
            return
        self._read_up_to = end

    def known(self, fingerprint: bytes) -> str | None:
        """The schema learned for ``fingerprint`` so far, without reading the topic."""
        with self._lock:
            return self._known.get(fingerprint)

    def learn(
        self,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        """Take one record of the topic: a usable writer schema is kept, anything else skipped."""
        if value is None and key:
            return  # a tombstone: compaction removes the key, nothing to learn
        if not key or not value:
            self._skip(UnusableRecord.NO_KEY_OR_VALUE, key, partition, offset, "")
            return
        try:
            schema = schema_from_json(value.decode(), name="turn_event", version=-1)
        except Exception as exc:  # utf-8, json and fastavro raise many types for a bad schema
            self._skip(UnusableRecord.NOT_A_SCHEMA, key, partition, offset, repr(exc)[:500])
            return
        if not isinstance(schema.parsed, dict) or schema.parsed.get("type") != "record":
            self._skip(UnusableRecord.NOT_A_RECORD, key, partition, offset, "")
            return
        # Trust the schema's own fingerprint, not the key: a wrong key must not
        # make one writer's bytes decode with another writer's schema.
        if schema.fingerprint_hex != key.decode(errors="replace"):
            self._skip(
                UnusableRecord.KEY_MISMATCH,
                key,
                partition,
                offset,
                f"kept under its own fingerprint {schema.fingerprint_hex}",
            )
        self._known[schema.fingerprint] = schema.schema_json

    def _skip(
        self,
        reason: UnusableRecord,
        key: bytes | None,
        partition: int | None,
        offset: int | None,
        error: str,
    ) -> None:
        self.unusable.labels(reason.value).inc()
        log.warning(
            "schema_topic_record_unusable",
            reason=reason.value,
            key=(key or b"").decode(errors="replace")[:100],
            topic=self._topic,
            partition=partition,
            offset=offset,
            error=error,
        )
