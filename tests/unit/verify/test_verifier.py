"""The Verifier over generated streams: lost, duplicated, redelivered, swapped, edited,
re-sent with other content, forged and truncated turns classified as a plain reference
model says."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.verify import scenario
from turnaudit.identity import chain_hash
from turnaudit.verify.verifier import Verifier

OPS = ("remove", "duplicate", "redeliver", "edit", "resend_changed", "swap", "forge", "truncate")


@cache
def clean(count: int, seed: int, producers: int, sessions: int) -> tuple[scenario.Stamped, ...]:
    return tuple(scenario.stamped_events(count, seed=seed, producers=producers, sessions=sessions))


@dataclass(frozen=True)
class Fed:
    """One message as fed: its place, and its identity for the model."""

    partition: int
    offset: int
    key: bytes
    value: bytes
    stream: tuple[str, str]
    position: int
    event_id: str


@dataclass
class Tampered:
    messages: list[Fed]
    edited: set[tuple[tuple[str, str], int]] = field(default_factory=set)


def stream_of(s: scenario.Stamped) -> tuple[str, str]:
    return s.event["session_id"], s.event["producer_id"]


@st.composite
def tampered_streams(draw: st.DrawFn) -> tuple[Tampered, dict[tuple[str, str], tuple[int, str]]]:
    events = clean(
        draw(st.integers(4, 40)),
        draw(st.sampled_from([1, 2, 3])),
        draw(st.integers(1, 2)),
        draw(st.integers(1, 4)),
    )
    sessions = sorted({e.event["session_id"] for e in events})
    rows: list[tuple[str, scenario.Stamped]] = [("msg", e) for e in events]
    edited: set[tuple[tuple[str, str], int]] = set()
    untouched = list(range(len(events)))
    for _ in range(draw(st.integers(0, 4))):
        if not untouched:
            break
        i = draw(st.sampled_from(untouched))
        untouched.remove(i)
        op = draw(st.sampled_from(OPS), label="op")
        _, e = rows[i]
        if op == "remove":
            rows[i] = ("gone", e)
        elif op in ("duplicate", "redeliver"):
            at = draw(st.integers(i + 1, len(rows)))
            rows.insert(at, ("copy" if op == "duplicate" else "again", e))
            untouched = [u if u < at else u + 1 for u in untouched]
        elif op == "edit":
            changed = {**e.event, "turn": e.event["turn"] + 1000}
            rows[i] = ("msg", scenario.Stamped(e.key, scenario.ENCODE_V3(changed), changed))
            edited.add((stream_of(e), e.event["sequence"]))
        elif op == "resend_changed":  # the same event id again, with other content
            changed = {**e.event, "turn": e.event["turn"] + 2000}
            at = draw(st.integers(i + 1, len(rows)))
            rows.insert(at, ("msg", scenario.Stamped(e.key, scenario.ENCODE_V3(changed), changed)))
            untouched = [u if u < at else u + 1 for u in untouched]
        elif op == "forge":
            forged = {**e.event, "event_id": f"forged-{i}"}
            rows.insert(i + 1, ("msg", scenario.Stamped(e.key, scenario.ENCODE_V3(forged), forged)))
            untouched = [u if u <= i else u + 1 for u in untouched]
        elif op == "swap":
            later = [
                j
                for j in untouched
                if j > i and rows[j][0] == "msg" and stream_of(rows[j][1]) == stream_of(e)
            ]
            if later:
                j = draw(st.sampled_from(later))
                untouched.remove(j)
                rows[i], rows[j] = rows[j], rows[i]
        else:  # truncate: the stream's last turns cut off
            cut = draw(st.integers(1, 3))
            mine = [
                j for j, (k, r) in enumerate(rows) if k == "msg" and stream_of(r) == stream_of(e)
            ][-cut:]
            for j in mine:
                rows[j] = ("gone", rows[j][1])
            untouched = [u for u in untouched if u not in mine]
    return feed_order(rows, sessions, edited), clean_heads(events, sessions)


def feed_order(
    rows: list[tuple[str, scenario.Stamped]],
    sessions: list[str],
    edited: set[tuple[tuple[str, str], int]],
) -> Tampered:
    offsets: Counter[int] = Counter()
    fed: list[Fed] = []
    where: dict[str, Fed] = {}  # event id -> its first stored copy
    for kind, e in rows:
        if kind == "gone":
            continue
        if kind == "again" and e.event["event_id"] in where:
            fed.append(where[e.event["event_id"]])  # the same place: a redelivery
            continue
        partition = sessions.index(e.event["session_id"]) % 2
        m = Fed(
            partition,
            offsets[partition],
            e.key,
            e.value,
            stream_of(e),
            e.event["sequence"],
            e.event["event_id"],
        )
        offsets[partition] += 1
        where.setdefault(m.event_id, m)
        fed.append(m)
    return Tampered(fed, edited)


def clean_heads(
    events: tuple[scenario.Stamped, ...], sessions: list[str]
) -> dict[tuple[str, str], tuple[int, str]]:
    verifier = run(feed_order([("msg", e) for e in events], sessions, set()).messages, {})
    return {
        (h["session_id"], h["producer_id"]): (h["position"], h["hash"]) for h in verifier.heads()
    }


def run(messages: list[Fed], anchors: dict[tuple[str, str], tuple[int, str]]) -> Verifier:
    verifier = Verifier(scenario.DECODE, log_start_offsets={0: 0, 1: 0}, anchors=anchors)
    for m in messages:
        verifier.feed(m.partition, m.offset, m.key, m.value, None)
    return verifier


@dataclass
class Model:
    """What a plain reading of the README's table says about the fed messages."""

    turns: int = 0
    redeliveries: int = 0
    duplicates: int = 0
    content_changed: set[tuple[tuple[str, str], int]] = field(default_factory=set)
    position_reused: set[tuple[tuple[str, str], int]] = field(default_factory=set)
    late: set[tuple[tuple[str, str], int]] = field(default_factory=set)
    taken: dict[tuple[str, str], dict[int, bytes]] = field(default_factory=dict)

    def lost(self) -> dict[tuple[str, str], list[int]]:
        lost = {s: sorted(set(range(max(t) + 1)) - set(t)) for s, t in self.taken.items()}
        return {s: p for s, p in lost.items() if p}


def model(messages: list[Fed]) -> Model:
    out = Model()
    seen: dict[str, Fed] = {}
    for m in messages:
        first = seen.get(m.event_id)
        if first is not None:
            if first.value != m.value:
                out.content_changed.add((m.stream, m.position))
            elif (first.partition, first.offset) == (m.partition, m.offset):
                out.redeliveries += 1
            else:
                out.duplicates += 1
            continue
        taken = out.taken.setdefault(m.stream, {})
        if m.position in taken:
            out.position_reused.add((m.stream, m.position))
            continue
        if taken and m.position < max(taken):
            out.late.add((m.stream, m.position))
        taken[m.position] = m.value
        seen[m.event_id] = m
        out.turns += 1
    return out


def places(verifier: Verifier, kind: str) -> set[tuple[tuple[str, str], int]]:
    return {
        ((f.where["session_id"], f.where["producer_id"]), f.where["position"])
        for f in verifier.findings
        if f.kind == kind
    }


@settings(max_examples=150, deadline=None)
@given(tampered_streams())
def test_the_verifier_classifies_every_message_as_the_reference_model(
    drawn: tuple[Tampered, dict[tuple[str, str], tuple[int, str]]],
) -> None:
    tampered, anchors = drawn
    verifier = run(tampered.messages, anchors)
    expected = model(tampered.messages)
    assert verifier.counts.turns == expected.turns
    assert verifier.redeliveries == expected.redeliveries
    assert len(verifier.duplicates) == expected.duplicates
    assert places(verifier, "content_changed") == expected.content_changed
    assert places(verifier, "position_reused") == expected.position_reused
    assert places(verifier, "late_arrival") == expected.late
    assert dict(verifier.tracker.missing()) == expected.lost()
    assert {
        (f.where["session_id"], f.where["producer_id"]): f.where["positions"]
        for f in verifier.lost()
    } == {s: p[:20] for s, p in expected.lost().items()}
    # An edit shows where its successor is in the range; the stream's last turn's edit
    # only against an anchored head.
    detectable = {
        s
        for s, k in tampered.edited
        if k in expected.taken.get(s, {}) and k + 1 in expected.taken.get(s, {})
    }
    broken = {s for s, _ in places(verifier, "chain_break")}
    assert broken == detectable
    assert not {f.kind for f in verifier.findings} - {
        "content_changed",
        "position_reused",
        "late_arrival",
        "chain_break",
    }
    # Anchored heads of the untampered range: a stream gone, cut short or rewritten.
    anchor_kinds = {}
    for stream, (position, digest) in anchors.items():
        taken = expected.taken.get(stream, {})
        if stream not in {m.stream for m in tampered.messages}:
            anchor_kinds[stream] = "anchor_absent"
        elif max(taken) < position:
            anchor_kinds[stream] = "truncated"
        elif chain_hash(taken[position]) != digest:
            anchor_kinds[stream] = "rewritten"
    assert {
        (f.where["session_id"], f.where["producer_id"]): f.kind for f in verifier.anchor_findings()
    } == anchor_kinds


def test_an_untouched_stream_has_no_finding_and_every_turn_counted() -> None:
    events = clean(30, 1, 2, 3)
    sessions = sorted({e.event["session_id"] for e in events})
    tampered = feed_order([("msg", e) for e in events], sessions, set())
    verifier = run(tampered.messages, clean_heads(events, sessions))
    assert verifier.counts.turns == 30
    assert verifier.findings == []
    assert verifier.lost() == []
    assert verifier.anchor_findings() == []
    assert verifier.counts.refused == sum(
        bool(e.event["verdicts"]["refusal_emitted"]) for e in events
    )
    assert verifier.counts.hedged == sum(
        bool(e.event["verdicts"]["hedge_injected"]) for e in events
    )
    assert verifier.counts.stub == sum(e.event["path"] == "STUB" for e in events)


def test_an_undecodable_message_and_a_non_turn_are_undecodable_not_turns() -> None:
    verifier = Verifier(scenario.DECODE)
    verifier.feed(0, 0, b"k", b"garbage", 5)
    verifier.feed(0, 1, b"k", None, 0)
    assert [f.place for f in verifier.undecodable] == [(0, 0), (0, 1)]
    assert verifier.counts.turns == 0
    assert (verifier.first_timestamp, verifier.last_timestamp) == (5, 5)
