"""Times and ranges as offsets, without a broker: the pure arithmetic over any
watermarks and any requested range or time answers, and resolve_range's glue
over a stand-in client."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnaudit.errors import BrokerError, ConfigurationError
from turnaudit.kafka import offsets
from turnaudit.kafka.groups import ANONYMOUS, namespace
from turnaudit.kafka.offsets import (
    NO_OFFSET,
    RangeSpec,
    ResolvedRange,
    Watermarks,
    at_or_end,
    check_partitions,
    plan_range,
)
from turnaudit.settings import DEFAULT_TOPIC_PREFIX, KafkaSettings


@st.composite
def watermarks(draw: st.DrawFn) -> Watermarks:
    partitions = draw(st.lists(st.integers(0, 7), min_size=1, max_size=5, unique=True))
    low, high = {}, {}
    for p in partitions:
        low[p] = draw(st.integers(0, 1000))
        high[p] = low[p] + draw(st.integers(0, 1000))
    return Watermarks(low, high)


def answers(marks: Watermarks) -> st.SearchStrategy[dict[int, int] | None]:
    """offsets_for_times answers: an offset of the log, or nothing at/after the time."""
    return st.none() | st.fixed_dictionaries(
        {p: st.just(NO_OFFSET) | st.integers(marks.low[p], marks.high[p]) for p in marks.high}
    )


def requested(marks: Watermarks) -> st.SearchStrategy[dict[int, int] | None]:
    """Offsets a user may ask for: anything, in range or not, for some partitions."""
    return st.none() | st.dictionaries(
        st.sampled_from(sorted(marks.high)), st.integers(-5, 2500), max_size=len(marks.high)
    )


def clamp(offset: int, low: int, high: int) -> int:
    return min(max(offset, low), high)


@given(data=st.data(), marks=watermarks())
def test_a_range_is_clamped_to_the_log_ordered_and_covers_every_partition(
    data: st.DataObject, marks: Watermarks
) -> None:
    since, until = data.draw(answers(marks)), data.draw(answers(marks))
    from_offsets, to_offsets = data.draw(requested(marks)), data.draw(requested(marks))
    spec = RangeSpec(from_offsets=from_offsets, to_offsets=to_offsets)
    resolved = plan_range("t", spec, marks, since=since, until=until)
    assert resolved.partitions == sorted(marks.high)
    assert resolved.log_start == marks.low
    for p in marks.high:
        low, high = marks.low[p], marks.high[p]
        assert low <= resolved.start[p] <= resolved.end[p] <= high
        # The reference: the request for the partition, else the time's answer (the
        # partition's end where nothing is at or after it), else the watermark.
        wanted_start = (from_offsets or {}).get(p)
        if wanted_start is None:
            wanted_start = low if since is None else since[p] if since[p] >= 0 else high
        wanted_end = (to_offsets or {}).get(p)
        if wanted_end is None:
            wanted_end = high if until is None or until[p] < 0 else until[p]
        assert resolved.start[p] == clamp(wanted_start, low, high)
        assert resolved.end[p] == max(clamp(wanted_end, low, high), resolved.start[p])
    assert resolved.messages == sum(resolved.end[p] - resolved.start[p] for p in marks.high)


@given(marks=watermarks())
def test_nothing_asked_is_the_whole_retained_log(marks: Watermarks) -> None:
    resolved = plan_range("t", RangeSpec(), marks)
    assert resolved == ResolvedRange(marks.low, marks.high, marks.low)
    assert resolved.from_log_start
    start, end, log_start = resolved  # still unpacks as (start, end, log start)
    assert (start, end, log_start) == (marks.low, marks.high, marks.low)


@given(marks=watermarks(), data=st.data())
def test_a_time_with_nothing_at_or_after_it_is_the_partitions_end(
    marks: Watermarks, data: st.DataObject
) -> None:
    found = data.draw(st.dictionaries(st.sampled_from(sorted(marks.high)), st.integers(-3, 5000)))
    ends = at_or_end(found, marks.high)
    assert sorted(ends) == sorted(marks.high)
    for p, high in marks.high.items():
        assert ends[p] == (found[p] if found.get(p, NO_OFFSET) >= 0 else high)


@given(marks=watermarks(), extra=st.integers(8, 20), which=st.sampled_from(["from", "to"]))
def test_a_partition_the_topic_does_not_have_is_refused(
    marks: Watermarks, extra: int, which: str
) -> None:
    asked = {extra: 0}
    spec = RangeSpec(from_offsets=asked) if which == "from" else RangeSpec(to_offsets=asked)
    with pytest.raises(ConfigurationError, match=f"t has no partition {extra}"):
        plan_range("t", spec, marks)


def test_partition_checks_name_every_missing_partition_in_order() -> None:
    check_partitions("t", [0, 1], {0, 1, 2})
    with pytest.raises(ConfigurationError, match=r"^t has no partition 3, 5$"):
        check_partitions("t", [5, 0, 3], [0, 1, 2])


def test_an_empty_topic_gives_empty_ranges_and_a_later_start_never_passes_the_end() -> None:
    marks = Watermarks({0: 0, 1: 7}, {0: 0, 1: 7})
    assert plan_range("t", RangeSpec(), marks).messages == 0
    late = plan_range("t", RangeSpec(from_offsets={0: 4, 1: 9}, to_offsets={1: 2}), marks)
    assert late.start == {0: 0, 1: 7}
    assert late.end == {0: 0, 1: 7}
    assert not late.from_log_start or late.start == late.log_start


# -- the glue, over a stand-in client --------------------------------------------------


class _Partition:
    def __init__(self, topic: str, partition: int, offset: int = -1001) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset


class _Metadata:
    def __init__(self, topics: dict[str, Any]) -> None:
        self.topics = topics


class _Topic:
    error = None

    def __init__(self, partitions: list[int]) -> None:
        self.partitions = dict.fromkeys(partitions)


class FakeConsumer:
    """The calls offsets.py makes, answered from a table: partition -> (low, high,
    {millis: offset})."""

    log: ClassVar[dict[int, tuple[int, int, dict[int, int]]]] = {}
    closed = 0

    def __init__(self, config: dict[str, Any]) -> None:
        # A throwaway group in the client's own namespace (no SASL user: anonymous).
        assert config["group.id"].startswith(
            namespace(DEFAULT_TOPIC_PREFIX, ANONYMOUS) + "offsets-"
        )

    def list_topics(self, topic: str, timeout: float) -> _Metadata:
        return _Metadata({"turns": _Topic(sorted(self.log))} if topic == "turns" else {})

    def get_watermark_offsets(self, tp: _Partition, timeout: float) -> tuple[int, int]:
        low, high, _ = self.log[tp.partition]
        return low, high

    def offsets_for_times(self, tps: list[_Partition], timeout: float) -> list[_Partition]:
        found = []
        for tp in tps:
            stamps = self.log[tp.partition][2]
            at = [o for millis, o in sorted(stamps.items()) if millis >= tp.offset]
            found.append(_Partition(tp.topic, tp.partition, at[0] if at else NO_OFFSET))
        return found

    def close(self) -> None:
        type(self).closed += 1


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeConsumer]:
    monkeypatch.setattr(offsets, "Consumer", FakeConsumer)
    monkeypatch.setattr(offsets, "TopicPartition", _Partition)
    second = 1000
    FakeConsumer.log = {
        0: (2, 10, {5 * second: 4, 9 * second: 8}),
        1: (0, 3, {1 * second: 0, 2 * second: 2}),
    }
    FakeConsumer.closed = 0
    return FakeConsumer


SETTINGS = KafkaSettings(bootstrap_servers="stand-in:9092")


def at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def test_resolve_range_asks_watermarks_and_times_and_closes_its_client(
    fake: type[FakeConsumer],
) -> None:
    whole = offsets.resolve_range(SETTINGS, "turns", RangeSpec())
    assert whole == ResolvedRange({0: 2, 1: 0}, {0: 10, 1: 3}, {0: 2, 1: 0})
    window = offsets.resolve_range(SETTINGS, "turns", RangeSpec(at(3), at(6)))
    # p0: first at/after 3 s is offset 4, at/after 6 s offset 8; p1: nothing after 3 s.
    assert window.start == {0: 4, 1: 3}
    assert window.end == {0: 8, 1: 3}
    assert offsets.end_offsets(SETTINGS, "turns") == {0: 10, 1: 3}
    assert offsets.offsets_at(SETTINGS, "turns", None) == {0: 10, 1: 3}
    assert offsets.offsets_at(SETTINGS, "turns", at(2)) == {0: 4, 1: 2}
    assert fake.closed == 5


def test_a_topic_that_does_not_exist_is_a_broker_error(fake: type[FakeConsumer]) -> None:
    with pytest.raises(BrokerError, match="topic nope does not exist"):
        offsets.resolve_range(SETTINGS, "nope", RangeSpec())
    assert fake.closed == 1
