"""Announced stream heads against what a range holds: lost_in_crash only where the
range can know (it reaches the stream's end now, and holds the stream or all of it)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from turnaudit.stream_heads import HeadAnnouncement, StreamHead
from turnaudit.verify.crash import LatestAnnouncements, stream_ends

streams = st.lists(
    st.tuples(
        st.integers(0, 20),
        st.integers(0, 40),
        st.one_of(st.none(), st.integers(0, 40)),
        st.booleans(),
    ),
    max_size=12,
    unique_by=lambda t: t[0],
)


def announced(found: list[tuple[int, int, int | None, bool]]) -> list[HeadAnnouncement]:
    return [
        HeadAnnouncement(StreamHead(f"s{n}", "p", head, "h"), ended, 200, "p")
        for n, head, _, ended in found
    ]


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
    expected = sum(
        max(0, head - (-1 if last is None else last))
        for _, head, last, _ in found
        if last is not None or whole
    )
    assert ends.lost_in_crash == expected
    assert len(ends.findings()) == sum(
        1
        for _, head, last, _ in found
        if (last is not None or whole) and head > (-1 if last is None else last)
    )
    assert ends.as_json()["not_in_range"] == (
        0 if whole else sum(1 for *_, last, _ in found if last is None)
    )


notes = st.lists(
    st.builds(
        HeadAnnouncement,
        st.builds(
            StreamHead,
            st.text(max_size=6),
            st.text(max_size=4),
            st.integers(-1, 2**63 - 1),
            st.text(alphabet="0123456789abcdef"),
        ),
        st.booleans(),
        st.integers(0, 10_000),
        st.text(max_size=4),
    ),
    max_size=40,
)


@given(notes, st.lists(st.binary(max_size=12), max_size=5))
def test_the_latest_announcement_per_stream_comes_out_by_stream_the_last_one_winning(
    found: list[HeadAnnouncement],
    noise: list[bytes],
) -> None:
    """Any announcements, repeated per stream, any texts (beyond ASCII: SQLite's order is
    Python's), mixed with records that are not announcements: one per stream, the last."""
    latest = LatestAnnouncements()
    latest.add_values([*noise, *(n.encode() for n in found), None])
    expected: dict[tuple[str, str], HeadAnnouncement] = {}
    for note in found:
        expected[note.head.stream] = note
    assert list(latest) == [expected[s] for s in sorted(expected)]
    latest.close()
