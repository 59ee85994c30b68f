"""The batch hand-over, pure: validate each record, hand the sink its turns,
set the rejected aside, and say which offsets the batch covers.

The runtime loop and the replay outputs both run batches through here; what
happens to a rejected record (a dead letter in a service, a count in a replay)
is the caller's ``reject``. Nothing here talks to Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

from turnaudit.consumers.runtime.sink import ConsumedTurn, Rejection
from turnaudit.dead_letters import DeadLetterReason, is_redriven
from turnaudit.records import Record


class Examine(Protocol):
    """A service's validation: any bytes become a checked turn or a rejection."""

    def __call__(
        self, value: bytes | None, key: bytes | None, topic: str, partition: int, offset: int
    ) -> ConsumedTurn | Rejection: ...


@dataclass(slots=True)
class HandedBatch:
    """What one batch came to."""

    next_offsets: dict[int, int] = field(default_factory=dict)  # per partition
    handed: int = 0  # turns the sink took
    rejected: int = 0  # records ``reject`` got
    redriven: int = 0  # of the handed turns, those redriven from the dead-letter topic


def hand_over(
    records: Sequence[Record],
    examine: Examine,
    take: Callable[[ConsumedTurn], None],
    reject: Callable[[Record, Rejection], None],
) -> HandedBatch:
    """Every record in order: a turn (a breaching one too, with its breaches)
    to ``take``; a record that cannot be read to ``reject``. The batch covers
    every record."""
    batch = HandedBatch()
    next_offsets = batch.next_offsets
    handed = rejected = redriven = 0
    for record in records:
        # record_position, inline: this loop runs once per message.
        topic, partition, offset = record.topic(), record.partition(), record.offset()
        if topic is None or partition is None or offset is None:
            continue  # only librdkafka's error events lack a position; the consumer drops them
        next_offsets[partition] = offset + 1
        try:
            turn = examine(record.value(), record.key(), topic, partition, offset)
        except Exception as exc:  # validations do not raise; if one does, still move on
            turn = Rejection(DeadLetterReason.UNDECODABLE, f"validation failed: {exc!r}")
        if type(turn) is ConsumedTurn:
            raw_headers = record.headers()  # None for a live turn: one call, no copy
            if raw_headers is not None and is_redriven(raw_headers):
                turn = turn._replace(redriven=True)
                redriven += 1
            take(turn)
            handed += 1
        else:
            reject(record, cast(Rejection, turn))
            rejected += 1
    batch.handed, batch.rejected, batch.redriven = handed, rejected, redriven
    return batch
