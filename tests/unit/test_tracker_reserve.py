"""A tracker with its event-id table sized to its bound up front (``reserve_event_ids``,
what the services' ``StreamTracking`` does) places every message as one that grew its
table, before and after the bound is reached, reserved fresh or holding ids already; and
its room is resident once reserved, the only memory asked for huge pages."""

from __future__ import annotations

import subprocess
import sys
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.events import encode, turn
from turnaudit._native import reserve_event_ids
from turnaudit.identity import StreamTracker

# (session, sequence, partition): replays of earlier ones are redeliveries, skipped
# sequences gaps, and the small bounds force both tables to forget.
_MESSAGES = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 12), st.integers(0, 2)), max_size=80
)


@cache
def _message(session: int, sequence: int) -> tuple[dict[str, object], bytes]:
    event = turn(f"s-reserve-{session}", sequence)
    return event, encode(event)


def _placements(
    tracker: StreamTracker, messages: list[tuple[int, int, int]], start: int = 0
) -> list[object]:
    out = []
    for offset, (session, sequence, partition) in enumerate(messages, start):
        event, value = _message(session, sequence)
        out.append(tracker.observe(event, value, partition=partition, offset=offset))
    return out


@settings(deadline=None)
@given(
    messages=_MESSAGES,
    max_event_ids=st.integers(1, 40),
    max_streams=st.integers(1, 6),
    reserve_after=st.integers(0, 80),
)
def test_a_reserved_tracker_places_every_message_as_a_growing_one_does(
    messages: list[tuple[int, int, int]], max_event_ids: int, max_streams: int, reserve_after: int
) -> None:
    grown = StreamTracker(max_streams=max_streams, max_event_ids=max_event_ids)
    reserved = StreamTracker(max_streams=max_streams, max_event_ids=max_event_ids)
    reserve_event_ids(reserved)  # fresh
    before, after = messages[:reserve_after], messages[reserve_after:]
    assert _placements(reserved, before) == _placements(grown, before)
    reserve_event_ids(reserved)  # again, holding ids: they stay
    assert _placements(reserved, after, len(before)) == _placements(grown, after, len(before))
    # The same tables (their encodings list hash tables in an order that follows the
    # capacity, so the tables are compared as what they hold).
    assert _tables(reserved) == _tables(grown)


def _tables(tracker: StreamTracker) -> tuple[object, ...]:
    return (
        tracker.remembered_items(),
        tracker.remembered_keys(),  # the arrival order, oldest first
        tracker.heads(),
        tracker.last_positions(),
        tracker.missing(),
        tracker.stream_counts(),
        (tracker.new_turns, tracker.currently_missing, tracker.forgotten_event_ids),
    )


def _in_a_fresh_process(script: str, bound: int) -> str:
    """What ``script`` prints, run with the bound in a fresh interpreter."""
    ran = subprocess.run(
        [sys.executable, "-c", script, str(bound)], capture_output=True, text=True, check=True
    )
    return ran.stdout


_RESIDENT_AFTER_RESERVE = """
import os, sys
from turnaudit._native import reserve_event_ids
from turnaudit.identity import StreamTracker

def resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

tracker = StreamTracker(max_streams=1_000, max_event_ids=int(sys.argv[1]))
before = resident()
reserve_event_ids(tracker)
print(resident() - before)
"""


def test_a_reserved_tracker_has_its_room_resident_before_its_first_message() -> None:
    # In a fresh process (memory another test freed may be resident already): the table
    # and the arrival order, at least 80 bytes an id, are in memory once reserved, not
    # faulted in page by page by the first messages that land in them.
    bound = 300_000
    assert int(_in_a_fresh_process(_RESIDENT_AFTER_RESERVE, bound)) >= 80 * bound


_HUGE_PAGE_ADVICE = """
import sys
from turnaudit._native import reserve_event_ids
from turnaudit.identity import StreamTracker
from turnaudit.producers.simulator import TurnRuntimeSimulator

def advised_huge() -> int:
    # Bytes of the mappings marked for transparent huge pages (VmFlags "hg").
    total, size = 0, 0
    with open("/proc/self/smaps") as f:
        for line in f:
            if line.startswith("Size:"):
                size = int(line.split()[1]) * 1024
            elif line.startswith("VmFlags:") and "hg" in line.split()[1:]:
                total += size
    return total

tracker = StreamTracker(max_streams=1_000, max_event_ids=int(sys.argv[1]))
for event in TurnRuntimeSimulator(1, concurrent_sessions=50).events(5_000):
    tracker.observe(event, b"")  # the native heap in use: tables, streams, ids
before = advised_huge()
reserve_event_ids(tracker)
print(before, advised_huge())
"""


def test_only_the_reserved_room_is_asked_for_huge_pages() -> None:
    # The allocator's arenas never ask for transparent huge pages (a huge page faulted in
    # as the heap grows stalls the batch that touches it); the room reserved at the start
    # asks for them (its random lookups keep a huge page's reach in the TLB).
    bound = 300_000
    before, after = (int(n) for n in _in_a_fresh_process(_HUGE_PAGE_ADVICE, bound).split())
    assert before == 0
    assert after >= 60 * bound  # the id table and the arrival order, in whole 2 MiB
