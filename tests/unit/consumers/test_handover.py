"""The batch hand-over against a reference model, and over real validation.

Any batch of records, any mix of valid turns, breaching turns, rejections and
a validation that raises: every record is covered by the batch's next
offsets; valid turns reach the sink in order; rejected records reach
``reject`` and never the sink; a breaching turn goes to ``reject`` and, only
for a sink that wants it, to the sink too.
"""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support.events import breaking_events, encode, turn
from turnaudit.consumers.runtime import ConsumedTurn, Rejection, TurnEventValidation
from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics
from turnaudit.consumers.runtime.handover import hand_over
from turnaudit.dead_letters import DeadLetterReason
from turnaudit.identity import TrackResult, TurnOutcome
from turnaudit.records import Record, StoredRecord
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer

KINDS = ("valid", "breach", "rejected", "raises")
PLACED = TrackResult(TurnOutcome.NEW, ("s", "p"), 0)


def examine_by_kind(
    value: bytes | None, key: bytes | None, topic: str, partition: int, offset: int
) -> ConsumedTurn | Rejection:
    """A validation whose verdict is written in the record's value."""
    kind = (value or b"").decode()
    if kind == "raises":
        raise ValueError("a validation bug")
    if kind == "rejected":
        return Rejection(DeadLetterReason.UNKNOWN_FRAMING, "no framing")
    breaches = ("stub_fields: stub",) if kind == "breach" else ()
    return ConsumedTurn(
        None,
        PLACED,
        topic,
        partition,
        offset,  # type: ignore[arg-type]  # a bad offset on purpose
        breaches,
    )


def _numbered(rows: list[tuple[int, str]]) -> list[StoredRecord]:
    """Records in consumer order: each partition's offsets increase."""
    next_offset: dict[int, int] = {}
    out = []
    for partition, kind in rows:
        offset = next_offset.get(partition, 100 * partition)
        next_offset[partition] = offset + random.Random(offset).randint(1, 3)
        out.append(StoredRecord("t", partition, offset, b"k", kind.encode()))
    return out


records_strategy = st.lists(st.tuples(st.integers(0, 3), st.sampled_from(KINDS)), max_size=60).map(
    _numbered
)


@given(records=records_strategy)
def test_every_record_is_taken_or_rejected_as_the_model_says(
    records: list[StoredRecord],
) -> None:
    taken: list[tuple[int, int]] = []
    rejected: list[tuple[int, int, DeadLetterReason]] = []

    def reject(record: Record, rejection: Rejection) -> None:
        rejected.append((record.partition() or 0, record.offset() or 0, rejection.reason))

    batch = hand_over(
        records,
        examine_by_kind,
        lambda t: taken.append((t.partition, t.offset)),
        reject,
    )
    # The reference model, record by record.
    want_taken, want_rejected, next_offsets = [], [], {}
    for r in records:
        where = (r.partition_id, r.offset_value)
        next_offsets[r.partition_id] = r.offset_value + 1
        kind = r.value_bytes.decode() if r.value_bytes else ""
        if kind in {"valid", "breach"}:  # a breaching turn is a turn: taken, not rejected
            want_taken.append(where)
        reason = {
            "rejected": DeadLetterReason.UNKNOWN_FRAMING,
            "raises": DeadLetterReason.UNDECODABLE,
        }.get(kind)
        if reason is not None:
            want_rejected.append((*where, reason))
    assert taken == want_taken
    assert rejected == want_rejected
    assert batch.next_offsets == next_offsets
    assert (batch.handed, batch.rejected) == (len(want_taken), len(want_rejected))


def test_real_validation_hands_breaching_turns_on_and_rejects_only_bad_bytes() -> None:
    catalog = shipped_catalog()
    validation = TurnEventValidation(
        TurnEventDeserializer(catalog), ConsumerMetrics(CollectorRegistry()), max_sessions=100
    )
    valid = [turn("s-h", n, version=v) for v, n in ((1, 0), (2, 1), (3, 2))]
    breaches = breaking_events()
    values = [encode(e) for e in valid] + [b"\x00garbage"] + [encode(e) for e in breaches.values()]
    keys = (
        [e["session_id"].encode() for e in valid]
        + [b"x"]
        + [e["session_id"].encode() for e in breaches.values()]
    )
    records = [
        StoredRecord("t", 0, n, k, v) for n, (k, v) in enumerate(zip(keys, values, strict=True))
    ]
    taken: list[str] = []
    found: list[str] = []
    reasons: list[str] = []

    def take(t: ConsumedTurn) -> None:
        taken.append(t.event["event_id"])
        found.extend(b.partition(":")[0] for b in t.breaches[:1])

    batch = hand_over(
        records,
        validation.examine,
        take,
        lambda _r, rejection: reasons.append(rejection.reason.value),
    )
    assert taken == [e["event_id"] for e in valid] + [e["event_id"] for e in breaches.values()]
    (reason,) = reasons
    assert reason in {r.value for r in DeadLetterReason if not r.value.startswith("contract")}
    assert sorted(f"contract:{c}" for c in found) == sorted(breaches)
    assert batch.next_offsets == {0: len(records)}
