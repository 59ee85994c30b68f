"""The data keys on Kafka: the publisher's sealing, the readers' directory, erasure.

``<prefix>surface-keys`` (compacted, one partition) holds one record per data key,
keyed by its id (``DataKeyRecord``). ``erase_session`` writes a tombstone for each of a
session's data keys and records the erasure (who, what, when) on ``<prefix>erasures``.
A reader that reads the key topic after the tombstone no longer finds the key; the
log cleaner then removes the record itself (docs/privacy.md says when, and what
erasure cannot reach).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

import structlog

from turnaudit.errors import BrokerError
from turnaudit.events import OutgoingTurnEvent
from turnaudit.kafka.offsets import RangeSpec, resolve_range
from turnaudit.kafka.producer import KafkaProducer
from turnaudit.kafka.reading import read_range
from turnaudit.sealing.data_keys import (
    DataKeyRecord,
    KeyDirectory,
    SessionKeys,
    key_period_from_env,
)
from turnaudit.sealing.keys import SurfaceKeyProvider, provider_from_env
from turnaudit.settings import KafkaSettings

log = structlog.get_logger("turnaudit.sealing")


class PublisherSealing:
    """What the publisher seals with: ``active`` with a provider (default: the keyring
    ``TURNAUDIT_SURFACE_KEYRING`` names, when set), inert otherwise. ``seal`` seals a
    stamped turn in place, handing a new data key's record to ``store`` first (the
    publisher's route for it)."""

    def __init__(
        self,
        store: Callable[[DataKeyRecord], None],
        provider: SurfaceKeyProvider | Literal["env"] | None = "env",
    ) -> None:
        if provider == "env":
            provider = provider_from_env()
        self.active = provider is not None
        self.keys = (
            None
            if provider is None
            else SessionKeys(
                provider,
                store,
                clock_ms=lambda: int(time.time() * 1000),
                period=key_period_from_env(),  # TURNAUDIT_SURFACE_KEY_PERIOD
            )
        )
        # Seals a stamped turn in place; nothing when inactive. Bound once: one call a
        # turn fewer on publish()'s path.
        self.seal: Callable[[OutgoingTurnEvent], None] = (
            _seal_nothing if self.keys is None else self.keys.seal
        )


def _seal_nothing(_event: OutgoingTurnEvent) -> None:
    pass


def load_directory(
    settings: KafkaSettings,
    provider: SurfaceKeyProvider | None,
    *,
    timeout: float = 30.0,
) -> KeyDirectory:
    """Every data key on the key topic now (tombstones applied), for ``provider``; a data
    key it does not hold is looked for once more on the topic when a turn asks for it."""
    feed = _KeyTopicFeed(settings, timeout)
    directory = KeyDirectory(provider, refresh=feed)
    feed(directory)
    return directory


class _KeyTopicFeed:
    """Reads the key topic on from where it stopped into a directory."""

    def __init__(self, settings: KafkaSettings, timeout: float) -> None:
        self._settings, self._timeout = settings, timeout
        self._next: dict[int, int] | None = None

    def __call__(self, directory: KeyDirectory) -> None:
        settings, topic = self._settings, self._settings.topics.surface_keys
        end = resolve_range(settings, topic, RangeSpec(), timeout=self._timeout).end
        for record in read_range(settings, topic, self._next, end, timeout=self._timeout):
            directory.apply(record.key(), record.value())
        self._next = end


def reader_directory(
    settings: KafkaSettings, provider: SurfaceKeyProvider | Literal["env"] | None = "env"
) -> KeyDirectory:
    """A reader's directory: with a provider (default: the keyring
    ``TURNAUDIT_SURFACE_KEYRING`` names) the key topic is read; without, nothing is
    (every sealed turn shows placeholders)."""
    if provider == "env":
        provider = provider_from_env()
    return KeyDirectory(None) if provider is None else load_directory(settings, provider)


@dataclass(frozen=True, slots=True)
class ErasureRecord:
    """An erasure as recorded on ``<prefix>erasures``: one per session erased (by its
    id, or by a time range: ``range_from_ms``/``range_to_ms`` set, the session's data
    keys in the range listed; a range that held none is recorded with an empty session)."""

    session_id: str
    data_key_ids: tuple[str, ...]
    erased_by: str
    erased_at_ms: int
    reason: str
    range_from_ms: int | None = None
    range_to_ms: int | None = None

    def encode(self) -> bytes:
        return json.dumps({**asdict(self), "data_key_ids": list(self.data_key_ids)}).encode()


def erase_session(
    settings: KafkaSettings,
    session_id: str,
    *,
    erased_by: str,
    reason: str = "",
    timeout: float = 30.0,
) -> ErasureRecord:
    """Tombstone every data key of ``session_id`` and record the erasure; no KEK needed."""
    directory = load_directory(settings, None, timeout=timeout)
    found = tuple(sorted(r.data_key_id for r in directory.records_of(session_id)))
    record = ErasureRecord(session_id, found, erased_by, int(time.time() * 1000), reason)
    _destroy(settings, [record], f"session {session_id!r}", timeout)
    log.info("session_erased", session_id=session_id, data_keys=len(found), by=erased_by)
    return record


def erase_range(
    settings: KafkaSettings,
    from_ms: int,
    to_ms: int,
    *,
    erased_by: str,
    reason: str = "",
    timeout: float = 30.0,
) -> list[ErasureRecord]:
    """Tombstone every data key sealed within ``[from_ms, to_ms)``
    (``DataKeyRecord.sealed_within``) and record the erasure, one record per session;
    no KEK needed."""
    if to_ms <= from_ms:
        raise ValueError(f"an empty range: {from_ms} to {to_ms}")
    directory = load_directory(settings, None, timeout=timeout)
    by_session: dict[str, list[str]] = {}
    for found in directory.records_within(from_ms, to_ms):
        by_session.setdefault(found.session_id, []).append(found.data_key_id)
    now_ms = int(time.time() * 1000)
    records = [
        ErasureRecord(session, tuple(sorted(ids)), erased_by, now_ms, reason, from_ms, to_ms)
        for session, ids in sorted(by_session.items())
    ] or [ErasureRecord("", (), erased_by, now_ms, reason, from_ms, to_ms)]
    _destroy(settings, records, f"the range {from_ms}..{to_ms} ms", timeout)
    log.info(
        "range_erased",
        from_ms=from_ms,
        to_ms=to_ms,
        sessions=len(by_session),
        data_keys=sum(len(r.data_key_ids) for r in records),
        by=erased_by,
    )
    return records


def _destroy(
    settings: KafkaSettings, records: list[ErasureRecord], what: str, timeout: float
) -> None:
    """The tombstones, then the erasure records, each acknowledged or ``BrokerError``."""
    producer = KafkaProducer.reliable(settings).open()
    for record in records:
        for data_key_id in record.data_key_ids:
            producer.produce(settings.topics.surface_keys, None, data_key_id.encode())
    for record in records:
        producer.produce(settings.topics.erasures, record.encode(), record.session_id.encode())
    left = producer.flush(timeout)
    if left or producer.failed:
        raise BrokerError(
            f"erasure of {what} not acknowledged by the broker "
            f"({left} record(s) undelivered, {producer.failed} failed): run it again"
        )
