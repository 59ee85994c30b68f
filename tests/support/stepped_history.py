"""Turns through the replay's stepped metrics output, in process: the OpenMetrics history text."""

from __future__ import annotations

from pathlib import Path

from tests.support.events import encode, turn
from turnaudit.consumers.replay.history import SteppedMetricsReplayOutput
from turnaudit.kafka.decoders import decoder_for
from turnaudit.records import StoredRecord
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

STEP_MS = 60_000
BASE_MS = 29_833_333 * STEP_MS  # a step boundary


def records(turns: list[tuple[int, str, bool]]) -> list[StoredRecord]:
    """(milliseconds into the range, pack, refused) -> stored messages, one session each."""
    out = []
    for i, (at_ms, pack, refused) in enumerate(turns):
        event = turn(f"s-{i}", 0, version=4, pack=pack)
        event["occurred_at"] = BASE_MS + at_ms
        event["verdicts"]["refusal_emitted"] = refused
        event["verdicts"]["hedge_injected"] = False
        out.append(StoredRecord("t.turn-events", 0, i, f"s-{i}".encode(), encode(event)))
    return out


def replayed(turns: list[tuple[int, str, bool]], tmp: Path) -> bytes:
    """The history the output writes to ``tmp/h.om`` for these turns, read in two batches."""
    decode = decoder_for(KafkaSettings(topics=TopicNames("t.")), schemas_topic=False)
    output = SteppedMetricsReplayOutput(decode, "r1", tmp / "h.om", STEP_MS)
    output.open(0)
    stored = records(turns)
    for batch in (stored[: len(stored) // 2], stored[len(stored) // 2 :]):
        assert output.write(batch) == 0
    output.finish()
    output.close()
    return (tmp / "h.om").read_bytes()
