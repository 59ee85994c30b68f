"""The Verifier over a partition whose log start retention moved: a stream first seen
past position 0 there began before retention (never lost); an anchor proving an
earlier head turns a missing prefix past it into a truncation."""

from __future__ import annotations

from tests.unit.verify import scenario
from turnaudit.identity import chain_hash, stream_of
from turnaudit.verify.report import RangeJson, VerifyReport
from turnaudit.verify.verifier import Anchors, Verifier

RANGE: RangeJson = {
    "topic": "t",
    "description": "d",
    "partitions": {},
    "from": None,
    "to": None,
    "from_log_start": True,
}


def retained(cut: int, *, log_start: int, anchors: Anchors | None = None) -> Verifier:
    """One partition of 40 turns (3 sessions) without its first ``cut`` messages, the
    rest stored from offset ``log_start`` on."""
    events = scenario.stamped_events(40, seed=3, producers=1, sessions=3)
    verifier = Verifier(scenario.DECODE, log_start_offsets={0: log_start}, anchors=anchors)
    for offset, e in enumerate(events[cut:], log_start):
        verifier.feed(0, offset, e.key, e.value, None)
    return verifier


def test_a_stream_cut_by_retention_began_before_it_and_is_not_lost() -> None:
    verifier = retained(10, log_start=10)
    report = VerifyReport(RANGE, verifier)
    document = report.as_json()
    assert report.ok, document["unexplained"]
    assert document["lost"] == 0
    assert document["retention"]["log_start"] == {"0": 10}
    assert document["retention"]["began_before_retention"] >= 1
    assert all(
        e["partition"] == 0 and e["offset"] >= 10 and e["position"] > 0
        for e in document["retention"]["examples"]
    )
    assert "began before retention" in report.human()


def test_the_same_cut_read_where_the_log_starts_at_zero_is_lost() -> None:
    # Nothing deleted (log start 0), yet streams start past 0: their first turns are lost.
    verifier = retained(10, log_start=0)
    document = VerifyReport(RANGE, verifier).as_json()
    assert document["lost"] > 0
    assert "retention" not in document


def test_an_anchor_short_of_the_cut_makes_the_missing_prefix_a_truncation() -> None:
    events = scenario.stamped_events(40, seed=3, producers=1, sessions=3)
    # A stream with positions before offset 5, between 5 and 15, and after 15.
    stream = next(
        stream_of(e.event)
        for e in events[15:]
        if any(stream_of(x.event) == stream_of(e.event) for x in events[:5])
        and any(stream_of(x.event) == stream_of(e.event) for x in events[5:15])
    )
    head = max(
        (e for e in events[:5] if stream_of(e.event) == stream), key=lambda e: e.event["sequence"]
    )
    proved = {stream: (head.event["sequence"], chain_hash(head.value))}
    report = VerifyReport(RANGE, retained(15, log_start=15, anchors=proved))
    found = [f for f in report.unexplained() if f.kind == "truncated"]
    assert [(f.where["session_id"], f.where["producer_id"]) for f in found] == [stream]
    first = min(e.event["sequence"] for e in events[15:] if stream_of(e.event) == stream)
    assert found[0].where["positions"] == list(range(head.event["sequence"] + 1, first))
    # Proved up to the cut: the deleted prefix was proved, nothing is found.
    last = max(
        (e for e in events[:15] if stream_of(e.event) == stream), key=lambda e: e.event["sequence"]
    )
    proved = {stream: (last.event["sequence"], chain_hash(last.value))}
    assert VerifyReport(RANGE, retained(15, log_start=15, anchors=proved)).ok
    # ... unless the first retained turn does not chain to the proved head.
    proved = {stream: (last.event["sequence"], "0" * 64)}
    report = VerifyReport(RANGE, retained(15, log_start=15, anchors=proved))
    assert {f.kind for f in report.unexplained()} == {"rewritten"}
