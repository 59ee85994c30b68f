"""Signed checkpoints: a publisher's word, under its Ed25519 key, on where its streams stood.

After CloudTrail's digest files and Certificate Transparency's signed tree heads: each
publisher with a signing key writes, every checkpoint interval (or sooner, after a bounded
count of turns), a checkpoint of the streams it advanced since its previous one (session
id, producer id, last position handed on, that position's chain hash), chained to that
previous checkpoint (``prev``: its digest) and signed. A last one (``final``) is written
on a clean close. Because a turn's chain hash covers its predecessor's hash, one signed
head vouches for every earlier position of its stream.

The checkpoints live on the compacted ``<prefix>checkpoints`` topic, each under its own
key (producer id, index, digest): compaction keeps them all (it only folds a re-sent
copy), so the chain survives it.

Pure: canonical bytes, signing, verifying, the chain, the keyring's validity by date. No
I/O; the key files are read by ``turnaudit.signing_keys``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
)

from turnaudit.errors import ConfigurationError
from turnaudit.identity import GENESIS_HASH, StreamId
from turnaudit.keyring import (
    KeyEntry,
    Keyring,
    UnsignedAllowance,
    keyring_entry_toml,
    millis_time,
    parse_keyring,
)
from turnaudit.stream_heads import StreamHead

CHECKPOINTS_SUFFIX = "checkpoints"
# 2: a checkpoint names the writer schemas (fingerprints) its producer wrote chained
# turns with. Format 1 checkpoints (no ``schemas``) still verify as they were signed.
FORMAT_VERSION = 2
FORMAT_VERSIONS = (1, 2)
_SIGNED_DOMAIN = b"turnaudit-checkpoint-v1\x00"
_DIGEST_DOMAIN = b"turnaudit-checkpoint-digest-v1\x00"


__all__ = [  # the keyring's types, read where checkpoints are judged
    "KeyEntry",
    "Keyring",
    "UnsignedAllowance",
    "keyring_entry_toml",
    "parse_keyring",
]


def checkpoints_topic(prefix: str) -> str:
    return f"{prefix}{CHECKPOINTS_SUFFIX}"


class SigningKey:
    """A private Ed25519 key and its id. Its repr, str and pickling never show the key."""

    __slots__ = ("_key", "key_id")

    def __init__(self, key: Ed25519PrivateKey, key_id: str) -> None:
        if not key_id:
            raise ConfigurationError("a signing key needs a key id")
        self._key = key
        self.key_id = key_id

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def public_key(self) -> Ed25519PublicKey:
        return self._key.public_key()

    def public_pem(self) -> str:
        return public_pem(self._key.public_key())

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self.key_id!r}, private key hidden)"

    __str__ = __repr__

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a signing key is not pickled")


def public_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode("ascii")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One checkpoint of one publisher. ``heads`` are sorted by stream (canonical)."""

    producer_id: str
    index: int  # 0, 1, 2 … within this publisher's chain
    prev: str  # digest of the previous checkpoint of the chain (GENESIS_HASH for index 0)
    at_ms: int  # wall time of signing, epoch milliseconds (as the signer says)
    key_id: str
    final: bool  # written on a clean close: the publisher advanced nothing after it
    interval_ms: int  # the publisher's checkpoint interval
    max_turns: int  # … and its count of turns between checkpoints
    heads: tuple[StreamHead, ...]
    signature: bytes = b""
    # Format 2: the writer schemas (hex fingerprints, sorted) the producer wrote turns with.
    schemas: tuple[str, ...] = ()
    format: int = FORMAT_VERSION

    def fields(self) -> dict[str, object]:
        """Every signed field, as the canonical JSON holds it."""
        fields: dict[str, object] = {
            "v": self.format,
            "producer_id": self.producer_id,
            "index": self.index,
            "prev": self.prev,
            "at_ms": self.at_ms,
            "key_id": self.key_id,
            "final": self.final,
            "interval_ms": self.interval_ms,
            "max_turns": self.max_turns,
            "heads": [[h.session_id, h.producer_id, h.sequence, h.hash] for h in self.heads],
        }
        if self.format >= 2:
            fields["schemas"] = list(self.schemas)
        return fields

    def body(self) -> bytes:
        """The canonical bytes the signature covers (everything but the signature)."""
        return json.dumps(
            self.fields(),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
        ).encode("ascii")

    def digest(self) -> str:
        """What the next checkpoint's ``prev`` names: hex SHA-256 of body and signature."""
        return hashlib.sha256(_DIGEST_DOMAIN + self.body() + b"\x00" + self.signature).hexdigest()

    def key(self) -> bytes:
        """The record key: its own per checkpoint, so compaction never folds the chain."""
        return f"{self.producer_id}\x00{self.index:012d}\x00{self.digest()[:16]}".encode()

    def encode(self) -> bytes:
        body = self.fields()
        body["signature"] = base64.b64encode(self.signature).decode("ascii")
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode(
            "ascii"
        )

    def streams(self) -> set[StreamId]:
        return {h.stream for h in self.heads}


def canonical_heads(heads: Iterable[StreamHead]) -> tuple[StreamHead, ...]:
    """One head per stream (the highest position), sorted by stream."""
    best: dict[StreamId, StreamHead] = {}
    for head in heads:
        have = best.get(head.stream)
        if have is None or head.sequence > have.sequence:
            best[head.stream] = head
    return tuple(best[s] for s in sorted(best))


def sign(checkpoint: Checkpoint, key: SigningKey) -> Checkpoint:
    """The checkpoint under ``key``: its key id set, its body signed."""
    unsigned = replace(checkpoint, key_id=key.key_id, signature=b"")
    return replace(unsigned, signature=key.sign(_SIGNED_DOMAIN + unsigned.body()))


def signature_holds(checkpoint: Checkpoint, public_key: Ed25519PublicKey) -> bool:
    try:
        public_key.verify(checkpoint.signature, _SIGNED_DOMAIN + checkpoint.body())
    except InvalidSignature:
        return False
    return True


def decode_checkpoint(value: bytes | str | None) -> Checkpoint | None:
    """A checkpoint (format 1 or 2), or None for a record that is not one (never
    raises). The result re-encodes to the same canonical bytes, or it is not taken."""
    if value is None:
        return None
    try:
        data = json.loads(value)
        if not isinstance(data, dict) or data.get("v") not in FORMAT_VERSIONS:
            return None
        form = data["v"]
        heads = tuple(
            StreamHead(_text(s), _text(p), _count(q), _text(h)) for s, p, q, h in data["heads"]
        )
        schemas = tuple(_text(s) for s in data["schemas"]) if form >= 2 else ()
        checkpoint = Checkpoint(
            producer_id=_text(data["producer_id"]),
            index=_count(data["index"]),
            prev=_text(data["prev"]),
            at_ms=_count(data["at_ms"]),
            key_id=_text(data["key_id"]),
            final=_flag(data["final"]),
            interval_ms=_count(data["interval_ms"]),
            max_turns=_count(data["max_turns"]),
            heads=heads,
            signature=base64.b64decode(_text(data["signature"]), validate=True),
            schemas=schemas,
            format=form,
        )
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    fields = _FIELDS | ({"schemas"} if form >= 2 else set())
    if set(data) != fields or heads != canonical_heads(heads):
        return None  # not in canonical form: a signature could not hold anyway
    if schemas != tuple(sorted(set(schemas))):
        return None
    return checkpoint


_FIELDS = {
    "v",
    "producer_id",
    "index",
    "prev",
    "at_ms",
    "key_id",
    "final",
    "interval_ms",
    "max_turns",
    "heads",
    "signature",
}


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError("not a count")
    return value


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError("not a flag")
    return value


# -- judging checkpoints ------------------------------------------------------------------

Problem = Literal["bad_signature", "unknown_key", "key_not_valid", "chain_break"]


@dataclass(frozen=True)
class Judged:
    """A checkpoint as read, and what is wrong with it (None: valid)."""

    checkpoint: Checkpoint
    problem: Problem | None
    detail: str = ""
    offset: int | None = None  # where it was written on the checkpoints topic
    appended_ms: int | None = None  # when the broker appended it (LogAppendTime)


def judge_signature(
    checkpoint: Checkpoint, keyring: Keyring, appended_ms: int | None = None
) -> Judged:
    """Valid when a key of the keyring, valid at the signing time (and at the time the
    broker appended the record, when known), verifies the signature."""
    entry = keyring.keys.get(checkpoint.key_id)
    if entry is None:
        return Judged(checkpoint, "unknown_key", f"key {checkpoint.key_id!r} is not in the keyring")
    for moment_ms, what in ((checkpoint.at_ms, "signed"), (appended_ms, "appended")):
        if moment_ms is not None and not entry.valid_at(millis_time(moment_ms)):
            return Judged(
                checkpoint,
                "key_not_valid",
                f"{what} at "
                f"{millis_time(moment_ms).isoformat()}, outside key "
                f"{checkpoint.key_id!r}'s validity",
            )
    if not signature_holds(checkpoint, entry.public_key):
        return Judged(checkpoint, "bad_signature", "the signature does not verify")
    return Judged(checkpoint, None)


@dataclass(frozen=True)
class ChainReport:
    """Every checkpoint judged: signature, key, and its place in its producer's chain."""

    judged: tuple[Judged, ...]
    # Producers each of whose chains ends with a final checkpoint (a clean close).
    closed: frozenset[str]
    # Producers with at least one valid checkpoint.
    signing: frozenset[str] = frozenset()

    def valid(self) -> list[Checkpoint]:
        return [j.checkpoint for j in self.judged if j.problem is None]

    def invalid(self) -> list[Judged]:
        return [j for j in self.judged if j.problem is not None]

    def named_schemas(self) -> dict[str, frozenset[str]]:
        """Per producer whose valid checkpoints name writer schemas (format 2), every
        fingerprint (hex) they name. A producer with format 1 checkpoints only is absent:
        its turns are not held to schemas it never named."""
        named: dict[str, set[str]] = {}
        for checkpoint in self.valid():
            if checkpoint.format >= 2:
                named.setdefault(checkpoint.producer_id, set()).update(checkpoint.schemas)
        return {p: frozenset(s) for p, s in named.items()}


@dataclass(frozen=True, slots=True)
class ChainLink:
    """What a chain's next checkpoint must name: its producer, index and digest."""

    producer_id: str
    index: int
    digest: str


def link_of(checkpoint: Checkpoint) -> ChainLink:
    return ChainLink(checkpoint.producer_id, checkpoint.index, checkpoint.digest())


def follows(checkpoint: Checkpoint, before: ChainLink | None) -> bool:
    """Whether ``checkpoint`` continues its producer's chain from ``before`` (the
    checkpoint its ``prev`` names, None when there is none): index 0 names GENESIS, any
    other names its own producer's checkpoint of the index before."""
    if checkpoint.index == 0:
        return checkpoint.prev == GENESIS_HASH
    return (
        before is not None
        and before.digest == checkpoint.prev
        and before.producer_id == checkpoint.producer_id
        and before.index == checkpoint.index - 1
    )


def judge_chain(
    read: Sequence[tuple[Checkpoint, int | None]],
    keyring: Keyring,
    offsets: Mapping[str, int] | None = None,
) -> ChainReport:
    """Judge each (checkpoint, broker append time) read. A checkpoint with a valid
    signature whose ``prev`` names no checkpoint read (not GENESIS at index 0, or an
    index that is not its predecessor's plus one) breaks its chain: a checkpoint before
    it was removed. Copies of one checkpoint (same digest) count once. ``offsets``: where
    each (by digest) was read on the checkpoints topic, for the report."""
    offsets = offsets or {}
    seen: dict[str, Checkpoint] = {}
    judged: list[Judged] = []
    appended: dict[str, int | None] = {}
    for checkpoint, at in read:
        digest = checkpoint.digest()
        if digest not in seen:
            seen[digest] = checkpoint
            appended[digest] = at
    successors: set[str] = set()
    for digest, checkpoint in seen.items():
        verdict = replace(
            judge_signature(checkpoint, keyring, appended[digest]),
            offset=offsets.get(digest),
            appended_ms=appended[digest],
        )
        if verdict.problem is None:
            before = seen.get(checkpoint.prev)
            if not follows(checkpoint, None if before is None else link_of(before)):
                verdict = Judged(
                    checkpoint,
                    "chain_break",
                    f"checkpoint {checkpoint.index} of producer "
                    f"{checkpoint.producer_id} names a predecessor that is not "
                    "there (removed, or never signed)",
                    verdict.offset,
                    verdict.appended_ms,
                )
            else:
                successors.add(checkpoint.prev)
        judged.append(verdict)
    # A chain's last checkpoint: valid, and no valid checkpoint names it as predecessor.
    ends: dict[str, list[bool]] = {}
    for j in judged:
        if j.problem is None and j.checkpoint.digest() not in successors:
            ends.setdefault(j.checkpoint.producer_id, []).append(j.checkpoint.final)
    closed = frozenset(p for p, finals in ends.items() if all(finals))
    return ChainReport(tuple(judged), closed, frozenset(ends))
