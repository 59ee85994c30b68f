"""The follower's timed checkpoint writes its stream records natively, in one call
(``checkpoint_streams``): for any streams (any texts, held in memory, pending or spilled,
gapped or not) they are, record for record and in order, what Python writes one stream
at a time from ``stream_state`` with ``stream_key`` and ``stream_record``."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit._native import stream_state, take_dirty, track_dirty
from turnaudit.identity import GENESIS_HASH, StreamTracker
from turnaudit.verify.follow_records import StateRecord, stream_key, stream_record

# Stream ids as the tracker holds them: any Unicode but lone surrogates (the decoder
# reads strict UTF-8), control characters, quotes, backslashes and astral ones included.
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
streams = st.tuples(texts, texts)
turns = st.lists(
    st.tuples(streams, st.integers(0, 6), st.none() | st.integers(-3, 2**40)),
    max_size=40,
)


def fed(
    folder: Path,
    placed: list[tuple[tuple[str, str], int, int | None]],
    *,
    max_streams: int = 2,
    stream_batch: int = 2,
) -> StreamTracker:
    """A tracker holding ``max_streams`` streams in memory (the rest pending or spilled),
    every turn placed (gaps, reused positions and chain breaks included)."""
    tracker = StreamTracker(
        max_streams=max_streams,
        stream_spill=lambda: str(folder / "streams.sqlite3"),
        stream_batch=stream_batch,
    )
    track_dirty(tracker)
    for n, ((session, producer), sequence, partition) in enumerate(placed):
        event = {
            "session_id": session,
            "producer_id": producer,
            "sequence": sequence,
            "event_id": f"event-{n}",
            "prev_hash": GENESIS_HASH,
        }
        tracker.observe(event, b"turn %d" % n, partition=partition, offset=n)
    return tracker


def one_at_a_time(
    tracker: StreamTracker, dirty: set[tuple[str, str]], gapped: set[tuple[str, str]]
) -> tuple[list[StateRecord], list[tuple[int, tuple[str, str], int | None, bytes]]]:
    """The checkpoint's former loop over the streams placed into and named: each
    stream's state asked for, its record written in Python (a gapped one left for the
    caller, at its place)."""
    records: list[StateRecord] = []
    left: list[tuple[int, tuple[str, str], int | None, bytes]] = []
    for stream in sorted(dirty):
        held = stream_state(tracker, stream[0], stream[1])
        if held is None:
            continue
        partition, state = held
        if stream in gapped:
            left.append((len(records), stream, partition, state))
            records.append((partition, stream_key(stream), b""))
        else:
            records.append((partition, stream_key(stream), stream_record(partition, state, None)))
    return records, left


@settings(max_examples=150, deadline=None)
@given(turns, st.lists(streams, max_size=4), st.data())
def test_checkpoint_streams_writes_what_python_writes_stream_by_stream(
    placed: list[tuple[tuple[str, str], int, int | None]],
    extra: list[tuple[str, str]],
    data: st.DataObject,
) -> None:
    named = sorted({s for s, _, _ in placed} | set(extra))
    gapped = set(data.draw(st.lists(st.sampled_from(named), max_size=3))) if named else set()
    with tempfile.TemporaryDirectory() as folder:
        tracker = fed(Path(folder), placed)
        records, left = tracker.checkpoint_streams(extra, sorted(gapped))
        # Every turn has an id of its own: each placed its stream, spilled or not since.
        dirty = {s for s, _, _ in placed} | set(extra)
        assert (records, left) == one_at_a_time(tracker, dirty, gapped)
        # Taken: the next checkpoint has nothing, nor has the set the follower reads.
        assert tracker.checkpoint_streams([], []) == ([], [])
        assert take_dirty(tracker) == []


@settings(max_examples=12, deadline=None)
@given(
    st.integers(1, 13_000),
    st.lists(st.integers(0, 12_999), max_size=6),
    st.sampled_from(["memory", "spilled"]),
)
def test_checkpoint_streams_of_thousands_is_what_python_writes_across_its_chunks(
    count: int, gapped_at: list[int], held: str
) -> None:
    """Thousands of streams placed into (the native call writes them a chunk at a time,
    each chunk's records from one buffer), some gapped at any place, held in memory or
    nearly all spilled: the same records, in order, as stream by stream in Python."""
    placed = [((f"session-{n:05d}", "producer"), n % 3, n % 4) for n in range(count)]
    named = sorted({s for s, _, _ in placed})
    gapped = {named[i % len(named)] for i in gapped_at}
    with tempfile.TemporaryDirectory() as folder:
        tracker = fed(
            Path(folder),
            placed,
            max_streams=1 << 20 if held == "memory" else 100,
            stream_batch=64,
        )
        records, left = tracker.checkpoint_streams([], sorted(gapped))
        assert (records, left) == one_at_a_time(tracker, set(named), gapped)
