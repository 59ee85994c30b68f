"""Archive test parts: a signing key and its keyring, records and archives built from them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import strategies as st

from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy, PartitionArchive
from turnaudit.checkpoints import KeyEntry, Keyring, SigningKey

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
