"""``--time event``: one rule (``event_time_range``) for replay, verify, eval rebuild and
tail: the broker range to read, and the window the turns are selected by."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.verify import scenario
from turnaudit.consumers.tail import TailFilter
from turnaudit.errors import ConfigurationError
from turnaudit.events import occurred_millis
from turnaudit.kafka.offsets import OPEN_END_MS, EventWindow, RangeSpec, event_time_range
from turnaudit.verify.verifier import Verifier

T0 = datetime(2026, 11, 1, tzinfo=UTC)
T1 = datetime(2026, 11, 2, tzinfo=UTC)


def test_without_slack_the_whole_retained_stream_is_read() -> None:
    spec, window = event_time_range(RangeSpec(T0, T1, {0: 5}, None), None)
    assert spec == RangeSpec(None, None, {0: 5}, None)
    assert window == EventWindow(occurred_millis(T0), occurred_millis(T1))


def test_with_slack_the_broker_range_is_widened_on_both_sides() -> None:
    spec, window = event_time_range(RangeSpec(T0, T1), timedelta(minutes=10))
    assert (spec.since, spec.until) == (T0 - timedelta(minutes=10), T1 + timedelta(minutes=10))
    assert window.low == occurred_millis(T0)


def test_a_window_needs_both_ends_unless_left_open() -> None:
    with pytest.raises(ConfigurationError, match="both --from and --to"):
        event_time_range(RangeSpec(T0, None), None)
    with pytest.raises(ConfigurationError):
        event_time_range(RangeSpec(None, T1), None, open_end=True)
    spec, window = event_time_range(RangeSpec(T0, None), timedelta(seconds=30), open_end=True)
    assert (spec.since, spec.until) == (T0 - timedelta(seconds=30), None)
    assert window.high == OPEN_END_MS


@given(st.integers(-(10**6), 10**6))
def test_the_window_is_half_open(delta: int) -> None:
    window = EventWindow(10**12, 10**12 + 1000)
    millis = 10**12 + delta
    assert window.holds(millis) == (0 <= delta < 1000)


def test_verify_keeps_the_turns_that_happened_in_the_window_only() -> None:
    stamped = scenario.stamped_events(60, seed=11, producers=2, sessions=4)
    times = sorted(occurred_millis(s.event["occurred_at"]) for s in stamped)
    low, high = times[15], times[45]
    inside = [s for s in stamped if low <= occurred_millis(s.event["occurred_at"]) < high]
    verifier = Verifier(scenario.DECODE, event_window=(low, high), start_gaps=False)
    for offset, s in enumerate(stamped):
        verifier.feed(0, offset, s.key, s.value)
    assert verifier.counts.turns == len(inside)
    assert verifier.outside_window == len(stamped) - len(inside)
    assert verifier.event_ids == {s.event["event_id"] for s in inside}
    # A stream's first turn in the window is where it starts: no gap before it.
    assert verifier.lost_positions() == 0


def test_tail_shows_the_turns_that_happened_from_its_start() -> None:
    stamped = scenario.stamped_events(10, seed=2, producers=1, sessions=2)
    cut = sorted(occurred_millis(s.event["occurred_at"]) for s in stamped)[5]
    _, window = event_time_range(
        RangeSpec(datetime.fromtimestamp(cut / 1000, UTC)), None, open_end=True
    )
    shown = [s for s in stamped if TailFilter(window=window).accepts(s.event)]  # type: ignore[arg-type]  # a decoded event as a TurnEvent
    assert len(shown) == 5
