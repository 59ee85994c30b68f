"""The stream tracker's spill of idle streams (verify's ``--memory-streams``): streams
pushed out of memory to the SQLite scratch file answer every question as an unbounded
tracker's do, leave with their partition, and survive a really full disk."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.smallfs import fill_disk, small_filesystem
from tests.unit.verify import scenario
from turnaudit._native import drop_stream, stream_state
from turnaudit.identity import StreamTracker


def tracker(spill: Path | None, streams: int, batch: int = 2) -> StreamTracker:
    if spill is None:
        return StreamTracker(max_event_ids=1 << 40, max_streams=1 << 40, max_missing=1 << 40)
    return StreamTracker(
        max_event_ids=1 << 40,
        max_streams=streams,
        max_missing=1 << 40,
        stream_spill=lambda: str(spill / "streams.sqlite3"),
        stream_batch=batch,
    )


def answers(t: StreamTracker) -> dict[str, object]:
    return {
        "heads": t.heads(),
        "last": t.last_positions(),
        "missing": t.missing(),
        "untracked": t.untracked_missing(),
        "counts": t.stream_counts(),
        "len": len(t),
        "currently_missing": t.currently_missing,
        "chained": t.chained_heads(),
        "paged": [h for after in (None, ("s", "")) for h in t.chained_heads(after, 3)],
    }


@settings(max_examples=80, deadline=None)
@given(
    count=st.integers(1, 60),
    sessions=st.integers(1, 8),
    streams=st.integers(1, 4),
    batch=st.integers(1, 5),
    dropped=st.sets(st.integers(0, 59), max_size=10),
    forget=st.sets(st.integers(0, 2), max_size=2),
)
def test_spilled_streams_answer_as_held_ones_and_leave_with_their_partition(
    tmp_path_factory: pytest.TempPathFactory,
    *,
    count: int,
    sessions: int,
    streams: int,
    batch: int,
    dropped: set[int],
    forget: set[int],
) -> None:
    spill = tmp_path_factory.mktemp("streams")
    events = [
        e
        for n, e in enumerate(
            scenario.stamped_events(count, seed=3, producers=2, sessions=sessions)
        )
        if n not in dropped
    ]  # gaps, some closed by nothing
    bounded, unbounded = tracker(spill, streams, batch), tracker(None, 0)
    for n, e in enumerate(events):
        partition = len(e.event["session_id"]) % 3
        got = bounded.observe(e.event, e.value, partition=partition, offset=n)
        assert got == unbounded.observe(e.event, e.value, partition=partition, offset=n)
    assert bounded.streams_in_memory() <= streams
    assert answers(bounded) == answers(unbounded)
    bounded.forget_partitions(forget)
    unbounded.forget_partitions(forget)
    assert answers(bounded) == answers(unbounded)


@settings(max_examples=80, deadline=None)
@given(
    count=st.integers(1, 80),
    sessions=st.integers(1, 12),
    streams=st.integers(1, 3),
    batch=st.integers(1, 6),
    drops=st.lists(st.tuples(st.integers(0, 79), st.integers(0, 23)), max_size=20),
)
def test_a_stream_brought_back_then_dropped_stays_gone_whatever_its_row_waits_for(
    tmp_path_factory: pytest.TempPathFactory,
    *,
    count: int,
    sessions: int,
    streams: int,
    batch: int,
    drops: list[tuple[int, int]],
) -> None:
    """A spilled stream that comes back leaves its row behind until the next batch
    deletes it: dropped in between (the follower retiring it), it is gone for every
    question (its state, a new turn of it starts it afresh) as in an unbounded tracker."""
    spill = tmp_path_factory.mktemp("dropped")
    events = scenario.stamped_events(count, seed=7, producers=2, sessions=sessions)
    keys = sorted({(e.event["session_id"], e.event["producer_id"]) for e in events})
    bounded, unbounded = tracker(spill, streams, batch), tracker(None, 0)
    for n, e in enumerate(events):
        got = bounded.observe(e.event, e.value, partition=0, offset=n)
        assert got == unbounded.observe(e.event, e.value, partition=0, offset=n)
        for _, which in (d for d in drops if d[0] == n):
            key = keys[which % len(keys)]
            assert drop_stream(bounded, *key) == drop_stream(unbounded, *key)
        assert [stream_state(bounded, *k) for k in keys] == [
            stream_state(unbounded, *k) for k in keys
        ]
    assert answers(bounded) == answers(unbounded)


def test_a_really_full_disk_is_an_os_error_and_no_stream_is_lost(tmp_path: Path) -> None:
    """A batch of streams that cannot be written raises ENOSPC (verify fails, saying
    why); every stream is still held, and with room again the same tracker goes on."""
    events = scenario.stamped_events(3000, seed=5, producers=2, sessions=400)
    unbounded = tracker(None, 0)
    with small_filesystem(tmp_path / "small", 1024) as mount_point:
        bounded = tracker(mount_point, 10, batch=50)
        refused: OSError | None = None
        filler: Path | None = None
        for n, e in enumerate(events):
            unbounded.observe(e.event, e.value, partition=0, offset=n)
            if n == 500:
                filler = fill_disk(mount_point)
            try:
                bounded.observe(e.event, e.value, partition=0, offset=n)
            except OSError as exc:  # the message was placed; the eviction after it failed
                refused = exc
                break
        assert refused is not None, "the spill never met the full disk"
        assert refused.errno == errno.ENOSPC
        stopped = n
        seen = {(e.event["session_id"], e.event["producer_id"]) for e in events[: stopped + 1]}
        assert len(bounded) == len(seen)
        assert all(bounded.last_position(*s) == unbounded.last_position(*s) for s in seen)
        assert filler is not None
        filler.unlink()
        for n, e in enumerate(events[stopped + 1 :], start=stopped + 1):
            bounded.observe(e.event, e.value, partition=0, offset=n)
            unbounded.observe(e.event, e.value, partition=0, offset=n)
        assert answers(bounded) == answers(unbounded)


@settings(max_examples=80, deadline=None)
@given(
    count=st.integers(1, 50),
    sessions=st.integers(1, 6),
    streams=st.integers(1, 4),
    readers=st.lists(st.sampled_from(["first", "second", "both"]), min_size=50, max_size=50),
    held=st.integers(0, 3),
)
def test_exported_streams_merge_as_trackers_in_memory_do(
    tmp_path_factory: pytest.TempPathFactory,
    *,
    count: int,
    sessions: int,
    streams: int,
    readers: list[str],
    held: int,
) -> None:
    """Two trackers that read parts of the same streams (a stream in both: turns stored
    under another key), handed over as files into a third, which may hold streams of
    its own: the same streams, gaps and heads as ``absorb`` of the trackers in memory."""
    spill = tmp_path_factory.mktemp("absorb")
    events = scenario.stamped_events(count, seed=4, producers=2, sessions=sessions)
    parts = [(tracker(spill / f"{n}", streams), tracker(None, 0)) for n in range(2)]
    for path in (spill / "0", spill / "1", spill / "into"):
        path.mkdir()
    for n, (e, reader) in enumerate(zip(events, readers, strict=False)):
        for i in {"first": (0,), "second": (1,), "both": (0, 1)}[reader]:
            for t in parts[i]:
                t.observe(e.event, e.value, partition=i, offset=n)
    into, reference = tracker(spill / "into", streams), tracker(None, 0)
    for n, e in enumerate(events[:held]):  # streams the merging tracker holds already
        for t in (into, reference):
            t.observe(e.event, e.value, partition=2, offset=n)
    for n, (spilled, in_memory) in enumerate(parts):
        handed = spill / f"handed-{n}.sqlite3"
        if spilled.export_streams(handed):
            into.absorb_streams(handed)
        assert len(spilled) == 0
        reference.absorb(in_memory)
    assert into.streams_in_memory() <= streams
    assert answers(into) == answers(reference)


def test_only_a_tracker_with_a_spill_hands_streams_over_or_takes_them(tmp_path: Path) -> None:
    """A services' tracker (no spill) neither exports nor absorbs streams: one error each,
    nothing taken."""
    events = scenario.stamped_events(4, seed=6, producers=1, sessions=2)
    bounded = tracker(tmp_path, 1)
    for n, e in enumerate(events):
        bounded.observe(e.event, e.value, partition=0, offset=n)
    assert bounded.export_streams(tmp_path / "handed.sqlite3")
    plain = tracker(None, 0)
    with pytest.raises(ValueError, match="stream spill"):
        plain.absorb_streams(tmp_path / "handed.sqlite3")
    with pytest.raises(ValueError, match="stream spill"):
        plain.export_streams(tmp_path / "other.sqlite3")
    assert len(plain) == 0
