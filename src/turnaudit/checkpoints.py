"""Signed checkpoints: a publisher's word, under its Ed25519 key, on where its streams stood.

After CloudTrail's digest files and Certificate Transparency's signed tree heads: each
publisher with a signing key writes, every checkpoint interval (or sooner, after a bounded
count of turns), a checkpoint of the streams it advanced since its previous one (session
id, producer id, last position handed on, that position's chain hash), chained to that
previous checkpoint (``prev``: its digest) and signed. A last one (``final``) is written
on a clean close. Because a turn's chain hash covers its predecessor's hash, one signed
head vouches for every earlier position of its stream.

The checkpoints live on the ``<prefix>checkpoints`` topic, each under its own key
(producer id, index, digest): compaction keeps them all (it only folds a re-sent copy), so
the chain survives it; retention (the turn topic's plus a margin) removes a chain's
beginning once every turn it signed is past the turn topic's retention, and the chain then
begins at its first retained checkpoint (``RetentionStart``).

Pure: canonical bytes, signing, verifying, the chain, the keyring's validity by date. No
I/O; the key files are read by ``turnaudit.signing_keys``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
)

from turnaudit.errors import ConfigurationError
from turnaudit.identity import StreamId
from turnaudit.keyring import (
    KeyEntry,
    Keyring,
    UnsignedAllowance,
    keyring_entry_toml,
    parse_keyring,
)
from turnaudit.stream_heads import StreamHead

# 2: a checkpoint names the writer schemas (fingerprints) its producer wrote chained
# turns with. 3: it says when its predecessor was signed (``prev_at_ms``), so a chain whose
# beginning retention removed can tell how old what is gone was. Format 1 and 2
# checkpoints still verify as they were signed.
FORMAT_VERSION = 3
FORMAT_VERSIONS = (1, 2, 3)
_SIGNED_DOMAIN = b"turnaudit-checkpoint-v1\x00"
_DIGEST_DOMAIN = b"turnaudit-checkpoint-digest-v1\x00"


__all__ = [  # the keyring's types, read where checkpoints are judged
    "KeyEntry",
    "Keyring",
    "UnsignedAllowance",
    "keyring_entry_toml",
    "parse_keyring",
]


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
    # Format 3: when the previous checkpoint of the chain was signed (its ``at_ms``; 0 for
    # index 0).
    prev_at_ms: int = 0
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
        if self.format >= 3:
            fields["prev_at_ms"] = self.prev_at_ms
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
    """A checkpoint (format 1, 2 or 3), or None for a record that is not one (never
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
        prev_at_ms = _count(data["prev_at_ms"]) if form >= 3 else 0
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
            prev_at_ms=prev_at_ms,
            format=form,
        )
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    fields = (
        _FIELDS | ({"schemas"} if form >= 2 else set()) | ({"prev_at_ms"} if form >= 3 else set())
    )
    if set(data) != fields or heads != canonical_heads(heads):
        return None  # not in canonical form: a signature could not hold anyway
    if schemas != tuple(sorted(set(schemas))):
        return None
    return checkpoint


_LATER_FIELDS = {"schemas": 2, "prev_at_ms": 3}  # the format each came with
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
