"""A signed publisher run spread over simulated time, and what time retention keeps of it.

The publisher's real ``Checkpointer`` signs the checkpoints, on a simulated clock (one
turn every ``step_ms``, a checkpoint once ``interval_ms`` has passed, a final one on
close); the turns are one partition of the turn topic, stored at the time they were
handed on. ``retained`` applies retention as Kafka does: segments of ``segment``
records, the oldest first, each removed once its newest record is older than
``retention.ms`` (the turn topic's for turns, the turn topic's plus the margin for
checkpoints).
"""

from __future__ import annotations

from dataclasses import dataclass
from unittest import mock

from tests.support.checkpoints import RecordingProducer
from tests.support.identity_streams import Stamped
from turnaudit.checkpoints import Checkpoint, SigningKey, decode_checkpoint
from turnaudit.identity import chain_hash
from turnaudit.producers import checkpointer
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.signing_keys import CheckpointSettings
from turnaudit.stream_heads import StreamHead

V3_FP = shipped_catalog().version(3).fingerprint
HOUR_MS = 3_600_000


class SimulatedClock:
    """Stands for the ``time`` module the checkpointer reads."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def time_ns(self) -> int:
        return self.now_ms * 1_000_000

    def monotonic(self) -> float:
        return self.now_ms / 1000

    def time(self) -> float:
        return self.now_ms / 1000


@dataclass(frozen=True)
class TimedRun:
    turns: list[Stamped]  # one partition, in log order
    stored_ms: list[int]  # each turn's record timestamp
    checkpoints: list[Checkpoint]  # in append order

    def retained(self, *, now_ms: int, retention_ms: int, margin_ms: int, segment: int) -> Retained:
        """What the two topics hold at ``now_ms``: the turn topic's log start, and the
        index of the first checkpoint kept."""
        turn_start = _log_start(self.stored_ms, now_ms - retention_ms, segment)
        at = [c.at_ms for c in self.checkpoints]
        first_checkpoint = _log_start(at, now_ms - retention_ms - margin_ms, segment)
        return Retained(turn_start, first_checkpoint)


@dataclass(frozen=True)
class Retained:
    turn_log_start: int
    first_checkpoint: int


def _log_start(times: list[int], cutoff_ms: int, segment: int) -> int:
    """The first offset kept: whole segments go, oldest first, while their newest record
    is at or before ``cutoff_ms`` (the active segment too, once all of it is that old)."""
    start = 0
    while start < len(times) and max(times[start : start + segment]) <= cutoff_ms:
        start += segment
    return min(start, len(times))


def run_over_time(
    events: list[Stamped], key: SigningKey, *, start_ms: int, step_ms: int, interval_ms: int
) -> TimedRun:
    """``events`` handed on one every ``step_ms`` from ``start_ms`` by one publisher that
    signs a checkpoint once ``interval_ms`` has passed, and a final one on close."""
    clock = SimulatedClock(start_ms)
    sink = RecordingProducer()
    stored: list[int] = []
    with mock.patch.object(checkpointer, "time", clock):
        pid = events[0].event["producer_id"]
        writer = checkpointer.Checkpointer(
            CheckpointSettings(key, interval_s=interval_ms / 1000, max_turns=10**9),
            producer_id=pid,
            producer=sink,
            prefix="t.",
            schemas=lambda: (V3_FP,),
        )
        for i, s in enumerate(events):
            clock.now_ms = start_ms + i * step_ms
            stored.append(clock.now_ms)
            event = s.event
            head = StreamHead(event["session_id"], pid, event["sequence"], chain_hash(s.value))
            writer.advance([head], 1)
            writer.tick()
        clock.now_ms += step_ms
        assert writer.close(1.0)
    written = [decode_checkpoint(value) for _, value, _ in sink.stored]
    return TimedRun(events, stored, [c for c in written if c is not None])
