"""KEK rotation's second half: every data key on ``<prefix>surface-keys`` wrapped by a KEK
other than the active one is unwrapped and wrapped again by the active KEK, under the same
id (compaction keeps the new record), so the old KEK can then be retired.

An erasure running meanwhile must not be undone: a tombstone that lands between this
run's read of the topic and its new record would be overwritten. The topic has one
partition, so its order is total: after its records are acknowledged (each at a known
offset), the run reads what landed since its read, and tombstones again every data key
whose tombstone came before its rewritten record (``resurrected``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from turnaudit.errors import BrokerError
from turnaudit.kafka.offsets import RangeSpec, resolve_range
from turnaudit.kafka.producer import DeliveredMessage, DeliveryError, KafkaProducer
from turnaudit.kafka.reading import read_range
from turnaudit.sealing.data_keys import KeyDirectory
from turnaudit.sealing.keys import KeyUnavailableError, SurfaceKeyProvider
from turnaudit.settings import KafkaSettings


@dataclass(frozen=True, slots=True)
class RewrapReport:
    rewrapped: int  # data keys now wrapped by the active KEK
    current: int  # already wrapped by it
    unreadable: int  # wrapped by a KEK the keyring does not hold (left as they are)
    erased_meanwhile: int  # erased while the run went: tombstoned again


def resurrected(
    since_read: Iterable[tuple[int, bytes | None, bool]], rewritten: Mapping[str, int]
) -> set[str]:
    """The data keys a rewrite brought back: ``since_read`` holds (offset, key, tombstone)
    of what landed after the run's read; ``rewritten`` the offset of each rewritten record.
    A tombstone of a rewritten key before its new record means an erasure was overwritten."""
    found = set()
    for offset, key, tombstone in since_read:
        if key is None or not tombstone:
            continue
        data_key_id = key.decode("utf-8", "replace")
        written_at = rewritten.get(data_key_id)
        if written_at is not None and offset < written_at:
            found.add(data_key_id)
    return found


def rewrap_surface_keys(
    settings: KafkaSettings, provider: SurfaceKeyProvider, *, timeout: float = 30.0
) -> RewrapReport:
    topic = settings.topics.surface_keys
    read_end = resolve_range(settings, topic, RangeSpec(), timeout=timeout).end
    directory = KeyDirectory(None)
    for message in read_range(settings, topic, None, read_end, timeout=timeout):
        directory.apply(message.key(), message.value())
    active = provider.active_key_id
    offsets: dict[str, int] = {}
    failures: list[str] = []

    def delivered(err: DeliveryError | None, msg: DeliveredMessage) -> None:
        key, offset = msg.key(), msg.offset()
        if err is not None or offset is None or not isinstance(key, bytes):
            failures.append(str(err))
        else:
            offsets[key.decode()] = offset

    producer = KafkaProducer.reliable(settings).open()
    current = unreadable = 0
    for record in directory.records():
        if record.wrapped.kek_id == active:
            current += 1
            continue
        try:
            key = provider.unwrap(record.session_id, record.data_key_id, record.wrapped)
        except KeyUnavailableError:
            unreadable += 1
            continue
        again = replace(record, wrapped=provider.wrap(record.session_id, record.data_key_id, key))
        producer.produce(topic, again.encode(), record.data_key_id.encode(), on_delivery=delivered)
    _settle(producer, failures, timeout)
    if not offsets:
        return RewrapReport(0, current, unreadable, 0)
    end = {0: max(offsets.values()) + 1}
    since = [
        (m.offset() or 0, m.key(), m.value() is None)
        for m in read_range(settings, topic, read_end, end, timeout=timeout)
    ]
    erased = resurrected(since, offsets)
    for data_key_id in sorted(erased):
        producer.produce(topic, None, data_key_id.encode())
    _settle(producer, failures, timeout)
    return RewrapReport(len(offsets) - len(erased), current, unreadable, len(erased))


def _settle(producer: KafkaProducer, failures: list[str], timeout: float) -> None:
    left = producer.flush(timeout)
    if left or failures or producer.failed:
        raise BrokerError(
            f"rewrap not acknowledged by the broker ({left} record(s) undelivered, "
            f"{len(failures) or producer.failed} failed): run it again"
        )
