"""Metric history from the stream: one cumulative, timestamped sample per step.

Any turns in any order through the step sinks: the OpenMetrics text parses, each
series is cumulative from 0 at the range's first step, and its change over a
step is exactly the turns of that step (by occurred_at), per pack. promtool makes
TSDB blocks of it in tests/broker/consumers/test_replay_history_blocks.py.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from tests.support.stepped_history import BASE_MS, STEP_MS, replayed
from turnaudit.consumers.replay.history import history_text

PACKS = ("medical", "legal", "finance")

turn_lists = st.lists(
    st.tuples(st.integers(0, 10 * STEP_MS - 1), st.sampled_from(PACKS), st.booleans()),
    min_size=1,
    max_size=60,
)


def samples(text: bytes) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(sample name, pack) -> [(timestamp, value)] of the replay's series."""
    found: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(text.decode()):
        assert family.type == "counter"
        for s in family.samples:
            assert s.labels["job"] == "turnaudit-replay"
            key = (s.name, s.labels.get("pack", ""))
            found.setdefault(key, []).append((float(s.timestamp), s.value))
    return found


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(turns=turn_lists, rnd=st.randoms())
def test_each_step_s_change_is_the_turns_of_that_step(
    tmp_path_factory: pytest.TempPathFactory,
    turns: list[tuple[int, str, bool]],
    rnd: random.Random,
) -> None:
    shuffled = list(turns)
    rnd.shuffle(shuffled)  # the replay's read order is not event time's
    text = replayed(shuffled, tmp_path_factory.mktemp("h"))
    series = samples(text)
    first = min(at for at, _, _ in turns) // STEP_MS
    last = max(at for at, _, _ in turns) // STEP_MS
    boundaries = [(BASE_MS // STEP_MS + k) * STEP_MS / 1000 for k in range(first, last + 2)]
    for pack in {p for _, p, _ in turns}:
        expected_turns = Counter(at // STEP_MS for at, p, _ in turns if p == pack)
        expected_refused = Counter(at // STEP_MS for at, p, r in turns if p == pack and r)
        for name, expected in (
            ("turnaudit_turns_total", expected_turns),
            ("turnaudit_refused_turns_total", expected_refused),
        ):
            points = series.get((name, pack), [])
            if not expected:
                continue
            assert [at for at, _ in points] == boundaries, name
            values = [v for _, v in points]
            assert values[0] == 0
            changes = [b - a for a, b in itertools.pairwise(values)]
            assert changes == [expected.get(k, 0) for k in range(first, last + 1)], name


def test_no_turns_is_an_empty_history() -> None:
    assert history_text({}, {}, STEP_MS, {"job": "j"}) == b"# EOF\n"
