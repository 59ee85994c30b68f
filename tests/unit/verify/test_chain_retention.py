"""Checkpoint chains under time retention, without a broker: a chain may begin at its
producer's first retained checkpoint only when what is gone before it is older than the
turn topic's retention (``RetentionStart``), in one-shot verify and in the follower.

Drawn at random: which checkpoints of a chain are removed and when verify runs (the rule
holds to the removed checkpoints' real signing times); a publisher run over simulated
hours, its two topics cut by retention as Kafka cuts them (segments, oldest first) and
judged exact; the same run further cut by someone (any prefix of the checkpoints or of
the turns) found whenever retention cannot explain it."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.identity_streams import stamped_events
from tests.support.retained_chain import HOUR_MS, TimedRun, run_over_time
from tests.unit.verify.test_trust import DECODE, KEY, RING, status
from turnaudit.checkpoint_chain import KEPT_FOR_EVER, RetentionStart, judge_chain
from turnaudit.checkpoints import Checkpoint, sign
from turnaudit.identity import GENESIS_HASH, chain_hash, stream_of
from turnaudit.stream_heads import StreamHead
from turnaudit.verify.follow_trust import FollowTrust
from turnaudit.verify.trust import Removal, TrustReport, judge_streams, signed_heads
from turnaudit.verify.verifier import Verifier

SLOW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
T0 = 1_700_000_000_000  # after the key's valid_from


def signed_chain(times: list[int], *, fmt: int) -> list[Checkpoint]:
    """One producer's chain, checkpoint i signed at ``times[i]``, each naming a stream."""
    out: list[Checkpoint] = []
    for i, at in enumerate(times):
        before = out[-1] if out else None
        head = StreamHead(f"s{i}", "p", 0, f"{i:064x}")
        out.append(
            sign(
                Checkpoint(
                    "p",
                    i,
                    GENESIS_HASH if before is None else before.digest(),
                    at,
                    "k1",
                    False,
                    HOUR_MS,
                    100,
                    (head,),
                    prev_at_ms=0 if before is None or fmt < 3 else before.at_ms,
                    format=fmt,
                ),
                KEY,
            )
        )
    return out


def breaks(kept: list[Checkpoint], start: RetentionStart | None) -> list[int]:
    chain = judge_chain([(c, None) for c in kept], RING, start=start)
    return sorted(j.checkpoint.index for j in chain.invalid() if j.problem == "chain_break")


chains = st.lists(st.integers(1, 3 * HOUR_MS), min_size=2, max_size=12).map(
    lambda gaps: [T0 + sum(gaps[: i + 1]) for i in range(len(gaps))]
)


class TestTheRule:
    @SLOW
    @given(chains, st.data())
    def test_a_chain_begins_past_a_hole_exactly_when_everything_in_it_is_past_retention(
        self, times: list[int], data: st.DataObject
    ) -> None:
        """Format 3: any checkpoints removed (a prefix or not), verify at any time."""
        written = signed_chain(times, fmt=3)
        gone = data.draw(st.sets(st.integers(0, len(times) - 1), max_size=len(times) - 1))
        retention = data.draw(st.none() | st.integers(1, 30 * HOUR_MS))
        moved = data.draw(st.booleans())
        now = data.draw(st.integers(times[0], times[-1] + 40 * HOUR_MS))
        kept = [c for c in written if c.index not in gone]
        first = kept[0].index
        expected = []
        for c in kept:
            if c.index == 0 or c.index - 1 not in gone:
                continue
            explained = (
                c.index == first  # a hole at the beginning, not in the middle
                and moved
                and retention is not None
                and all(times[i] <= now - retention for i in range(c.index))
            )
            if not explained:
                expected.append(c.index)
        assert breaks(kept, RetentionStart(retention, lambda: now, moved)) == expected
        # Without the rule every hole breaks the chain.
        assert breaks(kept, None) == [c.index for c in kept if c.index and c.index - 1 in gone]

    @SLOW
    @given(chains, st.data())
    def test_a_format_two_chain_begins_late_only_when_retention_surely_explains_it(
        self, times: list[int], data: st.DataObject
    ) -> None:
        """Format 2 does not say when its predecessor was signed: it is bounded by the
        first retained checkpoint's own signing time (never accepting a young hole)."""
        written = signed_chain(times, fmt=2)
        cut = data.draw(st.integers(1, len(times) - 1))
        retention = data.draw(st.integers(1, 30 * HOUR_MS))
        now = data.draw(st.integers(times[0], times[-1] + 40 * HOUR_MS))
        found = breaks(written[cut:], RetentionStart(retention, lambda: now))
        assert found == ([] if times[cut] <= now - retention else [cut])
        if not found:
            assert all(t <= now - retention for t in times[:cut])


def judge_retained(
    run: TimedRun,
    *,
    now: int,
    retention: int,
    turn_start: int,
    first_checkpoint: int,
    start: RetentionStart | None = None,
) -> TrustReport:
    """The two topics read from their log starts, judged as ``verify --keyring`` does."""
    kept = run.checkpoints[first_checkpoint:]
    if start is None:
        start = RetentionStart(retention, lambda: now, first_checkpoint > 0)
    chain = judge_chain([(c, None) for c in kept], RING, start=start)
    verifier = Verifier(
        DECODE,
        signed=signed_heads(chain).positions,
        named_schemas=chain.named_schemas(),
        log_start_offsets={0: turn_start},
    )
    for offset in range(turn_start, len(run.turns)):
        s = run.turns[offset]
        verifier.feed(0, offset, s.key, s.value, run.stored_ms[offset])
    assert verifier.trust is not None
    return judge_streams(
        chain,
        keyring="ring",
        require_signed=False,
        observed=verifier.signed_seen,
        last_seen=verifier.tracker.last_positions(),
        to_end=True,
        whole_stream=turn_start == 0,
        facts=verifier.trust.facts(),
        removal=Removal(now, retention, moved=turn_start > 0, whole=True),
    )


@dataclasses.dataclass(frozen=True, repr=False)
class Year:
    """A run over simulated hours, and the moment and retention it is verified at."""

    run: TimedRun
    now: int
    retention: int
    turn_start: int
    first_checkpoint: int

    def __repr__(self) -> str:  # hypothesis prints it with a failing example
        return (
            f"Year({len(self.run.turns)} turns from {self.turn_start}, "
            f"{len(self.run.checkpoints)} checkpoints from {self.first_checkpoint}, "
            f"now {self.now}, retention {self.retention})"
        )


@st.composite
def retained_runs(draw: st.DrawFn) -> Year:
    events = stamped_events(
        draw(st.integers(80, 240)), seed=draw(st.integers(0, 3)), sessions=draw(st.integers(1, 4))
    )
    step = draw(st.integers(5, 30)) * 60_000
    run = run_over_time(events, KEY, start_ms=T0, step_ms=step, interval_ms=HOUR_MS)
    span = run.stored_ms[-1] - T0
    retention = draw(st.integers(HOUR_MS, span))
    now = run.stored_ms[-1] + draw(st.integers(0, span))
    segment = draw(st.integers(1, 8))
    # The margin outlasts a turn segment (and a stream's pauses): a checkpoint outlives
    # every turn it signs.
    margin = segment * step + 24 * HOUR_MS
    kept = run.retained(now_ms=now, retention_ms=retention, margin_ms=margin, segment=segment)
    return Year(run, now, retention, kept.turn_log_start, kept.first_checkpoint)


class TestRetainedRange:
    @SLOW
    @given(retained_runs())
    def test_what_retention_keeps_verifies_exact(self, year: Year) -> None:
        report = judge_retained(
            year.run,
            now=year.now,
            retention=year.retention,
            turn_start=year.turn_start,
            first_checkpoint=year.first_checkpoint,
        )
        assert report.findings() == []
        assert set(status(report).values()) <= {"signed"}
        held = {stream_of(s.event) for s in year.run.turns[year.turn_start :]}
        assert set(status(report)) == held
        producer = year.run.checkpoints[0].producer_id
        begins_late = 0 < year.first_checkpoint < len(year.run.checkpoints)
        assert report.chain.started == ({producer} if begins_late else set())
        # The rule is what accepts it: read as if kept for ever, the chain breaks.
        if begins_late:
            kept_for_ever = judge_retained(
                year.run,
                now=year.now,
                retention=year.retention,
                turn_start=year.turn_start,
                first_checkpoint=year.first_checkpoint,
                start=KEPT_FOR_EVER,
            )
            assert [f.kind for f in kept_for_ever.findings()][:1] == ["invalid_checkpoint"]

    @SLOW
    @given(retained_runs(), st.data())
    def test_checkpoints_removed_past_retention_are_found_or_cover_nothing_kept(
        self, year: Year, data: st.DataObject
    ) -> None:
        """Someone removes more of the checkpoints topic (any longer prefix)."""
        total = len(year.run.checkpoints)
        cut = data.draw(st.integers(year.first_checkpoint, max(year.first_checkpoint, total - 1)))
        report = judge_retained(
            year.run,
            now=year.now,
            retention=year.retention,
            turn_start=year.turn_start,
            first_checkpoint=cut,
        )
        kinds = {f.kind for f in report.findings()}
        young = cut > 0 and year.run.checkpoints[cut - 1].at_ms > year.now - year.retention
        if young:
            assert "invalid_checkpoint" in kinds  # its successor's chain_break
        named = {h.stream for c in year.run.checkpoints[cut:] for h in c.heads}
        held = {stream_of(s.event) for s in year.run.turns[year.turn_start :]}
        if held - named:
            # Turns only the removed checkpoints signed: unsigned (forged: their producer
            # closed cleanly, and no retained checkpoint names them).
            assert kinds & {"unsigned", "forged"}
        if not young and held <= named:
            assert "invalid_checkpoint" not in kinds

    @SLOW
    @given(retained_runs(), st.data())
    def test_turns_removed_past_retention_are_found(self, year: Year, data: st.DataObject) -> None:
        """Someone removes more of the turn partition (any longer prefix)."""
        cut = data.draw(st.integers(year.turn_start, len(year.run.turns)))
        report = judge_retained(
            year.run,
            now=year.now,
            retention=year.retention,
            turn_start=cut,
            first_checkpoint=year.first_checkpoint,
        )
        # A removed turn written later than now - retention.ms by more than the time
        # two checkpoint intervals leave open (when a turn was written is known to one).
        slack = 2 * HOUR_MS + year.run.stored_ms[1] - year.run.stored_ms[0]
        late = [
            s
            for s, at in zip(year.run.turns[:cut], year.run.stored_ms[:cut], strict=True)
            if at > year.now - year.retention + slack
        ]
        kinds = {f.kind for f in report.findings()}
        if late:
            assert kinds & {"truncated", "missing"}
        if cut == year.turn_start:
            assert not kinds


class TestFollower:
    @SLOW
    @given(retained_runs(), st.data())
    def test_a_fresh_follower_resumes_each_chain_exactly_when_retention_explains_it(
        self, year: Year, data: st.DataObject
    ) -> None:
        checkpoints = year.run.checkpoints
        read_first = data.draw(st.integers(0, len(checkpoints) - 1))
        resume = data.draw(st.integers(read_first, len(checkpoints) - 1))
        trust = FollowTrust(
            RING, grace_s=1.0, start=RetentionStart(year.retention, lambda: year.now)
        )
        # A follower that read from ``read_first`` and, after time away, from ``resume``.
        read = [checkpoints[read_first]] if read_first < resume else []
        expected: list[str] = []
        last = -1  # the index of the last checkpoint taken
        for c in [*read, *checkpoints[resume:]]:
            trust.take_checkpoint(c, None)
            past_retention = all(
                old.at_ms <= year.now - year.retention for old in checkpoints[: c.index]
            )
            if c.index == last + 1 or past_retention:
                last = c.index
            else:  # a hole retention does not explain: the chain does not resume
                expected.append("chain_break")
        assert [f.reason for f in trust.found()] == expected
        assert trust.valid == len(read) + len(checkpoints) - resume - len(expected)

    @SLOW
    @given(retained_runs())
    def test_a_follower_without_the_rule_breaks_every_chain_retention_cut(self, year: Year) -> None:
        trust = FollowTrust(RING, grace_s=1.0, start=KEPT_FOR_EVER)
        for c in year.run.checkpoints[year.first_checkpoint :]:
            trust.take_checkpoint(c, None)
        found = [f.reason for f in trust.found()]
        broken = len(year.run.checkpoints) - year.first_checkpoint if year.first_checkpoint else 0
        assert found == ["chain_break"] * broken

    @SLOW
    @given(retained_runs(), st.sampled_from(["retained", "kept for ever", "without the rule"]))
    def test_a_fresh_follower_judges_every_stream_it_reads_signed(
        self, year: Year, checkpoints: str
    ) -> None:
        """Checkpoints read before the turns (those retention keeps, or every one, as when
        the checkpoints topic is kept for ever): the signed heads below a stream's first
        retained turn went with retention. Without the rule such a stream is truncated."""
        rule = checkpoints != "without the rule"
        start = RetentionStart(year.retention, lambda: year.now) if rule else KEPT_FOR_EVER
        trust = FollowTrust(RING, grace_s=1.0, start=start)
        taken = year.run.checkpoints[year.first_checkpoint if checkpoints == "retained" else 0 :]
        for c in taken:
            trust.take_checkpoint(c, None)
        first: dict[tuple[str, str], int] = {}
        run = year.run
        for offset in range(year.turn_start, len(run.turns)):
            s = run.turns[offset]
            stream = stream_of(s.event)
            first.setdefault(stream, s.event["sequence"])
            trust.observe(
                stream, 0, s.event["sequence"], chain_hash(s.value), run.stored_ms[offset]
            )
        trust.sweep(horizon_ms=year.now + 10_000, event_time_ms={0: 2**62})
        cut = {
            stream
            for stream, position in first.items()
            if any(h.stream == stream and h.sequence < position for c in taken for h in c.heads)
        }
        expected = {s: "truncated" if s in cut and not rule else "signed" for s in first}
        assert {s: trust.streams[s].status() for s in first} == expected

    @SLOW
    @given(retained_runs())
    def test_a_follower_finds_any_stream_whose_end_is_removed_however_old(self, year: Year) -> None:
        """The last turn of every stream removed, read long after: retention never explains
        an end (no later position was read)."""
        much_later = year.now + 100 * year.retention
        trust = FollowTrust(
            RING, grace_s=1.0, start=RetentionStart(year.retention, lambda: much_later)
        )
        for c in year.run.checkpoints[year.first_checkpoint :]:
            trust.take_checkpoint(c, None)
        run = year.run
        last = {stream_of(s.event): offset for offset, s in enumerate(run.turns)}
        read = set()
        for offset in range(year.turn_start, len(run.turns)):
            s = run.turns[offset]
            stream = stream_of(s.event)
            if offset != last[stream]:
                read.add(stream)
                trust.observe(
                    stream, 0, s.event["sequence"], chain_hash(s.value), run.stored_ms[offset]
                )
        trust.sweep(horizon_ms=much_later, event_time_ms={0: 2**62})
        assert {s: trust.streams[s].status() for s in read} == dict.fromkeys(read, "truncated")
