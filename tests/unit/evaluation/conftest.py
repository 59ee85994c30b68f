"""Fixtures shared by the EVR-6 tests; none of them needs Kafka."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

import turnaudit.cli


@pytest.fixture
def eval_cli(monkeypatch: pytest.MonkeyPatch) -> Callable[[Sequence[str]], int]:
    """`turnaudit.cli.main` with only the eval group, so other groups' state cannot interfere."""
    monkeypatch.setattr(turnaudit.cli, "COMMAND_MODULES", ("turnaudit.evaluation.cli",))
    return turnaudit.cli.main
