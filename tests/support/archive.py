"""Archive test parts: a signing key and its keyring, records and archives built from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import strategies as st

from tests.support.streams import scrape
from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy, PartitionArchive
from turnaudit.checkpoints import KeyEntry, Keyring, SigningKey
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.settings import KafkaSettings

KEY_ID = "archiver-test"
SINCE = datetime(2020, 1, 1, tzinfo=UTC)


def signing_key(seed: bytes = b"\x07" * 32, key_id: str = KEY_ID) -> SigningKey:
    return SigningKey(Ed25519PrivateKey.from_private_bytes(seed), key_id)


def keyring_of(key: SigningKey) -> Keyring:
    return Keyring({key.key_id: KeyEntry(key.key_id, key.public_key(), SINCE)})


def header_pairs() -> st.SearchStrategy[tuple[tuple[str, bytes | None], ...]]:
    pair = st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16))
    return st.lists(pair, max_size=3).map(tuple)


@st.composite
def partition_records(
    draw: st.DrawFn, topic: str = "t.turn-events", partition: int = 0, max_size: int = 30
) -> list[ArchivedRecord]:
    """Records of one partition in offset order (offsets may skip, as after transaction
    markers), any keys, values, headers and timestamps."""
    count = draw(st.integers(1, max_size))
    offset = draw(st.integers(0, 2**40))
    clock = draw(st.integers(1_700_000_000_000, 1_800_000_000_000))
    records = []
    for _ in range(count):
        clock += draw(st.integers(-1000, 2_000_000))  # producer clocks go back too
        records.append(
            ArchivedRecord(
                topic,
                partition,
                offset,
                clock,
                draw(st.sampled_from((0, 1, 2))),
                draw(st.none() | st.binary(max_size=24)),
                draw(st.none() | st.binary(max_size=200)),
                draw(header_pairs()),
            )
        )
        offset += draw(st.integers(1, 3))
    return records


def archive_records(
    archive: LocalArchive,
    records: Sequence[ArchivedRecord],
    key: SigningKey,
    policy: ArchivePolicy,
    *,
    digest_every: int = 2,
    now_s: float = 1_900_000_000.0,
) -> PartitionArchive:
    """One partition archived as the service does it, a digest after every few segments,
    the last digest at the end (a clean stop)."""
    first = records[0]
    state = PartitionArchive(first.topic, first.partition)
    for record in records:
        state.take(record, policy)
        state.write(archive, policy)
        if len(state.undigested) >= digest_every:
            now_s += 1
            state.write_digest(archive, key, now_s)
    state.cut_open()
    state.write(archive, policy)
    if state.undigested:
        state.write_digest(archive, key, now_s + 1)
    return state


def archived_offsets(port: int) -> dict[int, int]:
    """The archiver's last archived offset per partition, from its metrics (empty until
    it listens)."""
    try:
        samples = scrape(port)
    except OSError:
        return {}  # not listening yet
    return {
        int(dict(labels)["partition"]): int(value)
        for (name, labels), value in samples.items()
        if name == "turnaudit_archive_archived_offset"
    }


def broker_records(
    settings: KafkaSettings, topic: str
) -> tuple[dict[int, int], list[ArchivedRecord]]:
    """The topic's end offsets, and every record it holds as the archiver takes it
    (by partition, then offset)."""
    ends = end_offsets(settings, topic)
    records = sorted(
        (ArchivedRecord.of(m) for m in read_range(settings, topic, None, ends)),
        key=lambda r: (r.partition, r.offset),
    )
    return ends, records


def archive_up_to(
    root: Path, records: Sequence[ArchivedRecord], archived_to: Mapping[int, int], window_ms: int
) -> None:
    """Each partition's records below ``archived_to`` written to a local archive at ``root``,
    as the archiver writes them."""
    for p, bound in archived_to.items():
        held = [r for r in records if r.partition == p and r.offset < bound]
        archive_records(LocalArchive(root), held, signing_key(), ArchivePolicy(window_ms=window_ms))
