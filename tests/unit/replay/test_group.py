"""A replay group's bound, as the commit metadata records it for every member."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.replay.group import bound_metadata, parse_bound


@settings(max_examples=100)
@given(
    st.text("0123456789abcdef", min_size=64, max_size=64),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
)
def test_a_recorded_bound_reads_back(fingerprint: str, start: int, end: int) -> None:
    assert parse_bound(bound_metadata(fingerprint, start, end)) == (fingerprint[:16], start, end)


def test_metadata_of_anything_else_records_no_bound() -> None:
    for metadata in (
        None,
        "",
        "turnaudit-replay/1 abc 1",
        "someone-else/1 abc 1 2",
        "turnaudit-replay/2 abc 1 2",
    ):
        assert parse_bound(metadata) is None
