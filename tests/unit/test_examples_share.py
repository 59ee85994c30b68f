"""``make test-fast``'s hypothesis profile draws a quarter of each property test's examples
(at least 10), for ``@given`` tests with and without their own settings and for state
machines; without it (``make test``) every test draws all it asks for."""

from __future__ import annotations

import ast
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.examples import MIN_EXAMPLES, SHARE, edit_loop_share

CONFTEST = """
from tests.support.examples import EDIT_LOOP, draw_the_edit_loops_share

def pytest_collection_modifyitems(config, items):
    if config.getoption("hypothesis_profile", None) == EDIT_LOOP:
        draw_the_edit_loops_share(items)
"""
TESTS = """
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

CALLS = {}

def count(name):
    CALLS[name] = CALLS.get(name, 0) + 1

@settings(max_examples=40, database=None)
@given(st.integers())
def test_own(x):
    count("own")

@given(st.integers())
@settings(database=None)
def test_default(x):
    count("default")

@pytest.mark.parametrize("p", [1, 2])
@settings(max_examples=60, database=None)
@given(st.integers())
def test_param(p, x):
    count(f"param{p}")

@settings(max_examples=12, database=None)  # a quarter is 3: at least 10
@given(st.integers())
def test_small(x):
    count("small")

class Machine(RuleBasedStateMachine):
    @rule()
    def step(self):
        pass

    def teardown(self):
        count("machine")

TestMachine = Machine.TestCase
TestMachine.settings = settings(max_examples=80, stateful_step_count=2, database=None)

def test_zz_report():
    print("CALLS", sorted(CALLS.items()))
"""


def calls(pytester: pytest.Pytester, *args: str) -> dict[str, int]:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_props=TESTS)
    result = pytester.runpytest("-q", "-s", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=7)
    printed = re.search(r"CALLS (\[.*?\])", result.stdout.str())
    assert printed is not None, result.stdout.str()
    return dict(ast.literal_eval(printed.group(1)))


def test_the_edit_loop_draws_a_share_of_every_property_tests_examples(
    pytester: pytest.Pytester,
) -> None:
    drawn = calls(pytester, "--hypothesis-profile=edit-loop")
    assert drawn == {
        "own": 10,
        "default": 25,
        "param1": 15,
        "param2": 15,
        "small": 10,
        "machine": 20,
    }


def test_without_the_profile_every_test_draws_all_it_asks_for(pytester: pytest.Pytester) -> None:
    drawn = calls(pytester)
    assert drawn == {
        "own": 40,
        "default": 100,
        "param1": 60,
        "param2": 60,
        "small": 12,
        "machine": 80,
    }


@given(st.integers(1, 100_000))
def test_the_share_is_a_quarter_at_least_ten_and_never_more_than_asked(asked: int) -> None:
    share = edit_loop_share(asked)
    assert share <= asked
    assert share == max(min(asked, MIN_EXAMPLES), asked // SHARE)
