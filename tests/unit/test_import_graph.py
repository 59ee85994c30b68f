"""No import circles among the modules of src/turnaudit, producers/ and consumers/,
neither module by module nor folder by folder (docs/architecture.md, "The floors").

The graph is computed from the source (``tests/support/imports.py``: every import,
inside functions and under ``TYPE_CHECKING`` too); a failure names each circle and
the import behind each of its steps. The check is proved on circles planted in a copy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT
from tests.support.imports import (
    PACKAGES,
    a_circle,
    assert_one_circle_named,
    circles,
    folder_graph,
    module_graph,
    strongly_connected,
)


def test_no_module_imports_itself_round_a_circle() -> None:
    found = circles(module_graph(PROJECT_ROOT))
    assert found == [], "import circles:\n" + "\n".join(found)


def test_no_folder_imports_itself_round_a_circle() -> None:
    found = circles(folder_graph(PROJECT_ROOT))
    assert found == [], "folder import circles:\n" + "\n".join(found)


def test_the_graph_sees_the_project() -> None:
    """A parser that found nothing would pass the checks above: it finds these edges,
    including one inside a function and one under TYPE_CHECKING."""
    graph = module_graph(PROJECT_ROOT)
    assert len(graph) > 150
    assert "turnaudit.settings" in graph["turnaudit.kafka.topics"]
    assert "turnaudit.consumers.runtime.settings" in graph["turnaudit.consumers.runtime.loop"]
    # `from turnaudit.kafka.schema_topic import …` inside a function of commands/schemas.py
    assert "turnaudit.kafka.schema_topic" in graph["turnaudit.commands.schemas"]
    # `from turnaudit.producers.accounting import PublisherStats` under TYPE_CHECKING
    assert "turnaudit.producers.accounting" in graph["turnaudit.producers.metrics"]
    folders = folder_graph(PROJECT_ROOT)
    assert "turnaudit.serialization" in folders["turnaudit.kafka"]
    assert "turnaudit.kafka" in folders["turnaudit.consumers.runtime"]


def _copy(tmp_path: Path) -> Path:
    for folder in PACKAGES:
        shutil.copytree(
            PROJECT_ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    return tmp_path


def _plant(root: Path, relative: str, text: str) -> None:
    with (root / relative).open("a", encoding="utf-8") as source:
        source.write(text)


@pytest.mark.parametrize(
    ("relative", "text", "members"),
    [
        # At the top: the settings reaching up into the Kafka door again.
        (
            "src/turnaudit/settings.py",
            "from turnaudit.kafka.producer import check_client_options\n",
            {"turnaudit.settings", "turnaudit.kafka.producer"},
        ),
        # Inside a function, as the settings once did.
        (
            "src/turnaudit/topic_names.py",
            "def late() -> None:\n    from turnaudit.kafka import topics\n",
            {"turnaudit.topic_names", "turnaudit.kafka.topics", "turnaudit.settings"},
        ),
        # A type-only import, as the publisher's metrics once did.
        (
            "producers/accounting.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from turnaudit.producers.publisher import TurnEventPublisher\n",
            {"turnaudit.producers.accounting", "turnaudit.producers.publisher"},
        ),
        # A tool's `python -m` form through the CLI that imports the tool.
        (
            "src/turnaudit/evaluation/gate.py",
            'if __name__ == "__main__":\n    from turnaudit.evaluation.cli import register\n',
            {"turnaudit.evaluation.gate", "turnaudit.evaluation.cli"},
        ),
    ],
)
def test_the_check_names_a_module_circle_planted_in_a_copy(
    tmp_path: Path, relative: str, text: str, members: set[str]
) -> None:
    root = _copy(tmp_path)
    assert circles(module_graph(root)) == []
    _plant(root, relative, text)
    assert_one_circle_named(module_graph(root), members)


def test_the_check_names_a_folder_circle_planted_in_a_copy(tmp_path: Path) -> None:
    """The codec floor reading Kafka: no module circle, but serialization and kafka
    would import each other, as they did before the codec floor stood alone."""
    root = _copy(tmp_path)
    _plant(
        root,
        "src/turnaudit/serialization/samples.py",
        "def read() -> None:\n    from turnaudit.kafka.reading import read_range\n",
    )
    assert circles(module_graph(root)) == []
    [line] = circles(folder_graph(root))
    assert "turnaudit.kafka" in line
    assert "turnaudit.serialization" in line
    assert "turnaudit.serialization.samples:" in line  # the import behind the step is named
    # The consumers' runtime importing a service: the services' floor above it.
    root = _copy(tmp_path / "second")
    _plant(root, "consumers/runtime/sink.py", "from turnaudit.consumers import log_sink\n")
    found = circles(folder_graph(root))
    assert any("turnaudit.consumers.runtime" in line for line in found)


def test_a_circle_is_one_shortest_loop() -> None:
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert a_circle(graph, ["a", "b", "c"]) == ["a", "b", "a"]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []
