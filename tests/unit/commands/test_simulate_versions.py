"""``--schema-versions``: a list of shipped writer versions, each with an optional weight;
the simulator draws a session's version as often as its weight."""

from __future__ import annotations

import argparse
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnaudit.commands.simulate import _versions
from turnaudit.producers.adapter import SHIPPED_SCHEMA_VERSIONS
from turnaudit.producers.simulator import TurnRuntimeSimulator

WEIGHTS = st.dictionaries(st.sampled_from(SHIPPED_SCHEMA_VERSIONS), st.integers(1, 9), min_size=1)


@given(WEIGHTS, st.booleans())
def test_each_version_is_listed_as_often_as_its_weight(
    weights: dict[int, int], spell_ones: bool
) -> None:
    text = ",".join(str(v) if w == 1 and not spell_ones else f"{v}:{w}" for v, w in weights.items())
    parsed = _versions(text)
    assert Counter(parsed) == Counter(weights)
    assert list(parsed) == sorted(parsed)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("1,2,3", (1, 2, 3)),
        ("4", (4,)),
        ("3, 1", (1, 3)),
        ("4:3,1", (1, 4, 4, 4)),
        ("4,4", (4, 4)),
    ],
)
def test_lists_as_written(text: str, parsed: tuple[int, ...]) -> None:
    assert _versions(text) == parsed


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1,7", "shipped are 1, 2, 3, 4 and 5"),
        ("", "shipped are 1, 2, 3, 4 and 5"),
        ("0", "shipped are 1, 2, 3, 4 and 5"),
        ("a,b", "is not a list like 1,2,3 or 4:6,3"),
        ("4:x", "is not a list like 1,2,3 or 4:6,3"),
        ("4:0", "a weight is 1 or more"),
        ("4:-2,1", "a weight is 1 or more"),
    ],
)
def test_a_wrong_list_is_one_line(text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=says):
        _versions(text)


def test_the_simulator_draws_a_heavier_version_as_often_as_its_weight() -> None:
    # Sessions without a task draw the version; a task's session writes the newest.
    sim = TurnRuntimeSimulator(5, schema_versions=_versions("1,2:3"), task_share=0.0)
    for _ in sim.events(20_000):
        pass
    by = sim.truth.by_schema_version
    assert 2.4 < by[2] / by[1] < 3.6
