"""Replay's pure core imports nothing that reaches Kafka, and nothing of replay outside
``turnaudit.kafka`` imports librdkafka's client."""

from __future__ import annotations

import pytest

from tests.support import PROJECT_ROOT
from tests.unit.verify.test_purity import imported_by

CORE = PROJECT_ROOT / "src" / "turnaudit" / "replay"
PURE = ("canonical", "checkpoint", "files", "jsonl", "order", "outputs")
FORBIDDEN = ("confluent_kafka", "turnaudit.kafka", "turnaudit.replay.reader",
             "turnaudit.replay.run", "turnaudit.replay.group", "urllib", "http", "socket")


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_imports_no_kafka(module: str) -> None:
    bad = {name for name in imported_by(CORE / f"{module}.py")
           if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)}
    assert bad == set()


def test_no_replay_module_imports_librdkafka() -> None:
    sources = [*sorted(CORE.rglob("*.py")),
               *sorted((PROJECT_ROOT / "consumers" / "replay").rglob("*.py"))]
    assert len(sources) > 10
    for path in sources:
        assert not any(name.split(".")[0] == "confluent_kafka" for name in imported_by(path)), \
            path
