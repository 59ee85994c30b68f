"""The per-stream hash chain's primitives: a stream's id, the chain hash of a stored
message (SHA-256 over ``CHAIN_DOMAIN`` and its Avro body, framing left out) and the hash
a stream starts from. See ``turnaudit.identity`` for the model."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from turnaudit.serialization.framing import body_start

CHAIN_DOMAIN = b"turnaudit.chain.v1\x00"
GENESIS_HASH = "0" * 64
# The legacy stream of v1/v2 events, which carry no producer identity.
LEGACY_PRODUCER = ""

StreamId = tuple[str, str]  # (session_id, producer_id)


def avro_body(value: bytes) -> bytes:
    """The Avro body of a framed TurnEvent message (the whole value if unframed).

    The chain covers the body, not the framing header (``serialization.framing``),
    so a stream copied between registries keeps its chain."""
    return value[body_start(value) :]


_DOMAIN_DIGEST = hashlib.sha256(CHAIN_DOMAIN)


def chain_hash(value: bytes) -> str:
    """The chain hash of a framed message: hex SHA-256 of the domain tag and its Avro body."""
    digest = _DOMAIN_DIGEST.copy()
    start = body_start(value)
    digest.update(memoryview(value)[start:] if start else value)
    return digest.hexdigest()


def stream_of(event: Mapping[str, Any]) -> StreamId:
    return (event["session_id"], event.get("producer_id") or LEGACY_PRODUCER)


def describe_stream(stream: StreamId) -> str:
    session, producer = stream
    return f"session {session} / producer {producer or '(none: v1/v2)'}"
