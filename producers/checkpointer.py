"""The publisher's signed checkpoints, written by the heads thread (never by ``publish()``).

``Checkpointer`` is fed, by ``HeadsFile``'s background thread at each head write, the
heads of the streams that advanced and how many turns were handed on since. Once the
checkpoint interval has passed, or the count of turns reached ``max_turns`` (``publish()``
then wakes the thread: one counter and one comparison on its path), it builds the
checkpoint of the streams advanced since the previous one, chains it (``prev``: that one's
digest), signs it and produces it to ``<prefix>checkpoints``. A last one (``final``) is
written on a clean close. A checkpoint the broker did not take is sent again at the next
tick, in order; until then later ones wait behind it (the chain is never written with a
hole in it by this publisher).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol

import structlog

from turnaudit.checkpoints import Checkpoint, canonical_heads, sign
from turnaudit.identity import GENESIS_HASH, LEGACY_PRODUCER, StreamId
from turnaudit.kafka.producer import (
    DeliveredMessage,
    DeliveryCallback,
    DeliveryError,
    OnFull,
    ProduceError,
    QueueFullError,
)
from turnaudit.signing_keys import CheckpointSettings
from turnaudit.stream_heads import StreamHead
from turnaudit.topic_names import TopicNames

log = structlog.get_logger("turnaudit.publisher")


class CheckpointProducer(Protocol):
    """What the checkpointer needs of a producer (``KafkaProducer`` is one)."""

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        on_delivery: DeliveryCallback | None = None,
        on_full: OnFull | None = None,
    ) -> None: ...

    def poll(self, timeout: float = 0.0) -> int: ...

    def flush(self, timeout: float) -> int: ...


class Checkpointer:
    """Builds, signs and sends one publisher's checkpoints; see the module docstring.
    Used by one thread at a time (the heads thread, then ``close``)."""

    def __init__(
        self,
        settings: CheckpointSettings,
        *,
        producer_id: str,
        producer: CheckpointProducer,
        prefix: str,
        schemas: Callable[[], Iterable[bytes]] = tuple,
    ) -> None:
        if settings.key is None:
            raise ValueError("a checkpointer needs a signing key")
        self._key = settings.key
        self.interval_s = settings.interval_s
        self.max_turns = settings.max_turns
        self.producer_id = producer_id
        self._producer = producer
        # The writer schemas the publisher wrote turns with so far (read at signing).
        self._schemas = schemas
        self._topic = TopicNames(prefix).checkpoints
        self._pending: dict[StreamId, StreamHead] = {}
        self._turns = 0
        self._last = time.monotonic()
        self._index = 0
        self._prev = GENESIS_HASH
        self._prev_at = 0  # when the previous checkpoint was signed (epoch ms)
        self._unsent: list[Checkpoint] = []  # signed, not yet acknowledged, in chain order
        self._in_flight: set[str] = set()
        self.written = 0  # checkpoints the broker acknowledged
        self.failures = 0

    def advance(self, heads: Iterable[StreamHead], turns: int) -> None:
        """Streams that advanced (their new heads) and the turns handed on since the last
        call."""
        for head in heads:
            if head.producer_id != LEGACY_PRODUCER:  # v1/v2 streams carry no chain
                self._pending[head.stream] = head
        self._turns += turns

    def turns_left(self) -> int:
        """Turns until the count makes a checkpoint due (at least 1)."""
        return max(1, self.max_turns - self._turns)

    def unsent(self) -> int:
        """Checkpoints signed and not yet acknowledged (read from any thread: a length)."""
        return len(self._unsent)

    def due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return bool(self._pending) and (
            now - self._last >= self.interval_s or self._turns >= self.max_turns
        )

    def tick(self, *, final: bool = False) -> None:
        """Write a checkpoint when one is due (or ``final``), then send what is unsent."""
        if final or self.due():
            self._checkpoint(final)
        self._send()
        self._producer.poll(0)

    def _checkpoint(self, final: bool) -> None:
        heads = canonical_heads(self._pending.values())
        checkpoint = sign(
            Checkpoint(
                producer_id=self.producer_id,
                index=self._index,
                prev=self._prev,
                at_ms=time.time_ns() // 1_000_000,
                key_id=self._key.key_id,
                final=final,
                interval_ms=round(self.interval_s * 1000),
                max_turns=self.max_turns,
                heads=heads,
                schemas=tuple(sorted({fp.hex() for fp in self._schemas()})),
                prev_at_ms=self._prev_at,
            ),
            self._key,
        )
        self._index += 1
        self._prev = checkpoint.digest()
        self._prev_at = checkpoint.at_ms
        self._pending.clear()
        self._turns = 0
        self._last = time.monotonic()
        self._unsent.append(checkpoint)

    def _send(self) -> None:
        for checkpoint in self._unsent:
            digest = checkpoint.digest()
            if digest in self._in_flight:
                continue
            try:
                self._producer.produce(
                    self._topic,
                    checkpoint.encode(),
                    checkpoint.key(),
                    on_delivery=self._reported(digest),
                    on_full="raise",
                )
            except (QueueFullError, ProduceError) as exc:
                self.failures += 1
                log.warning("checkpoint_not_sent", index=checkpoint.index, error=str(exc))
                return
            self._in_flight.add(digest)

    def _reported(self, digest: str) -> _Report:
        return _Report(self, digest)

    def _acknowledged(self, digest: str, ok: bool) -> None:
        self._in_flight.discard(digest)
        if ok:
            self.written += 1
            self._unsent = [c for c in self._unsent if c.digest() != digest]
        else:
            self.failures += 1  # sent again at the next tick

    def close(self, timeout: float) -> bool:
        """The final checkpoint, sent and flushed; True once every checkpoint is stored."""
        deadline = time.monotonic() + timeout
        self.tick(final=True)
        while self._unsent and time.monotonic() < deadline:
            self._producer.flush(max(0.0, min(1.0, deadline - time.monotonic())))
            self._send()
        if self._unsent:
            log.error(
                "checkpoints_unsent", count=len(self._unsent), first_index=self._unsent[0].index
            )
        return not self._unsent


class _Report:
    """A delivery callback bound to one checkpoint (no closure over the key)."""

    __slots__ = ("_digest", "_owner")

    def __init__(self, owner: Checkpointer, digest: str) -> None:
        self._owner = owner
        self._digest = digest

    def __call__(self, err: DeliveryError | None, _msg: DeliveredMessage) -> None:
        self._owner._acknowledged(self._digest, err is None)
