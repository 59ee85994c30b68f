"""Every command x every bad value: one line on stderr, the right exit code, no
traceback, in bounded time.

The table runs each case as a real ``turnaudit`` process (several at once, so
the table stays quick); each row is then its own test. Exit 2: usage and
configuration; exit 1: a runtime failure such as a cluster that does not answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import BOUND_S, Case, run_case
from turnaudit.local_broker import free_port

pytestmark = pytest.mark.broker


# Commands that talk to a cluster, with the arguments they need to get that far.
# Long-running services do not exit while the cluster is away: not ready, one
# line in their log, then a bounded rate of lines (tests/unit/consumers/test_health.py).


def test_a_schema_registry_that_does_not_answer_is_one_line(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    outcome = run_case(
        Case(
            "registry",
            ["simulate", "--events", "5", "--spool-dir", "{tmp}/spool"],
            {
                "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
                "TURNAUDIT_TOPIC_PREFIX": f"reg-{free_port()}.",
                "TURNAUDIT_SCHEMA_REGISTRY_URL": f"http://127.0.0.1:{free_port()}",
            },
        ),
        tmp_path,
    )
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1, outcome.stderr
    assert "schema registry http://127.0.0.1:" in lines[0]
    assert "did not register TurnEvent v1" in lines[0]
    assert outcome.returncode == 1
    assert outcome.elapsed < BOUND_S
