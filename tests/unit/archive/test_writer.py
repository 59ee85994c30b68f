"""One partition's archiver: a record taken once is never taken again, whether its segment
is open, cut and not yet written, or written; the cut follows the window and the size bound."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.writer import ArchivePolicy, PartitionArchive

POLICY = ArchivePolicy(window_ms=1000, max_bytes=50)


def record(offset: int, timestamp: int, size: int = 10) -> ArchivedRecord:
    return ArchivedRecord("t", 0, offset, timestamp, 1, None, b"x" * size)


@given(
    steps=st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 40)), min_size=1, max_size=40),
    again=st.lists(st.integers(0, 39), max_size=10),
)
def test_a_record_taken_again_is_counted_reread_wherever_its_segment_is(
    steps: list[tuple[int, int]], again: list[int]
) -> None:
    state = PartitionArchive("t", 0)
    records = [record(o, ts, size) for o, (ts, size) in enumerate(steps)]
    for r in records:
        assert state.take(r, POLICY)
    for offset in again:
        if offset < len(records):
            assert not state.take(records[offset], POLICY)
    assert state.reread == sum(1 for o in again if o < len(records))
    state.cut_open()
    held = [r for cut in state.cut for r in cut.records]
    assert held == records
    cuts = [cut.records for cut in state.cut]
    for held_records in cuts:  # no record of a later window, within the bound (or alone)
        first_window = held_records[0].timestamp // POLICY.window_ms
        assert all(r.timestamp // POLICY.window_ms <= first_window for r in held_records)
        assert sum(r.size() for r in held_records) <= POLICY.max_bytes or len(held_records) == 1
    for before, after in itertools.pairwise(cuts):  # and cut only when it had to be
        later = after[0].timestamp // POLICY.window_ms > before[0].timestamp // POLICY.window_ms
        full = sum(r.size() for r in before) + after[0].size() > POLICY.max_bytes
        assert later or full
