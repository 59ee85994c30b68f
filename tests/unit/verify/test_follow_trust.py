"""``verify --follow --keyring``'s live trust, without a broker: stamped streams and the
checkpoints the publisher's real ``Checkpointer`` writes for them, fed to ``FollowTrust``
in any interleaving of turns and checkpoints (each in its own order, as the two topics
are read): an honest run is signed whatever the interleaving; a rewrite is forged at its
signed position; an invalid checkpoint forges what it names; uncovered positions wait
for the grace and the checkpoint reader; a restart from the checkpointed state ends where
an uninterrupted run does."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.identity_streams import Stamped, stamped_events
from tests.unit.verify.test_trust import KEY, REQUIRED, RING, checkpoints_of
from turnaudit.checkpoints import Checkpoint, SigningKey, keyring_entry_toml, parse_keyring, sign
from turnaudit.identity import StreamId, chain_hash, stream_of
from turnaudit.kafka.partitioning import session_partition
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer
from turnaudit.stream_heads import StreamHead
from turnaudit.verify.follow_trust import FollowTrust
from turnaudit.verify.follow_trust_findings import Forgery

ENCODE_V3 = SingleObjectSerializer(shipped_catalog().version(3))
GRACE_S = 10.0
Item = tuple[str, Stamped | Checkpoint]


def interleave(
    events: list[Stamped], checkpoints: list[Checkpoint], picks: list[bool]
) -> list[Item]:
    """Both sequences merged, each in its own order, ``picks`` choosing turn or checkpoint."""
    turns: list[Item] = [("turn", s) for s in events]
    cps: list[Item] = [("cp", c) for c in checkpoints]
    out: list[Item] = []
    for pick in picks:
        source = turns if (pick and turns) or not cps else cps
        if source:
            out.append(source.pop(0))
    return out + turns + cps


class Run:
    """A follower's trust fed items one by one; the clock is the item's index (ms)."""

    def __init__(self, trust: FollowTrust) -> None:
        self.trust = trust
        self.now_ms = 0
        self.found: list[Forgery] = []

    def feed(self, items: list[Item]) -> None:
        for kind, item in items:
            self.now_ms += 1
            if kind == "turn":
                assert isinstance(item, Stamped)
                self.trust.observe(
                    stream_of(item.event),
                    0,
                    item.event["sequence"],
                    chain_hash(item.value),
                    self.now_ms,
                )
            else:
                assert isinstance(item, Checkpoint)
                self.trust.take_checkpoint(item, None)
            self.found += self.trust.found()

    def settle(self, *, reader_current: bool = True) -> None:
        """Past the grace: the reader caught up (or not), the partition's time moved on."""
        later = self.now_ms + int(GRACE_S * 1000) + 1
        self.trust.sweep(horizon_ms=later if reader_current else None, event_time_ms={0: 2**62})
        self.found += self.trust.found()

    def statuses(self) -> dict[StreamId, str]:
        return {s: t.status() for s, t in self.trust.streams.items()}


def run(items: list[Item], ring: object = RING, *, settle: bool = True) -> Run:
    assert isinstance(ring, type(RING))
    r = Run(FollowTrust(ring, grace_s=GRACE_S))
    r.feed(items)
    if settle:
        r.settle()
    return r


def streams(events: list[Stamped]) -> set[StreamId]:
    return {stream_of(s.event) for s in events}


def rewrite(events: list[Stamped], target: StreamId, first: int) -> list[Stamped]:
    """``target`` edited from its ``first``-th turn on, its chain recomputed (it holds)."""
    copy = list(events)
    prev = None
    indexes = [i for i, s in enumerate(events) if stream_of(s.event) == target]
    for i in indexes[first:]:
        event = dict(copy[i].event)
        if prev is None:
            event["turn"] = event["turn"] + 1000
        else:
            event["prev_hash"] = prev
        value = ENCODE_V3(event)
        prev = chain_hash(value)
        copy[i] = Stamped(copy[i].key, value, event)
    return copy


PICKS = st.lists(st.booleans(), max_size=200)


class TestSigned:
    @settings(max_examples=30, deadline=None)
    @given(st.integers(10, 50), st.integers(1, 20), PICKS)
    def test_an_honest_closed_run_is_signed_in_any_interleaving(
        self, n: int, max_turns: int, picks: list[bool]
    ) -> None:
        events = stamped_events(n, sessions=4)
        items = interleave(events, checkpoints_of(events, max_turns=max_turns), picks)
        r = run(items, REQUIRED)
        assert set(r.statuses().values()) == {"signed"}
        assert set(r.statuses()) == streams(events)
        assert r.found == []
        assert r.trust.invalid == 0

    def test_a_checkpoint_read_again_is_a_copy_not_a_fork(self) -> None:
        events = stamped_events(20, sessions=2)
        written = checkpoints_of(events, max_turns=5)
        r = run([("cp", c) for c in written + written] + [("turn", s) for s in events], REQUIRED)
        assert set(r.statuses().values()) == {"signed"}
        assert r.found == []


class TestUnsigned:
    @settings(max_examples=15, deadline=None)
    @given(st.integers(5, 40))
    def test_no_checkpoint_is_pending_then_unsigned_or_forged_when_required(self, n: int) -> None:
        events = stamped_events(n, sessions=3)
        items: list[Item] = [("turn", s) for s in events]
        within = run(items, settle=False)
        within.trust.sweep(horizon_ms=within.now_ms + 5, event_time_ms={})
        assert set(within.statuses().values()) == {"pending"}
        assert set(run(items).statuses().values()) == {"unsigned"}
        required = run(items, REQUIRED)
        assert set(required.statuses().values()) == {"forged"}
        assert {(f.reason, f.stream) for f in required.found} == {
            ("uncovered", s) for s in streams(events)
        }

    def test_nothing_is_judged_before_the_reader_has_read_that_far(self) -> None:
        events = stamped_events(12, sessions=2)
        r = run([("turn", s) for s in events], REQUIRED, settle=False)
        r.settle(reader_current=False)
        assert set(r.statuses().values()) == {"pending"}
        assert r.found == []

    def test_a_crashed_publishers_tail_is_forged_only_when_required(self) -> None:
        events = stamped_events(30, sessions=2)
        written = checkpoints_of(events[:20], max_turns=5, close=False)
        items = [("cp", c) for c in written] + [("turn", s) for s in events]
        assert set(run(items).statuses().values()) == {"signed"}
        required = run(items, REQUIRED)
        assert {f.reason for f in required.found} == {"uncovered"}


class TestForged:
    @settings(max_examples=30, deadline=None)
    @given(st.data())
    def test_a_rewrite_with_a_recomputed_chain_is_forged_in_any_interleaving(
        self, data: st.DataObject
    ) -> None:
        events = stamped_events(40, sessions=3)
        written = checkpoints_of(events, max_turns=data.draw(st.integers(1, 10)))
        target = data.draw(st.sampled_from(sorted(streams(events))))
        count = sum(stream_of(s.event) == target for s in events)
        first = data.draw(st.integers(0, count - 1))
        items = interleave(rewrite(events, target, first), written, data.draw(PICKS))
        r = run(items)
        assert [(f.reason, f.stream) for f in r.found] == [("rewritten", target)]
        assert {s for s, status in r.statuses().items() if status != "signed"} == {target}

    @settings(max_examples=20, deadline=None)
    @given(st.data())
    def test_an_edited_checkpoint_copy_is_a_finding_and_forges_no_honest_stream(
        self, data: st.DataObject
    ) -> None:
        events = stamped_events(30, sessions=3)
        written = checkpoints_of(events, max_turns=6)
        at = data.draw(st.sampled_from([i for i, c in enumerate(written) if c.heads]))
        victim = written[at]
        first = victim.heads[0]
        edited = dataclasses.replace(
            victim,
            heads=(
                StreamHead(first.session_id, first.producer_id, first.sequence, "f" * 64),
                *victim.heads[1:],
            ),
        )
        # A keyless writer's edited copy beside the real checkpoint (after it, or before).
        copies = [edited, victim] if data.draw(st.booleans()) else [victim, edited]
        items = interleave(events, [*written[:at], *copies, *written[at + 1 :]], data.draw(PICKS))
        r = run(items)
        assert r.trust.invalid >= 1
        assert {f.reason for f in r.found} == {"bad_signature"}
        assert all(f.stream is None for f in r.found)  # the checkpoint's finding, no stream's
        assert set(r.statuses().values()) == {"signed"}

    def test_a_removed_checkpoint_breaks_the_chain(self) -> None:
        events = stamped_events(30, sessions=2)
        written = checkpoints_of(events, max_turns=5)
        assert len(written) >= 3
        r = run([("turn", s) for s in events] + [("cp", c) for c in written[:1] + written[2:]])
        assert r.found[0].reason == "chain_break"

    def test_an_unknown_or_revoked_key_is_a_finding_and_its_streams_unsigned(self) -> None:
        events = stamped_events(20, sessions=2)
        other = SigningKey(Ed25519PrivateKey.from_private_bytes(bytes(32)), "k2")
        foreign = [sign(c, other) for c in checkpoints_of(events, max_turns=5)]
        r = run([("cp", c) for c in foreign] + [("turn", s) for s in events])
        # The invalid checkpoints are findings; the streams no valid checkpoint names are
        # unsigned, a finding too (fail closed).
        assert {f.reason for f in r.found} == {"unknown_key", "unsigned"}
        assert set(r.statuses().values()) == {"unsigned"}
        revoked = parse_keyring(
            keyring_entry_toml("k1", KEY.public_pem(), datetime(2020, 1, 1, tzinfo=UTC))
            + "revoked_at = 2021-01-01T00:00:00Z\n"
        )
        r = run(
            [("cp", c) for c in checkpoints_of(events, max_turns=5)]
            + [("turn", s) for s in events],
            revoked,
        )
        assert {f.reason for f in r.found} == {"key_not_valid", "unsigned"}

    def test_turns_after_a_final_checkpoint_are_forged(self) -> None:
        events = stamped_events(20, sessions=2)
        written = checkpoints_of(events[:15], max_turns=5)
        assert written[-1].final
        r = run([("cp", c) for c in written] + [("turn", s) for s in events])
        assert {f.reason for f in r.found} == {"after_final"}

    def test_a_signed_position_that_never_arrives_is_truncated(self) -> None:
        events = stamped_events(20, sessions=2)
        written = checkpoints_of(events, max_turns=5)
        target = stream_of(events[-1].event)
        kept = [s for s in events if s is not events[-1]]
        r = run([("cp", c) for c in written] + [("turn", s) for s in kept])
        assert r.statuses()[target] == "truncated"
        assert r.found == []  # truncated is a status, not a forgery


class TestRestart:
    @settings(max_examples=25, deadline=None)
    @given(st.data())
    def test_a_restart_from_the_checkpointed_state_ends_as_an_uninterrupted_run(
        self, data: st.DataObject
    ) -> None:
        events = stamped_events(40, sessions=3)
        written = checkpoints_of(events, max_turns=data.draw(st.integers(1, 8)))
        if data.draw(st.booleans()):
            events = rewrite(events, data.draw(st.sampled_from(sorted(streams(events)))), 0)
        items = interleave(events, written, data.draw(PICKS))
        cut = data.draw(st.integers(0, len(items)))
        whole = run(items)

        before = Run(FollowTrust(RING, grace_s=GRACE_S))
        records = []
        for i in range(0, cut, 7):  # checkpointed every few items, as at each flush
            before.feed(items[i : min(i + 7, cut)])
            records += before.trust.checkpoint()
        after = Run(FollowTrust(RING, grace_s=GRACE_S))
        after.trust.load(records)
        after.now_ms = before.now_ms
        after.feed(items[cut:])
        after.settle()
        assert after.statuses() == whole.statuses()
        assert sorted(f.reason for f in before.found + after.found) == sorted(
            f.reason for f in whole.found
        )
        assert {p: c.link for p, c in after.trust.producers.items()} == {
            p: c.link for p, c in whole.trust.producers.items()
        }


class TestSplitByPartition:
    """One judge per turn partition (as ``--workers N`` splits them): each keeps the heads
    of the streams the publisher's partitioner places in its partition."""

    @settings(max_examples=30, deadline=None)
    @given(st.data())
    def test_judges_split_by_partition_find_what_one_judge_of_everything_finds(
        self, data: st.DataObject
    ) -> None:
        partitions = data.draw(st.integers(1, 4))
        events = stamped_events(data.draw(st.integers(10, 40)), sessions=5)
        written = checkpoints_of(events, max_turns=data.draw(st.integers(1, 8)))
        if data.draw(st.booleans()):
            events = rewrite(events, data.draw(st.sampled_from(sorted(streams(events)))), 0)
        if data.draw(st.booleans()):  # some turns never arrive: truncated where signed
            events = events[: data.draw(st.integers(1, len(events)))]
        if data.draw(st.booleans()) and any(c.heads for c in written):  # a keyless copy
            at = data.draw(st.sampled_from([i for i, c in enumerate(written) if c.heads]))
            first = written[at].heads[0]
            edited = dataclasses.replace(
                written[at],
                heads=(StreamHead(first.session_id, first.producer_id, first.sequence, "f" * 64),),
            )
            written = [*written[: at + 1], edited, *written[at + 1 :]]
        items = interleave(events, written, data.draw(PICKS))
        ring = data.draw(st.sampled_from([RING, REQUIRED]))
        whole = run(items, ring)

        def place(stream: StreamId) -> int:
            return session_partition(stream[0], partitions)

        judges = {
            p: Run(
                FollowTrust(
                    ring,
                    grace_s=GRACE_S,
                    scope=p,
                    owns=lambda s, p=p: place(s) == p,  # type: ignore[misc]  # bound per judge
                    reports_checkpoints=p == 0,
                )
            )
            for p in range(partitions)
        }
        for kind, item in items:
            for p, r in judges.items():
                mine = isinstance(item, Stamped) and place(stream_of(item.event)) == p
                if kind == "cp" or mine:
                    r.feed([(kind, item)])
                else:
                    r.now_ms += 1  # one clock for all
        split: dict[StreamId, str] = {}
        found: list[Forgery] = []
        for r in judges.values():
            r.settle()
            assert not set(split) & set(r.statuses())  # a stream is judged in one place
            split.update(r.statuses())
            found += r.found
        assert split == whole.statuses()
        assert sorted((f.reason, f.stream or ("", "")) for f in found) == sorted(
            (f.reason, f.stream or ("", "")) for f in whole.found
        )

    def test_a_judge_keeps_its_own_records_and_loads_no_other_partitions(self) -> None:
        events = stamped_events(30, sessions=6)
        written = checkpoints_of(events, max_turns=4)
        records: list[tuple[bytes, bytes | None]] = []
        held: dict[int, set[StreamId]] = {}
        for p in range(3):
            judge = FollowTrust(
                RING,
                grace_s=GRACE_S,
                scope=p,
                owns=lambda s, p=p: session_partition(s[0], 3) == p,  # type: ignore[misc]  # bound per judge
            )
            for c in written:
                judge.take_checkpoint(c, None)
            held[p] = set(judge.streams)
            records += judge.checkpoint()
        assert set().union(*held.values()) == streams(events)
        for p in range(3):
            again = FollowTrust(RING, grace_s=GRACE_S, scope=p)
            again.load(records)  # every partition's records: only its own are taken
            assert set(again.streams) == held[p]


def gauge(trust: FollowTrust) -> dict[str, int]:
    return {state: n for state, n in trust.by_status().items() if n}


class TestRetirement:
    """A stream the proof retires (it ended whole) leaves the trust state once settled
    signed, counted still; any other verdict stays; a restart from the checkpoint records
    holds what an uninterrupted run holds."""

    @settings(max_examples=40, deadline=None)
    @given(st.integers(10, 50), st.integers(1, 20), PICKS, st.data())
    def test_signed_streams_retired_at_any_moment_leave_counted_and_a_restart_agrees(
        self, n: int, max_turns: int, picks: list[bool], data: st.DataObject
    ) -> None:
        events = stamped_events(n, sessions=4)
        items = interleave(events, checkpoints_of(events, max_turns=max_turns), picks)
        whole = run(items, REQUIRED)
        r = Run(FollowTrust(REQUIRED, grace_s=GRACE_S))
        at = data.draw(st.integers(0, len(items)), label="retired after item")
        # The proof retires a stream once every turn of it was read (it ended whole).
        later = {stream_of(i.event) for k, i in items[at:] if isinstance(i, Stamped)}
        ended = sorted(streams([i for k, i in items[:at] if isinstance(i, Stamped)]) - later)
        retired = data.draw(st.sets(st.sampled_from(ended)) if ended else st.just(set()))
        records: list[tuple[bytes, bytes | None]] = []
        r.feed(items[:at])
        for stream in sorted(retired):
            r.trust.retire(stream)
        records += r.trust.checkpoint()
        r.feed(items[at:])
        r.settle()
        records += r.trust.checkpoint()
        assert r.found == []
        assert gauge(r.trust) == gauge(whole.trust) == {"signed": len(streams(events))}
        assert set(r.trust.streams) == streams(events) - retired  # settled: gone
        assert r.trust.retired_signed == len(retired)
        again = FollowTrust(REQUIRED, grace_s=GRACE_S)
        again.load(records)
        assert gauge(again) == gauge(r.trust)
        assert set(again.streams) == set(r.trust.streams)

    def test_streams_retired_before_their_turns_are_signed_leave_once_they_are(self) -> None:
        events = stamped_events(12, sessions=2)
        r = Run(FollowTrust(REQUIRED, grace_s=GRACE_S))
        r.feed([("turn", s) for s in events])
        for stream in streams(events):
            r.trust.retire(stream)
        assert set(r.trust.streams) == streams(events)  # nothing signed yet: all stay
        r.feed([("cp", c) for c in checkpoints_of(events, max_turns=5)])
        r.trust.sweep(horizon_ms=r.now_ms, event_time_ms={0: r.now_ms})
        assert r.trust.streams == {}
        assert gauge(r.trust) == {"signed": len(streams(events))}

    @settings(max_examples=15, deadline=None)
    @given(st.integers(5, 40))
    def test_unsigned_forged_and_truncated_streams_are_never_retired(self, n: int) -> None:
        events = stamped_events(n, sessions=3)
        unsigned = run([("turn", s) for s in events])
        forged = run([("turn", s) for s in events], REQUIRED)
        written = checkpoints_of(events, max_turns=2)
        truncated = run([("turn", s) for s in events[: n // 2]] + [("cp", c) for c in written])
        for r in (unsigned, forged, truncated):
            held = dict(r.statuses())
            for stream in streams(events):
                r.trust.retire(stream)
            r.settle()
            assert {s: t for s, t in r.statuses().items() if t != "signed"} == {
                s: t for s, t in held.items() if t != "signed"
            }
