"""The per-stream hash chain's primitives: a stream's id, the chain hash of a stored
message and the hash a stream starts from. See ``turnaudit.identity`` for the model.

The chain rule (the native tracker, ``native/src/track/chain.rs``, computes the same; a
differential test over random bodies and fingerprints holds the two to it):

* a turn written with a TurnEvent v1..v4 writer schema (``LEGACY_CHAIN_FINGERPRINTS``)
  hashes ``CHAIN_DOMAIN`` and its Avro body, framing left out (so old chains verify as
  they were);
* a turn of any other writer schema (v5 on, and any schema learned at run time) hashes
  ``SCHEMA_CHAIN_DOMAIN``, the writer schema's 8-byte Rabin fingerprint of its Parsing
  Canonical Form (little-endian, as the single-object header carries it; for Confluent
  framing the fingerprint of the schema the id resolves to) and its Avro body: the same
  body re-framed under another writer schema, which would decode to another meaning, has
  another chain hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from turnaudit.serialization.framing import (
    SINGLE_OBJECT_HEADER_LEN,
    SINGLE_OBJECT_MAGIC,
    body_start,
)

CHAIN_DOMAIN = b"turnaudit.chain.v1\x00"
SCHEMA_CHAIN_DOMAIN = b"turnaudit.chain.v2\x00"
# TurnEvent v1..v4 (schemas/fingerprints.txt): fixed for good, whatever ships later.
LEGACY_CHAIN_FINGERPRINTS = frozenset(
    bytes.fromhex(h)
    for h in ("877148bd22bee4a2", "2be42553fbf66611", "276ba4d900c08546", "473356c1b859a1bc")
)
GENESIS_HASH = "0" * 64
# The legacy stream of v1/v2 events, which carry no producer identity.
LEGACY_PRODUCER = ""

StreamId = tuple[str, str]  # (session_id, producer_id)


def avro_body(value: bytes) -> bytes:
    """The Avro body of a framed TurnEvent message (the whole value if unframed).

    The chain covers the body, not the framing header (``serialization.framing``),
    so a stream copied between registries keeps its chain."""
    return value[body_start(value) :]


def header_fingerprint(value: bytes) -> bytes | None:
    """The writer schema fingerprint a single-object message names (None otherwise)."""
    if value[:2] == SINGLE_OBJECT_MAGIC and len(value) >= SINGLE_OBJECT_HEADER_LEN:
        return value[2:SINGLE_OBJECT_HEADER_LEN]
    return None


_DOMAIN_DIGEST = hashlib.sha256(CHAIN_DOMAIN)


def chain_hash(value: bytes, fingerprint: bytes | None = None) -> str:
    """The chain hash of a framed message (hex SHA-256) under its writer schema:
    ``fingerprint``, else the one its single-object header names. Without either (an
    unframed message, or a Confluent one whose schema id was not resolved) the v1 rule."""
    start = body_start(value)
    fp = fingerprint if fingerprint is not None else header_fingerprint(value)
    if fp is None or fp in LEGACY_CHAIN_FINGERPRINTS:
        digest = _DOMAIN_DIGEST.copy()
    else:
        if len(fp) != 8:
            raise ValueError("a writer schema fingerprint is 8 bytes")
        digest = hashlib.sha256(SCHEMA_CHAIN_DOMAIN)
        digest.update(fp)
    digest.update(memoryview(value)[start:] if start else value)
    return digest.hexdigest()


def binds_schema(fingerprint: bytes | None) -> bool:
    """Whether turns of this writer schema hash its fingerprint (v5 on)."""
    return fingerprint is not None and fingerprint not in LEGACY_CHAIN_FINGERPRINTS


def stream_of(event: Mapping[str, Any]) -> StreamId:
    return (event["session_id"], event.get("producer_id") or LEGACY_PRODUCER)


def describe_stream(stream: StreamId) -> str:
    session, producer = stream
    return f"session {session} / producer {producer or '(none: v1/v2)'}"
