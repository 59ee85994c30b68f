"""The pure parts of verify import nothing that reaches Kafka, HTTP or files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT

PURE = ("counts", "findings", "reconciliation", "report", "verifier")
FORBIDDEN = ("confluent_kafka", "turnaudit.kafka", "urllib", "http", "socket",
             "turnaudit.verify.files", "turnaudit.verify.scrape", "turnaudit.verify.kafka_reads",
             "turnaudit.verify.run")


def imports(module: str) -> set[str]:
    return imported_by(PROJECT_ROOT / "src" / "turnaudit" / "verify" / f"{module}.py")


def imported_by(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_imports_no_io(module: str) -> None:
    bad = {name for name in imports(module)
           if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)}
    assert bad == set()


def test_replay_does_not_depend_on_verify() -> None:
    """Replay takes its ranges from turnaudit.kafka.offsets (a module or a package)."""
    core = PROJECT_ROOT / "src" / "turnaudit"
    sources = [core / "replay.py", *sorted((core / "replay").rglob("*.py"))]
    found = [p for p in sources if p.exists()]
    assert found
    for path in found:
        assert not any(name == "turnaudit.verify" or name.startswith("turnaudit.verify.")
                       for name in imported_by(path)), path
