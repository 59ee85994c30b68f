"""Announced stream heads against what a range holds: lost_in_crash only where the
range can know (it reaches the stream's end now, and holds the stream or all of it)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from turnaudit.stream_heads import HeadAnnouncement, StreamHead
from turnaudit.verify.crash import stream_ends

streams = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 40), st.one_of(st.none(), st.integers(0, 40)),
              st.booleans()),
    max_size=12, unique_by=lambda t: t[0],
)


def announced(found: list[tuple[int, int, int | None, bool]]) -> list[HeadAnnouncement]:
    return [HeadAnnouncement(StreamHead(f"s{n}", "p", head, "h"), ended, 200, "p")
            for n, head, _, ended in found]


def seen(found: list[tuple[int, int, int | None, bool]]) -> dict[tuple[str, str], int]:
    return {(f"s{n}", "p"): last for n, _, last, _ in found if last is not None}


@given(streams, st.booleans())
def test_a_range_that_ends_before_now_finds_no_crash(
    found: list[tuple[int, int, int | None, bool]], whole: bool
) -> None:
    ends = stream_ends(announced(found), seen(found), whole_stream=whole, to_end=False)
    assert ends.findings() == []
    assert ends.lost_in_crash == 0
    assert ends.as_json()["not_in_range"] == len(found)


@given(streams, st.booleans())
def test_a_range_to_the_end_counts_what_never_reached_the_stream(
    found: list[tuple[int, int, int | None, bool]], whole: bool
) -> None:
    ends = stream_ends(announced(found), seen(found), whole_stream=whole, to_end=True)
    expected = sum(max(0, head - (-1 if last is None else last))
                   for _, head, last, _ in found if last is not None or whole)
    assert ends.lost_in_crash == expected
    assert len(ends.findings()) == sum(
        1 for _, head, last, _ in found
        if (last is not None or whole) and head > (-1 if last is None else last))
    assert ends.as_json()["not_in_range"] == (
        0 if whole else sum(1 for *_, last, _ in found if last is None))
