"""Where a test lives and whether it needs the broker must agree."""

from __future__ import annotations

from pathlib import Path

import pytest

BROKER_FIXTURES = frozenset({"kafka_bootstrap", "kafka_settings", "secured"})


def tier_violations(items: list[pytest.Item], tests: Path) -> list[str]:
    """Why each test sits in the wrong tier (empty when every test is placed right).

    A test that uses the broker fixtures carries the ``broker`` mark; the mark
    is on every test under ``tests/broker/`` and on none under ``tests/unit/``.
    """
    problems = []
    for item in items:
        path = Path(str(item.path))
        marked = item.get_closest_marker("broker") is not None
        uses_broker = bool(BROKER_FIXTURES & set(getattr(item, "fixturenames", ())))
        if uses_broker and not marked:
            problems.append(f"{item.nodeid}: uses the broker fixture without the broker mark")
        if path.is_relative_to(tests / "unit") and (marked or uses_broker):
            problems.append(f"{item.nodeid}: needs the broker but is in tests/unit/")
        if path.is_relative_to(tests / "broker") and not marked:
            problems.append(f"{item.nodeid}: in tests/broker/ without the broker mark")
    return problems
