"""Per-stream trust against signed checkpoints, without a broker: stamped streams, their
checkpoints written by the publisher's real ``Checkpointer`` (into a recording producer),
fed to a ``Verifier`` that keeps the chain hashes at signed positions and judged by
``judge_streams``: signed, unsigned, forged (rewritten, after a final checkpoint, uncovered
when required, named by an invalid checkpoint) and truncated."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.checkpoints import RecordingProducer
from tests.support.identity_streams import Stamped, stamped_events
from turnaudit.checkpoint_chain import judge_chain
from turnaudit.checkpoints import (
    Checkpoint,
    Keyring,
    SigningKey,
    decode_checkpoint,
    keyring_entry_toml,
    parse_keyring,
)
from turnaudit.identity import TurnStamper, chain_hash, stream_of
from turnaudit.producers.checkpointer import Checkpointer
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer
from turnaudit.signing_keys import CheckpointSettings
from turnaudit.stream_heads import StreamHead
from turnaudit.verify.report import RangeJson, VerifyReport
from turnaudit.verify.trust import Removal, TrustReport, judge_streams, signed_heads
from turnaudit.verify.verifier import Verifier

DECODE = TurnEventDeserializer(shipped_catalog())
ENCODE_V3 = SingleObjectSerializer(shipped_catalog().version(3))
KEY = SigningKey(Ed25519PrivateKey.from_private_bytes(bytes(range(32))), "k1")
RING = parse_keyring(keyring_entry_toml("k1", KEY.public_pem(), datetime(2020, 1, 1, tzinfo=UTC)))
REQUIRED = dataclasses.replace(RING, require_signed=True)
RANGE: RangeJson = {
    "topic": "t",
    "description": "in memory",
    "partitions": {},
    "from": None,
    "to": None,
    "from_log_start": True,
}


V3_FP = shipped_catalog().version(3).fingerprint


def checkpoints_of(
    events: list[Stamped],
    *,
    max_turns: int,
    close: bool = True,
    schemas: tuple[bytes, ...] = (V3_FP,),
) -> list[Checkpoint]:
    """What the publisher's checkpointer writes for ``events`` (one head write per turn),
    naming ``schemas`` (the writer schemas the publisher wrote with)."""
    sink = RecordingProducer()
    pid = events[0].event["producer_id"]
    writer = Checkpointer(
        CheckpointSettings(KEY, interval_s=3600, max_turns=max_turns),
        producer_id=pid,
        producer=sink,
        prefix="t.",
        schemas=lambda: schemas,
    )
    for s in events:
        head = StreamHead(s.event["session_id"], pid, s.event["sequence"], chain_hash(s.value))
        writer.advance([head], 1)
        writer.tick()
    if close:
        assert writer.close(1.0)
    else:
        sink.flush(0)
    out = [decode_checkpoint(value) for _, value, _ in sink.stored]
    return [c for c in out if c is not None]


def judge(
    events: list[Stamped],
    checkpoints: list[Checkpoint],
    ring: Keyring = RING,
    *,
    to_end: bool = True,
    removal: Removal | None = None,
    log_start: int = 0,
    decode: TurnEventDeserializer = DECODE,
    verifiers: list[Verifier] | None = None,
) -> TrustReport:
    """``events`` read from one partition (from ``log_start``: the offsets before it are
    gone) and judged against ``checkpoints`` as ``verify --keyring`` judges them."""
    chain = judge_chain([(c, None) for c in checkpoints], ring)
    verifier = Verifier(
        decode,
        signed=signed_heads(chain).positions,
        named_schemas=chain.named_schemas(),
        log_start_offsets={0: log_start},
    )
    for offset, s in enumerate(events):
        if offset >= log_start:
            verifier.feed(0, offset, s.key, s.value, 1_000 + offset)
    assert verifier.trust is not None
    if verifiers is not None:
        verifiers.append(verifier)  # the caller's whole report
    return judge_streams(
        chain,
        keyring="ring",
        require_signed=ring.require_signed,
        observed=verifier.signed_seen,
        last_seen=verifier.tracker.last_positions(),
        to_end=to_end,
        whole_stream=log_start == 0,
        facts=verifier.trust.facts(),
        removal=removal,
        allowances=ring.allow_unsigned,
    )


def status(report: TrustReport) -> dict[tuple[str, str], str]:
    return {(s["session_id"], s["producer_id"]): s["status"] for s in report.streams}


def streams(events: list[Stamped]) -> set[tuple[str, str]]:
    return {stream_of(s.event) for s in events}


class TestSigned:
    @settings(max_examples=15, deadline=None)
    @given(st.integers(10, 60), st.integers(1, 25))
    def test_an_honest_closed_run_is_signed_whatever_the_count(
        self, n: int, max_turns: int
    ) -> None:
        events = stamped_events(n, sessions=4)
        report = judge(events, checkpoints_of(events, max_turns=max_turns), REQUIRED)
        assert set(status(report).values()) == {"signed"}
        assert report.findings() == []

    def test_a_publisher_without_a_key_is_unsigned_a_finding_forged_when_required(self) -> None:
        events = stamped_events(20, sessions=3)
        assert set(status(judge(events, [])).values()) == {"unsigned"}
        # Fail closed: with a keyring an unsigned stream is a finding.
        assert {f.kind for f in judge(events, []).findings()} == {"unsigned"}
        required = judge(events, [], REQUIRED)
        assert set(status(required).values()) == {"forged"}
        assert {
            (f.where["session_id"], f.where["producer_id"]) for f in required.findings()
        } == streams(events)

    def test_a_crash_leaves_an_unsigned_tail_counted_a_finding_only_when_required(
        self,
    ) -> None:
        events = stamped_events(30, sessions=2)
        written = checkpoints_of(events[:20], max_turns=5, close=False)
        report = judge(events, written)
        assert set(status(report).values()) == {"signed"}
        assert sum(s["unsigned_tail"] for s in report.streams) == 10
        assert report.findings() == []
        assert {f.kind for f in judge(events, written, REQUIRED).findings()} == {"forged"}


class TestForgedAndTruncated:
    @settings(max_examples=20, deadline=None)
    @given(st.data())
    def test_a_rewrite_with_a_recomputed_chain_is_forged(self, data: st.DataObject) -> None:
        events = stamped_events(40, sessions=3)
        written = checkpoints_of(events, max_turns=7)
        target = data.draw(st.sampled_from(sorted(streams(events))))
        indexes = [i for i, s in enumerate(events) if stream_of(s.event) == target]
        first = data.draw(st.integers(0, len(indexes) - 1))
        copy = list(events)
        prev = None
        for i in indexes[first:]:
            event = dict(copy[i].event)
            if prev is None:
                event["turn"] = event["turn"] + 1000
            else:
                event["prev_hash"] = prev
            value = ENCODE_V3(event)
            prev = chain_hash(value)
            copy[i] = Stamped(copy[i].key, value, event)
        report = judge(copy, written)
        assert {f.kind for f in report.findings()} == {"forged"}
        assert {(f.where["session_id"], f.where["producer_id"]) for f in report.findings()} == {
            target
        }
        # the chain itself holds: only the signature tells
        verifier = Verifier(DECODE)
        for offset, s in enumerate(copy):
            verifier.feed(0, offset, s.key, s.value)
        assert verifier.findings == []

    def test_turns_after_a_final_checkpoint_are_forged(self) -> None:
        events = stamped_events(20, sessions=2)
        written = checkpoints_of(events[:15], max_turns=4)  # closed after 15 turns
        report = judge(events, written)
        assert "forged" in status(report).values()
        assert all("final checkpoint" in f.detail for f in report.findings())

    def test_a_new_producer_is_unsigned_then_forged_when_required(self) -> None:
        events = stamped_events(20, sessions=2)
        written = checkpoints_of(events, max_turns=4)
        stamper = TurnStamper()
        extra = []
        for s in stamped_events(5, seed=9, sessions=1):
            event = dict(s.event)
            stamper.stamp(event)
            value = ENCODE_V3(event)
            stamper.commit(event, value)
            extra.append(Stamped(s.key, value, event))
        outsider = stream_of(extra[0].event)
        assert status(judge(events + extra, written))[outsider] == "unsigned"
        required = judge(events + extra, written, REQUIRED)
        assert status(required)[outsider] == "forged"
        assert [s for s, v in status(required).items() if v != "signed"] == [outsider]

    def test_a_new_session_under_a_signing_producer_id(self) -> None:
        events = stamped_events(20, sessions=2)
        pid = events[0].event["producer_id"]
        stamper = TurnStamper(producer_id=pid)
        extra = []
        for s in stamped_events(4, seed=11, sessions=1):
            event = dict(s.event)
            stamper.stamp(event)
            value = ENCODE_V3(event)
            stamper.commit(event, value)
            extra.append(Stamped(s.key, value, event))
        smuggled = stream_of(extra[0].event)
        assert smuggled[1] == pid
        # Its producer closed cleanly, and its final checkpoint does not name the stream.
        closed = judge(events + extra, checkpoints_of(events, max_turns=4))
        assert status(closed)[smuggled] == "forged"
        assert "closed with a final checkpoint" in closed.findings()[0].detail
        # Its producer crashed: the stream may have begun after its last checkpoint.
        crashed = judge(events + extra, checkpoints_of(events, max_turns=4, close=False))
        assert status(crashed)[smuggled] == "unsigned"
        assert [f.kind for f in crashed.findings()] == ["unsigned"]  # fail closed

    @settings(max_examples=15, deadline=None)
    @given(st.integers(1, 5))
    def test_a_stream_cut_before_its_signed_head_is_truncated(self, cut: int) -> None:
        events = stamped_events(40, sessions=2)
        written = checkpoints_of(events, max_turns=6)
        target = stream_of(events[-1].event)
        whole = [i for i, s in enumerate(events) if stream_of(s.event) == target]
        last = whole[-cut:]
        report = judge([s for i, s in enumerate(events) if i not in last], written)
        cut_all = len(last) == len(whole)  # nothing of it left: missing, not truncated
        assert status(report)[target] == ("missing" if cut_all else "truncated")
        assert [f.kind for f in report.findings()] == [status(report)[target]]
        # a range that stops before the topic's end cannot tell
        report = judge([s for i, s in enumerate(events) if i not in last], written, to_end=False)
        assert status(report).get(target, "signed") == "signed"

    def test_an_invalid_checkpoint_is_a_finding_and_changes_no_stream(self) -> None:
        events = stamped_events(30, sessions=3)
        written = checkpoints_of(events, max_turns=5)
        bad = dataclasses.replace(written[1], signature=bytes(64))
        report = judge(events, [*written, bad])  # a keyless writer's copy beside the real one
        assert set(status(report).values()) == {"signed"}
        assert [f.kind for f in report.findings()] == ["invalid_checkpoint"]

    def test_the_report_lists_trust_and_fails_on_a_forged_stream(self) -> None:
        events = stamped_events(20, sessions=2)
        verifier = Verifier(DECODE)
        for offset, s in enumerate(events):
            verifier.feed(0, offset, s.key, s.value)
        trust = judge(events, [], REQUIRED)
        report = VerifyReport(RANGE, verifier, trust=trust)
        assert not report.ok
        document = report.as_json()
        assert document["trust"]["by_status"]["forged"] == len(streams(events))
        assert "signed checkpoints (ring)" in report.human()


class TestRemovedCheckpoint:
    @settings(max_examples=25, deadline=None)
    @given(st.integers(10, 60), st.integers(1, 9), st.data())
    def test_any_checkpoint_removed_before_another_is_a_finding(
        self, n: int, max_turns: int, data: st.DataObject
    ) -> None:
        events = stamped_events(n, sessions=4)
        written = checkpoints_of(events, max_turns=max_turns)
        assert len(written) >= 2  # at least one by count (n > max_turns) and the final one
        gone = data.draw(st.integers(0, len(written) - 2))
        report = judge(events, [c for i, c in enumerate(written) if i != gone])
        invalid = [f for f in report.findings() if f.kind == "invalid_checkpoint"]
        assert [f.where["checkpoint"] for f in invalid] == [written[gone + 1].index]
        assert "chain_break" in invalid[0].detail

    def test_a_break_before_a_final_checkpoint_that_names_no_stream_is_a_finding(self) -> None:
        events = stamped_events(20, sessions=3)
        written = checkpoints_of(events, max_turns=5)  # the final one finds nothing pending
        assert written[-1].final
        assert written[-1].heads == ()
        report = judge(events, written[:-2] + written[-1:])
        assert [f.kind for f in report.findings() if f.kind == "invalid_checkpoint"] == [
            "invalid_checkpoint"
        ]
        assert not [s for s in report.streams if s["status"] == "forged"]  # it names none
