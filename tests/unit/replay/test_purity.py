"""Replay's pure core imports nothing that reaches Kafka, and nothing of replay outside
``turnaudit.kafka`` imports librdkafka's client."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT
from tests.support.layers import PURE as PURE_MODULES

CORE = PROJECT_ROOT / "src" / "turnaudit" / "replay"
# Replay's pure core: the replay modules of the one list of pure modules.
PURE = tuple(Path(m).stem for m in PURE_MODULES if m.startswith("src/turnaudit/replay/"))
FORBIDDEN = (
    "confluent_kafka",
    "turnaudit.kafka",
    "turnaudit.replay.reader",
    "turnaudit.replay.run",
    "turnaudit.replay.group",
    "urllib",
    "http",
    "socket",
)


def imported_by(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_replays_pure_core_is_in_the_list() -> None:
    assert set(PURE) >= {"canonical", "checkpoint", "files", "jsonl", "order", "outputs"}


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_imports_no_kafka(module: str) -> None:
    bad = {
        name
        for name in imported_by(CORE / f"{module}.py")
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    }
    assert bad == set()


def test_no_replay_module_imports_librdkafka() -> None:
    sources = [
        *sorted(CORE.rglob("*.py")),
        *sorted((PROJECT_ROOT / "consumers" / "replay").rglob("*.py")),
    ]
    assert len(sources) > 10
    for path in sources:
        assert not any(name.split(".")[0] == "confluent_kafka" for name in imported_by(path)), path
