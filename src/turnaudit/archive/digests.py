"""Archive digests, after CloudTrail's digest files: a partition's archiver says, under its
Ed25519 key, which segments it wrote since its previous digest, and chains each digest
to the one before.

A digest names its topic and partition, its index (0, 1, 2 … per partition), ``prev``
(the hash of the digest before; ``GENESIS_HASH`` for index 0), when it was signed, the
key id, and every segment it covers: name, offset range, record count, size, SHA-256, and
``after``, the last offset of the partition's segment before it (None for the first one
archived), so a segment taken away between two others is seen even when every digest
is intact.

Signing and the keyring are the checkpoints' (``turnaudit.checkpoints.SigningKey``,
``turnaudit.keyring``): the same keys, the same validity dates; the signed domain is the
archive's own, so a checkpoint's signature never holds for a digest. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass, replace

from cryptography.exceptions import InvalidSignature

from turnaudit.archive.segments import SegmentName, partition_folder
from turnaudit.chain import GENESIS_HASH
from turnaudit.checkpoints import SigningKey
from turnaudit.keyring import Keyring, millis_time

DIGEST_VERSION = 1
DIGEST_FOLDER = "digests"
_SIGNED_DOMAIN = b"turnaudit-archive-digest-v1\x00"
_HASH_DOMAIN = b"turnaudit-archive-digest-hash-v1\x00"
_DIGEST_NAME = re.compile(r"^(\d{10})\.json$")
_FIELDS = {"v", "topic", "partition", "index", "prev", "at_ms", "key_id", "segments"}
_ENTRY_FIELDS = {"first", "last", "records", "bytes", "sha256", "after"}


@dataclass(frozen=True, slots=True)
class SegmentEntry:
    """One segment as a digest lists it."""

    first: int
    last: int
    records: int
    bytes: int
    sha256: str
    after: int | None  # last offset of the partition's segment before (None: none before)

    def name(self, topic: str, partition: int) -> SegmentName:
        return SegmentName(topic, partition, self.first, self.last)

    def fields(self) -> dict[str, object]:
        return {
            "first": self.first,
            "last": self.last,
            "records": self.records,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "after": self.after,
        }


@dataclass(frozen=True, slots=True)
class ArchiveDigest:
    """One digest of one partition's archive."""

    topic: str
    partition: int
    index: int
    prev: str  # hash of digest index-1 (GENESIS_HASH for index 0)
    at_ms: int  # when it was signed, epoch milliseconds
    key_id: str
    segments: tuple[SegmentEntry, ...]
    signature: bytes = b""

    def fields(self) -> dict[str, object]:
        return {
            "v": DIGEST_VERSION,
            "topic": self.topic,
            "partition": self.partition,
            "index": self.index,
            "prev": self.prev,
            "at_ms": self.at_ms,
            "key_id": self.key_id,
            "segments": [s.fields() for s in self.segments],
        }

    def body(self) -> bytes:
        """The canonical bytes the signature covers."""
        return _canonical(self.fields())

    def hash(self) -> str:
        """What the next digest's ``prev`` names: hex SHA-256 of body and signature."""
        return hashlib.sha256(_HASH_DOMAIN + self.body() + b"\x00" + self.signature).hexdigest()

    def encode(self) -> bytes:
        fields = self.fields()
        fields["signature"] = base64.b64encode(self.signature).decode("ascii")
        return _canonical(fields)

    def path(self) -> str:
        return digest_path(self.topic, self.partition, self.index)

    def names(self) -> list[SegmentName]:
        return [s.name(self.topic, self.partition) for s in self.segments]


def digest_path(topic: str, partition: int, index: int) -> str:
    return f"{partition_folder(topic, partition)}/{DIGEST_FOLDER}/{index:010d}.json"


def digest_index(file_name: str) -> int | None:
    """The index a digest file's name says, or None when it is no digest's name."""
    found = _DIGEST_NAME.match(file_name)
    return None if found is None else int(found[1])


def _canonical(fields: dict[str, object]) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign_digest(digest: ArchiveDigest, key: SigningKey) -> ArchiveDigest:
    unsigned = replace(digest, key_id=key.key_id, signature=b"")
    return replace(unsigned, signature=key.sign(_SIGNED_DOMAIN + unsigned.body()))


def next_digest(
    topic: str,
    partition: int,
    before: ArchiveDigest | None,
    segments: tuple[SegmentEntry, ...],
    *,
    at_ms: int,
    key: SigningKey,
) -> ArchiveDigest:
    """The digest after ``before`` (None: the partition's first), signed."""
    index, prev = (0, GENESIS_HASH) if before is None else (before.index + 1, before.hash())
    return sign_digest(
        ArchiveDigest(topic, partition, index, prev, at_ms, key.key_id, segments), key
    )


def decode_digest(data: bytes) -> ArchiveDigest | None:
    """A digest, or None for bytes that are not one in canonical form (never raises)."""
    try:
        fields = json.loads(data)
        if not isinstance(fields, dict) or fields.get("v") != DIGEST_VERSION:
            return None
        if set(fields) != _FIELDS | {"signature"}:
            return None
        entries = []
        for entry in fields["segments"]:
            if not isinstance(entry, dict) or set(entry) != _ENTRY_FIELDS:
                return None
            after = entry["after"]
            entries.append(
                SegmentEntry(
                    _count(entry["first"]),
                    _count(entry["last"]),
                    _count(entry["records"]),
                    _count(entry["bytes"]),
                    _text(entry["sha256"]),
                    None if after is None else _count(after),
                )
            )
        digest = ArchiveDigest(
            _text(fields["topic"]),
            _count(fields["partition"]),
            _count(fields["index"]),
            _text(fields["prev"]),
            _count(fields["at_ms"]),
            _text(fields["key_id"]),
            tuple(entries),
            base64.b64decode(_text(fields["signature"]), validate=True),
        )
    except (ValueError, TypeError, binascii.Error):
        return None
    return digest if digest.encode() == data else None


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError("not a count")
    return value


def signature_problem(digest: ArchiveDigest, keyring: Keyring) -> str | None:
    """Why the digest's signature does not hold under ``keyring`` (None: it holds): an
    unknown key, a key not valid when it was signed, or a signature that fails."""
    entry = keyring.keys.get(digest.key_id)
    if entry is None:
        return f"key {digest.key_id!r} is not in the keyring"
    moment = millis_time(digest.at_ms)
    if not entry.valid_at(moment):
        return f"signed at {moment.isoformat()}, outside key {digest.key_id!r}'s validity"
    try:
        entry.public_key.verify(digest.signature, _SIGNED_DOMAIN + digest.body())
    except InvalidSignature:
        return "the signature does not verify"
    return None
