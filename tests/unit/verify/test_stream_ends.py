"""Announced stream heads against what a range holds: lost_in_crash only where the
range can know (it reaches the stream's end now, and holds the stream or all of it)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from turnaudit.stream_heads import (
    HeadAnnouncement,
    Liveness,
    StreamHead,
    decode_announcement,
    decode_liveness,
)
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


# Open heads and liveness: (stream number, announced head, last seen, status, producer).
live_streams = st.lists(
    st.tuples(
        st.integers(0, 20),
        st.integers(0, 40),
        st.one_of(st.none(), st.integers(0, 40)),
        st.sampled_from(["open", "ended", "cut"]),
        st.sampled_from(["pa", "pb", "pc"]),
    ),
    max_size=14,
    unique_by=lambda t: t[0],
)
# Per producer: no liveness record, or (ms silent at judgement time, interval ms, closed).
livenesses = st.fixed_dictionaries(
    {
        p: st.one_of(
            st.none(),
            st.tuples(st.integers(0, 120_000), st.sampled_from([1_000, 10_000]), st.booleans()),
        )
        for p in ("pa", "pb", "pc")
    }
)
NOW = 1_800_000_000_000


@given(live_streams, livenesses, st.booleans())
def test_open_streams_are_judged_by_their_producers_liveness(
    found: list[tuple[int, int, int | None, str, str]],
    alive: dict[str, tuple[int, int, bool] | None],
    whole: bool,
) -> None:
    """Any mix of open, ended and cut heads of any producers, any liveness: a stream whose
    last head is open goes on while its producer is alive (or unknown); once the producer
    is silent past 3 intervals + 5 s without closing, the turns the head announced and the
    range lacks are lost with it, and every other status is judged as before."""
    notes: list[HeadAnnouncement] = [
        HeadAnnouncement(
            StreamHead(f"s{n}", p, head, "h"), status == "ended", 200, p, open=status == "open"
        )
        for n, head, _, status, p in found
    ]
    records = [n.encode() for n in notes] + [
        Liveness(p, NOW - a[0], a[1], a[2]).encode() for p, a in alive.items() if a is not None
    ]
    latest = LatestAnnouncements()
    latest.add_values(records)
    last_seen = {(f"s{n}", p): last for n, _, last, _, p in found if last is not None}
    ends = stream_ends(latest, last_seen, whole_stream=whole, now_ms=NOW)

    def gone(p: str) -> bool:
        a = alive[p]
        return a is not None and not a[2] and a[0] > 3 * a[1] + 5_000

    judged = [f for f in found if f[2] is not None or whole]
    lost = {
        f[0]: max(0, f[1] - (-1 if f[2] is None else f[2]))
        for f in judged
        if f[3] != "open" or gone(f[4])
    }
    assert ends.lost_vanished == sum(lost[f[0]] for f in judged if f[3] == "open" and gone(f[4]))
    assert ends.lost_in_crash == sum(lost[f[0]] for f in judged if f[3] != "open")
    document = ends.as_json()
    assert document["open"] == sum(1 for f in judged if f[3] == "open" and not gone(f[4]))
    assert {v["producer_id"]: v["open_streams"] for v in document["vanished"]} == {
        p: n
        for p in ("pa", "pb", "pc")
        if (n := sum(1 for f in judged if f[4] == p and f[3] == "open" and gone(p)))
    }
    kinds = [f.kind for f in ends.findings()]
    assert kinds.count("lost_vanished") == sum(
        1 for f in judged if f[3] == "open" and gone(f[4]) and lost[f[0]] > 0
    )


def test_liveness_and_open_heads_round_trip_and_are_never_taken_for_each_other() -> None:
    alive = Liveness("p1", 1_700_000_000_123, 10_000, closed=False)
    assert decode_liveness(alive.encode()) == alive
    assert decode_announcement(alive.encode()) is None
    note = HeadAnnouncement(StreamHead("s", "p1", 3, "ab"), False, 200, "p1", open=True)
    assert decode_announcement(note.encode()) == note
    assert note.status == "open"
    assert decode_liveness(note.encode()) is None
    assert alive.key() != note.key()
    assert not alive.key().startswith(b"s")
    # A record from before liveness (no "open" field): cut or ended, as it always was.
    old = b'{"session_id":"s","producer_id":"p","sequence":1,"hash":"h","ended":false,'
    old += b'"interval_ms":200,"announced_by":"q"}'
    decoded = decode_announcement(old)
    assert decoded is not None
    assert decoded.status == "cut"


@given(st.binary(max_size=60))
def test_no_bytes_make_liveness_decoding_raise(junk: bytes) -> None:
    decoded = decode_liveness(junk)
    assert decoded is None or decoded.encode()
