"""The edit loop's share of each property test's examples.

``make test-fast`` runs the unit tier with ``--hypothesis-profile=edit-loop``: every property
test (``@given`` and the stateful machines) draws a quarter of the examples its settings ask
for, at least ``MIN_EXAMPLES``. ``make test`` runs the default profile: every test draws all
of them.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings

EDIT_LOOP = "edit-loop"
SHARE = 4
MIN_EXAMPLES = 10

# No deadline in either profile: speed is measured by the benchmarks, and a 2-core machine
# running the broker tier beside the unit tier is no place for a per-example timer.
SUITE = "suite"
settings.register_profile(SUITE, deadline=None)
settings.register_profile(EDIT_LOOP, deadline=None)  # the examples are cut per test
settings.load_profile(SUITE)


def edit_loop_share(asked: int) -> int:
    return min(asked, max(MIN_EXAMPLES, asked // SHARE))


def draw_the_edit_loops_share(items: list[pytest.Item]) -> int:
    """Each collected property test's settings with a share of its examples (once per test
    function or machine, however many items it gave); how many tests were cut."""
    done: set[int] = set()
    for item in items:
        function: Any = getattr(getattr(item, "function", None), "__func__", None) or getattr(
            item, "function", None
        )
        owner, name = function, "_hypothesis_internal_use_settings"  # where @given keeps them
        if getattr(function, name, None) is None:
            owner, name = getattr(item, "cls", None), "settings"  # a state machine's TestCase
            if not isinstance(getattr(owner, name, None), settings):
                continue
        if id(owner) in done:
            continue
        done.add(id(owner))
        asked: settings = getattr(owner, name)
        setattr(owner, name, settings(asked, max_examples=edit_loop_share(asked.max_examples)))
    return len(done)
