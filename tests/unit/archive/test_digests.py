"""Digests: canonical bytes that decode back to the same digest; a signature that holds
only for the bytes signed, only under a keyring key valid when it was signed; the chain
from GENESIS, each digest naming its predecessor's hash."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from tests.support.archive import KEY_ID, keyring_of, signing_key
from turnaudit.archive.digests import (
    ArchiveDigest,
    SegmentEntry,
    decode_digest,
    next_digest,
    signature_problem,
)
from turnaudit.chain import GENESIS_HASH
from turnaudit.checkpoints import KeyEntry, Keyring

KEY = signing_key()
KEYRING = keyring_of(KEY)
AT_MS = 1_900_000_000_000
CHECKPOINT_DOMAIN = b"turnaudit-checkpoint-v1\x00"  # what a publisher's key signs

entries = st.lists(
    st.builds(
        SegmentEntry,
        st.integers(0, 2**40),
        st.integers(0, 2**40),
        st.integers(1, 10**6),
        st.integers(1, 10**9),
        st.text("0123456789abcdef", min_size=64, max_size=64),
        st.none() | st.integers(0, 2**40),
    ),
    max_size=5,
).map(tuple)


@given(segments=entries, partition=st.integers(0, 99))
def test_a_digest_decodes_back_from_its_bytes_and_its_signature_holds(
    segments: tuple[SegmentEntry, ...], partition: int
) -> None:
    digest = next_digest("t.turn-events", partition, None, segments, at_ms=AT_MS, key=KEY)
    assert decode_digest(digest.encode()) == digest
    assert (digest.index, digest.prev, digest.key_id) == (0, GENESIS_HASH, KEY_ID)
    assert signature_problem(digest, KEYRING) is None


@given(segments=entries, later=entries)
def test_each_digest_names_the_hash_of_the_one_before(
    segments: tuple[SegmentEntry, ...], later: tuple[SegmentEntry, ...]
) -> None:
    first = next_digest("t", 0, None, segments, at_ms=AT_MS, key=KEY)
    second = next_digest("t", 0, first, later, at_ms=AT_MS + 1, key=KEY)
    assert (second.index, second.prev) == (1, first.hash())
    assert first.hash() != second.hash()


@given(segments=entries.filter(bool), data=st.data())
def test_any_changed_signed_field_breaks_the_signature(
    segments: tuple[SegmentEntry, ...], data: st.DataObject
) -> None:
    digest = next_digest("t", 0, None, segments, at_ms=AT_MS, key=KEY)
    which = data.draw(st.sampled_from(["partition", "index", "prev", "at_ms", "segment"]))
    changed: ArchiveDigest
    if which == "segment":
        i = data.draw(st.integers(0, len(segments) - 1))
        entry = segments[i]
        moved = replace(entry, records=entry.records + 1)
        changed = replace(digest, segments=(*segments[:i], moved, *segments[i + 1 :]))
    elif which == "prev":
        changed = replace(digest, prev="1" * 64)
    else:
        changed = replace(digest, **{which: getattr(digest, which) + 1})
    assert signature_problem(changed, KEYRING) == "the signature does not verify"
    assert changed.hash() != digest.hash()


@given(segments=entries, cut=st.integers(0, 400), byte=st.integers(0, 255))
def test_bytes_changed_anywhere_never_decode_to_the_same_digest(
    segments: tuple[SegmentEntry, ...], cut: int, byte: int
) -> None:
    digest = next_digest("t", 0, None, segments, at_ms=AT_MS, key=KEY)
    data = bytearray(digest.encode())
    at = cut % len(data)
    if data[at] == byte:
        return
    data[at] = byte
    decoded = decode_digest(bytes(data))
    assert decoded != digest
    if decoded is not None:  # still canonical JSON: then the signature tells
        assert signature_problem(decoded, KEYRING) is not None


def test_a_key_outside_the_keyring_or_outside_its_validity_is_named() -> None:
    digest = next_digest("t", 0, None, (), at_ms=AT_MS, key=KEY)
    other = signing_key(b"\x09" * 32, "another-key")
    assert signature_problem(digest, keyring_of(other)) == f"key {KEY_ID!r} is not in the keyring"
    revoked = Keyring(
        {
            KEY_ID: KeyEntry(
                KEY_ID,
                KEY.public_key(),
                datetime(2020, 1, 1, tzinfo=UTC),
                datetime(2021, 1, 1, tzinfo=UTC),
            )
        }
    )
    problem = signature_problem(digest, revoked)
    assert problem is not None
    assert "outside key" in problem
    # Another key under the same id: the signature fails.
    impostor = Keyring(
        {KEY_ID: KeyEntry(KEY_ID, other.public_key(), datetime(2020, 1, 1, tzinfo=UTC))}
    )
    assert signature_problem(digest, impostor) == "the signature does not verify"


def test_a_checkpoint_signature_never_holds_for_a_digest() -> None:
    """The archive signs in its own domain: bytes a publisher's key signed as a
    checkpoint are no digest's signature."""
    digest = next_digest("t", 0, None, (), at_ms=AT_MS, key=KEY)
    forged = replace(digest, signature=KEY.sign(CHECKPOINT_DOMAIN + digest.body()))
    assert signature_problem(forged, KEYRING) == "the signature does not verify"
