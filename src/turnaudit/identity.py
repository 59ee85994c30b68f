"""Durable turn identity and the per-stream hash chain (PIPELINE.md contracts 5-7).

Modelled on Kafka's idempotent producer, which names a record by a producer
id plus a sequence number per partition:

* **A turn** is identified by its ``event_id`` (globally unique: 80 random
  bits per publisher process plus a counter). It is the dedupe key.
* **An ordered stream** of a session's turns is ``(session_id, producer_id)``.
  ``producer_id`` is a random UUID per publisher instance, so a restarted
  runtime, a failover, a second replica serving the same session or the next
  process draining a spool (whose bytes were stamped before spooling) each
  write their own stream and never reuse a position of another.
* **Position and chain**: ``sequence`` counts from 0 within the stream, and
  ``prev_hash`` is the chain hash of the stream's previous event (64 zeros at
  0). An event's chain hash is SHA-256 over ``CHAIN_DOMAIN`` and the Avro
  binary body as written (``prev_hash`` included), so removing, inserting,
  reordering or editing a stored event breaks the chain at its successor,
  detectable by anyone holding the stream, without the producer.

``TurnStamper`` is the producer side, ``StreamTracker`` the consumer side
(dedupe, gaps, late arrivals, chain checks), shared by the services and
``turnaudit verify``.

Where each part lives: ``turnaudit.chain`` (stream ids, the chain hash),
``turnaudit.stamping`` (the producer side), ``turnaudit.stream_tracking`` (the consumer
side). This module re-exports them, the one import path for turn identity.
"""

from __future__ import annotations

from turnaudit.chain import (
    CHAIN_DOMAIN,
    GENESIS_HASH,
    LEGACY_PRODUCER,
    StreamId,
    avro_body,
    chain_hash,
    describe_stream,
    stream_of,
)
from turnaudit.stamping import EventIds, TurnStamper
from turnaudit.stream_tracking import (
    BREACHES,
    COUNTED,
    REDELIVERED,
    ForgottenIds,
    Placement,
    Seen,
    StreamTracker,
    TrackResult,
    TurnOutcome,
)

__all__ = [
    "BREACHES",
    "CHAIN_DOMAIN",
    "COUNTED",
    "GENESIS_HASH",
    "LEGACY_PRODUCER",
    "REDELIVERED",
    "EventIds",
    "ForgottenIds",
    "Placement",
    "Seen",
    "StreamId",
    "StreamTracker",
    "TrackResult",
    "TurnOutcome",
    "TurnStamper",
    "avro_body",
    "chain_hash",
    "describe_stream",
    "stream_of",
]
