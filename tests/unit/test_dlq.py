"""``turnaudit dlq``'s pure part: letters read from any headers, selected, counted, planned.

Any set of letters with random headers (missing, garbled, foreign, duplicated):
reading never raises and what it cannot read is ``unknown``; every count of a
summary adds up to the letters; filters compose as the intersection of each
alone; a redrive plan puts every letter in exactly one outcome, writes each
original once, refuses what today's decoder still cannot read with its reason,
and a plan made again after its own redrive writes nothing.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.commands.dlq import RedriveProgress
from turnaudit.dead_letters import (
    CONNECT_HEADER_PREFIX,
    REDRIVEN_FROM_HEADER,
    DeadLetterReason,
    dead_letter_headers,
)
from turnaudit.dlq import (
    REDRIVABLE,
    UNKNOWN,
    Letter,
    LetterFilter,
    Origin,
    letter_from_record,
    letter_of,
    parse_position,
    summarize,
)
from turnaudit.dlq_redrive import (
    GONE,
    DecodeCheck,
    RedrivenMarks,
    Refusal,
    StillFailing,
    StoredOriginal,
    plan_redrive,
)
from turnaudit.records import StoredRecord

TOPIC = "t-turn-events"
REASONS = [r.value for r in DeadLetterReason]
SERVICES = ["verdict-metrics", "log-sink", "htir-feeder", "producer"]

header_names = st.sampled_from(
    [
        "dlq.reason",
        "dlq.error",
        "dlq.topic",
        "dlq.partition",
        "dlq.offset",
        "dlq.stage",
        "dlq.truncated",
        CONNECT_HEADER_PREFIX + "topic",
        CONNECT_HEADER_PREFIX + "partition",
        CONNECT_HEADER_PREFIX + "offset",
        CONNECT_HEADER_PREFIX + "exception.message",
        "traceparent",
        "x-other",
    ]
) | st.text(max_size=20)
header_values = (
    st.none()
    | st.binary(max_size=24)
    | st.sampled_from(
        [r.encode() for r in REASONS]
        + [s.encode() + b"/group" for s in SERVICES]
        + [TOPIC.encode(), b"0", b"3", b"17", b"-1", b"9" * 30, b"\xff\xfe", b"true"]
    )
)
garbled_headers = st.lists(st.tuples(header_names, header_values), max_size=14)


@st.composite
def well_formed(draw: st.DrawFn) -> list[tuple[str, bytes | None]]:
    """Headers as the writers set them, for a random origin."""
    stage = draw(st.sampled_from(SERVICES))
    partition = None if stage == "producer" else draw(st.integers(0, 3))
    offset = None if partition is None else draw(st.integers(0, 50))
    pairs = dead_letter_headers(
        reason=draw(st.sampled_from(REASONS)),
        error=draw(st.text(max_size=30)),
        topic=draw(st.sampled_from([TOPIC, "t-htir-traces"])),
        partition=partition,
        offset=offset,
        stage=stage if stage == "producer" else f"{stage}/g-{stage}",
    )
    return [(k, v if isinstance(v, bytes) or v is None else v.encode()) for k, v in pairs]


any_headers = garbled_headers | well_formed()


@st.composite
def letters(
    draw: st.DrawFn, headers: st.SearchStrategy[list[tuple[str, bytes | None]]] = any_headers
) -> list[Letter]:
    rows = draw(st.lists(st.tuples(headers, st.integers(0, 3 * 86_400_000)), max_size=30))
    return [
        letter_of(
            offset % 3,
            offset,
            1_780_000_000_000 + ms,
            pairs,
            key=b"s",
            value=f"v{offset % 7}".encode(),
        )
        for offset, (pairs, ms) in enumerate(rows)
    ]


filters = st.builds(
    LetterFilter,
    reasons=st.frozensets(st.sampled_from([*REASONS, "contract", UNKNOWN, "nope"]), max_size=3),
    services=st.frozensets(st.sampled_from([*SERVICES, UNKNOWN]), max_size=2),
    partitions=st.frozensets(st.integers(0, 3), max_size=2),
    since_ms=st.none() | st.integers(1_780_000_000_000, 1_780_000_000_000 + 3 * 86_400_000),
    until_ms=st.none() | st.integers(1_780_000_000_000, 1_780_000_000_000 + 3 * 86_400_000),
)


class TestReadingLetters:
    @given(any_headers, st.integers(0, 2**40), st.integers(-(2**40), 2**45))
    def test_any_headers_read_without_raising(
        self, pairs: list[tuple[str, bytes | None]], offset: int, ms: int
    ) -> None:
        letter = letter_of(0, offset, ms, pairs)
        assert letter.reason in {*REASONS, UNKNOWN}
        assert letter.service == UNKNOWN or re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", letter.service)
        assert summarize([letter]).count == 1
        assert letter.as_json()["position"] == f"0:{offset}"
        assert letter.line().startswith(f"0:{offset}")
        assert not any(n.startswith(("dlq.", CONNECT_HEADER_PREFIX)) for n, _ in letter.headers)

    @given(well_formed())
    def test_what_the_writer_sets_reads_back(self, pairs: list[tuple[str, bytes | None]]) -> None:
        letter = letter_of(1, 9, 0, pairs)
        text = {k: (v or b"").decode() for k, v in pairs}
        assert letter.reason == text["dlq.reason"]
        assert letter.service == text["dlq.stage"].partition("/")[0]
        assert letter.origin_topic == text["dlq.topic"]
        assert letter.origin_partition == (
            int(text["dlq.partition"]) if text["dlq.partition"] else None
        )

    def test_connect_headers_stand_in_for_missing_own_ones(self) -> None:
        pairs: list[tuple[str, bytes | None]] = [
            (CONNECT_HEADER_PREFIX + "topic", TOPIC.encode()),
            (CONNECT_HEADER_PREFIX + "partition", b"2"),
            (CONNECT_HEADER_PREFIX + "offset", b"40"),
            (CONNECT_HEADER_PREFIX + "exception.message", b"boom"),
        ]
        letter = letter_of(0, 0, 0, pairs)
        assert letter.origin == (TOPIC, 2, 40)
        assert (letter.reason, letter.service, letter.error) == (UNKNOWN, UNKNOWN, "boom")

    def test_a_record_without_headers_is_all_unknown(self) -> None:
        letter = letter_from_record(StoredRecord("dlq", 2, 5, b"k", b"v", (), 7))
        assert (letter.partition, letter.offset, letter.timestamp_ms) == (2, 5, 7)
        assert (letter.reason, letter.service, letter.origin) == (UNKNOWN, UNKNOWN, None)
        assert summarize([letter]).by_partition == {UNKNOWN: 1}

    @pytest.mark.parametrize("text", ["", "1", "a:b", "1:", ":2", "-1:3", "1:2:3", "1 :x"])
    def test_a_position_is_partition_colon_offset(self, text: str) -> None:
        with pytest.raises(ValueError, match="partition:offset"):
            parse_position(text)

    @given(st.integers(0, 10**6), st.integers(0, 10**12))
    def test_positions_parse_back(self, partition: int, offset: int) -> None:
        assert parse_position(f"{partition}:{offset}") == (partition, offset)


class TestSelectingAndCounting:
    @given(letters())
    def test_every_count_adds_up(self, found: list[Letter]) -> None:
        summary = summarize(found)
        assert summary.count == len(found)
        for counts in (
            summary.by_reason,
            summary.by_service,
            summary.by_partition,
            summary.by_hour,
        ):
            assert sum(counts.values()) == len(found)
        unknown = sum(1 for letter in found if letter.reason == UNKNOWN)
        assert summary.by_reason.get(UNKNOWN, 0) == unknown
        assert summary.as_json()["count"] == len(found)
        assert summary.human().startswith(f"{len(found)} dead letter(s)")

    @given(letters(), filters, filters)
    def test_filters_compose_as_an_intersection(
        self, found: list[Letter], a: LetterFilter, b: LetterFilter
    ) -> None:
        both = LetterFilter(
            reasons=a.reasons or b.reasons
            if not (a.reasons and b.reasons)
            else a.reasons & b.reasons,
            services=a.services or b.services
            if not (a.services and b.services)
            else a.services & b.services,
            partitions=a.partitions or b.partitions
            if not (a.partitions and b.partitions)
            else a.partitions & b.partitions,
            since_ms=max((t for t in (a.since_ms, b.since_ms) if t is not None), default=None),
            until_ms=min((t for t in (a.until_ms, b.until_ms) if t is not None), default=None),
        )
        chained = b.select(a.select(found))
        if (
            (a.reasons and b.reasons and not a.reasons & b.reasons)
            or (a.services and b.services and not a.services & b.services)
            or (a.partitions and b.partitions and not a.partitions & b.partitions)
        ):
            assert chained == [] or all(a.matches(x) and b.matches(x) for x in chained)
        else:
            assert both.select(found) == [x for x in chained if both.matches(x)]
        assert chained == [x for x in found if a.matches(x) and b.matches(x)]

    @given(letters())
    def test_each_filter_selects_what_it_names(self, found: list[Letter]) -> None:
        assert LetterFilter().select(found) == found
        contract = LetterFilter(reasons=frozenset({"contract"})).select(found)
        assert contract == [x for x in found if x.reason.startswith("contract:")]
        unknown = LetterFilter(services=frozenset({UNKNOWN})).select(found)
        assert unknown == [x for x in found if x.service == UNKNOWN]
        window = LetterFilter(
            since_ms=1_780_000_000_000 + 86_400_000, until_ms=1_780_000_000_000 + 2 * 86_400_000
        ).select(found)
        assert all(1_780_086_400_000 <= x.timestamp_ms < 1_780_172_800_000 for x in window)


def check_by_value(still: frozenset[bytes]) -> DecodeCheck:
    """Today's decoder, stood in for: ``v<n>`` decodes to event ``e<n>`` unless in ``still``."""

    def check(value: bytes | None) -> str | StillFailing:
        if value is None or value in still:
            return StillFailing(DeadLetterReason.UNKNOWN_SCHEMA.value, "schema 00ff unknown")
        return "e" + value.decode()[1:]

    return check


def stored(found: list[Letter]) -> dict[Origin, StoredOriginal | str]:
    """The originals as the topic holds them: each origin's first letter is its message."""
    held: dict[Origin, StoredOriginal | str] = {}
    for letter in found:
        if letter.origin is not None:
            held.setdefault(letter.origin, StoredOriginal(letter.key, letter.value))
    return held


class TestOnlyWhatWasOnTheTopicGoesBack:
    @settings(max_examples=200)
    @given(letters(well_formed()), st.data())
    def test_a_letter_goes_back_only_as_the_message_stored_at_its_origin_or_signed(
        self, found: list[Letter], data: st.DataObject
    ) -> None:
        """Any letters (a writer of the dead-letter topic may craft any), whatever their
        origins hold now (the same message, other bytes or key, nothing, or gone to
        retention) and whatever valid checkpoints sign: a letter is redriven only when
        its origin holds exactly its key and bytes, or its origin is gone and a checkpoint
        signs its bytes; otherwise it is refused by name."""
        held: dict[Origin, StoredOriginal | str] = {}
        for origin in {x.origin for x in found if x.origin is not None}:
            first = next(x for x in found if x.origin == origin)
            kind = data.draw(st.sampled_from(["same", "other-bytes", "other-key", "gone", "none"]))
            if kind == "same":
                held[origin] = StoredOriginal(first.key, first.value)
            elif kind == "other-bytes":
                held[origin] = StoredOriginal(first.key, (first.value or b"") + b"!")
            elif kind == "other-key":
                held[origin] = StoredOriginal((first.key or b"") + b"?", first.value)
            elif kind == "gone":
                held[origin] = GONE
        signed = data.draw(st.frozensets(st.sampled_from([f"v{n}".encode() for n in range(7)])))
        plan = plan_redrive(
            found,
            topic=TOPIC,
            check=check_by_value(frozenset()),
            marks=RedrivenMarks(),
            originals=held,
            signed=lambda value: value in signed,
        )
        for r in plan.redrive:
            assert r.letter.origin is not None
            original = held.get(r.letter.origin)
            if original == GONE:
                assert r.letter.value in signed
            else:
                assert original == StoredOriginal(r.letter.key, r.letter.value)
        for refused in plan.refused:
            origin = refused.letter.origin
            if refused.reason == Refusal.NOT_THE_ORIGINAL:
                assert origin is not None
                assert held.get(origin) != StoredOriginal(refused.letter.key, refused.letter.value)
            if refused.reason == Refusal.UNPROVABLE:
                assert origin is not None
                assert held[origin] == GONE
                assert refused.letter.value not in signed


class TestPlanningARedrive:
    @settings(max_examples=200)
    @given(letters(), st.frozensets(st.sampled_from([f"v{n}".encode() for n in range(7)])))
    def test_every_letter_has_one_outcome_and_each_turn_goes_once(
        self, found: list[Letter], still: frozenset[bytes]
    ) -> None:
        check = check_by_value(still)
        plan = plan_redrive(
            found, topic=TOPIC, check=check, marks=RedrivenMarks(), originals=stored(found)
        )
        outcomes = (
            [r.letter for r in plan.redrive]
            + plan.already
            + plan.same_original
            + [r.letter for r in plan.refused]
        )
        assert sorted(x.offset for x in outcomes) == [x.offset for x in found]
        assert len({r.event_id for r in plan.redrive}) == len(plan.redrive)
        assert len({r.letter.origin for r in plan.redrive}) == len(plan.redrive)
        for r in plan.redrive:
            assert r.letter.origin is not None
            assert r.letter.origin[0] == TOPIC
            assert r.letter.reason in REDRIVABLE
            assert not r.letter.truncated
            assert r.letter.value not in still
        for refused in plan.refused:
            if refused.reason == DeadLetterReason.UNKNOWN_SCHEMA.value:
                assert refused.letter.value in still
            else:
                assert refused.reason in {r.value for r in Refusal}
        assert plan.already == []  # nothing was redriven before

    @settings(max_examples=100)
    @given(letters(well_formed()))
    def test_a_second_redrive_writes_nothing(self, found: list[Letter]) -> None:
        check = check_by_value(frozenset())
        first = plan_redrive(
            found, topic=TOPIC, check=check, marks=RedrivenMarks(), originals=stored(found)
        )
        marks = RedrivenMarks()
        for r in first.redrive:  # what the topic holds after the first redrive
            marks.add(r.headers())
        second = plan_redrive(found, topic=TOPIC, check=check, marks=marks, originals=stored(found))
        assert second.redrive == []
        assert {x.offset for x in second.already} >= {r.letter.offset for r in first.redrive}
        assert len(second.refused) == len(first.refused)

    def test_what_cannot_go_back_is_refused_by_name(self) -> None:
        def parked(
            reason: str,
            *,
            partition: int | None = 0,
            topic: str = TOPIC,
            extra: tuple[tuple[str, bytes | None], ...] = (),
        ) -> Letter:
            pairs = dead_letter_headers(
                reason=reason,
                error="e",
                topic=topic,
                partition=partition,
                offset=partition,
                stage="log-sink/g",
            )
            return letter_of(
                0,
                len(reason),
                0,
                [(k, v if not isinstance(v, str) else v.encode()) for k, v in pairs] + list(extra),
                value=b"v1",
            )

        plan = plan_redrive(
            [
                parked("contract:stub_fields"),
                parked("unknown_schema", partition=None),
                parked("undecodable", topic="other"),
                parked("unknown_framing", extra=(("dlq.truncated", b"true"),)),
            ],
            topic=TOPIC,
            check=check_by_value(frozenset()),
            marks=RedrivenMarks(),
            originals={},
        )
        assert [r.reason for r in plan.refused] == [
            Refusal.NOT_A_DECODE_FAILURE,
            Refusal.NO_ORIGIN,
            Refusal.OTHER_TOPIC,
            Refusal.TRUNCATED,
        ]
        assert plan.as_json()["refused_by_reason"] == {
            "no_origin": 1,
            "not_a_decode_failure": 1,
            "other_topic": 1,
            "truncated": 1,
        }

    def test_a_redriven_copy_parked_again_goes_back_again_once(self) -> None:
        check = check_by_value(frozenset())
        pairs = [
            (k, v if not isinstance(v, str) else v.encode())
            for k, v in dead_letter_headers(
                reason="unknown_schema",
                error="e",
                topic=TOPIC,
                partition=1,
                offset=4,
                stage="log-sink/g",
            )
        ]
        first = plan_redrive(
            [letter_of(0, 0, 0, pairs, value=b"v1")],
            topic=TOPIC,
            check=check,
            marks=RedrivenMarks(),
            originals={(TOPIC, 1, 4): StoredOriginal(None, b"v1")},
        )
        copy = first.redrive[0].headers()
        marks = RedrivenMarks()
        marks.add(copy)
        # The copy, at 1:9 of the topic, parked again by a consumer whose cache was stale.
        again = [
            (k, v if not isinstance(v, str) else v.encode())
            for k, v in dead_letter_headers(
                reason="unknown_schema",
                error="e",
                topic=TOPIC,
                partition=1,
                offset=9,
                stage="log-sink/g",
            )
        ]
        reparked = letter_of(0, 5, 0, [*copy, *again], value=b"v1")
        second = plan_redrive(
            [reparked], topic=TOPIC, check=check, marks=marks, originals=stored([reparked])
        )
        assert [r.letter.position for r in second.redrive] == ["0:5"]
        names = [n for n, _ in second.redrive[0].headers()]
        assert names.count(REDRIVEN_FROM_HEADER) == 1
        assert (REDRIVEN_FROM_HEADER, b"dlq:0:5") in second.redrive[0].headers()
        marks.add(second.redrive[0].headers())
        third = plan_redrive(
            [reparked], topic=TOPIC, check=check, marks=marks, originals=stored([reparked])
        )
        assert third.redrive == []
        assert third.already == [reparked]

    @given(
        st.lists(
            st.tuples(
                st.sampled_from([REDRIVEN_FROM_HEADER, "turnaudit.redriven-origin", "x"]),
                header_values,
            ),
            max_size=6,
        )
    )
    def test_marks_read_any_headers(self, pairs: list[tuple[str, bytes | None]]) -> None:
        marks = RedrivenMarks()
        marks.add(pairs)
        assert all(p >= 0 and o >= 0 for p, o in marks.letters)


class TestRedriveProgress:
    def test_plain_lines_off_a_terminal(self, capsys: pytest.CaptureFixture[str]) -> None:
        progress = RedriveProgress(2500, terminal=False)
        for done in range(1, 2501):
            progress.update(done)
        progress.close()
        assert capsys.readouterr().err.splitlines() == [
            "dlq redrive: 1000/2500 messages written",
            "dlq redrive: 2000/2500 messages written",
            "dlq redrive: 2500/2500 messages written",
        ]

    def test_a_bar_on_a_terminal(self, capsys: pytest.CaptureFixture[str]) -> None:
        progress = RedriveProgress(10, terminal=True)
        for done in range(1, 11):
            progress.update(done)
        progress.close()
        err = capsys.readouterr().err
        assert "10/10" in err
        assert "msg" in err
