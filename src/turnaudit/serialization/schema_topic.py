"""A ``FingerprintResolver`` reading the compacted ``<prefix>.schemas`` topic.

Publishers put every writer schema there (key = fingerprint hex, value =
schema JSON) before using it, so a reader can decode versions it does not
ship. The topic is read on a miss only, incrementally from where the last read
stopped, and at most once per ``min_refresh_interval``: a flood of messages
with unknown fingerprints cannot turn into a flood of topic reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from turnaudit.errors import TurnAuditError
from turnaudit.kafka.reading import end_offsets, read_range
from turnaudit.serialization.schemas import WriterSchema, schema_from_json
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


class SchemaTopicResolver:
    """Callable ``fingerprint -> schema JSON | None`` backed by the schemas topic."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        min_refresh_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._topic = settings.topics.schemas
        self._min_refresh_interval = min_refresh_interval
        self._clock = clock
        self._known: dict[bytes, str] = {}
        self._read_up_to: dict[int, int] = {}
        self._last_refresh: float | None = None
        self._lock = threading.Lock()

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
                self._learn(msg.key(), msg.value())
        except TurnAuditError as exc:
            # The caller dead-letters the message as "unknown schema"; replaying
            # it later, once the topic answers, decodes it.
            log.warning("schema_topic_unreadable", topic=self._topic, error=str(exc))
            return
        self._read_up_to = end

    def _learn(self, key: bytes | None, value: bytes | None) -> None:
        if not key or not value:
            return  # a tombstone or a keyless record names no schema
        try:
            schema = schema_from_json(value.decode(), name="turn_event", version=-1)
        except Exception as exc:  # fastavro and json raise many types for a bad schema
            log.warning("schema_topic_bad_schema", key=key.decode(errors="replace"), error=str(exc))
            return
        # Trust the schema's own fingerprint, not the key: a wrong key must not
        # make one writer's bytes decode with another writer's schema.
        if schema.fingerprint_hex != key.decode(errors="replace"):
            log.warning(
                "schema_topic_key_mismatch",
                key=key.decode(errors="replace"),
                fingerprint=schema.fingerprint_hex,
            )
        self._known[schema.fingerprint] = schema.schema_json
