"""docs/architecture.md names real places: every path it quotes exists, every
class or function it names beside a path is defined there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import PROJECT_ROOT

DOC = PROJECT_ROOT / "docs" / "architecture.md"
# `path/to/module.py` or `path/to/folder/`, optionally followed by (`Name`).
PLACE = re.compile(
    r"`((?:src|producers|consumers|schemas|tests|docs|deploy)/[\w/.-]*)`"
    r"(?: \(`(\w+)`\))?"
)


def places() -> list[tuple[str, str | None]]:
    return [(m[1], m[2]) for m in PLACE.finditer(DOC.read_text(encoding="utf-8"))]


def defined(path: str) -> set[str]:
    tree = ast.parse((PROJECT_ROOT / path).read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    }


def test_the_document_names_places() -> None:
    assert len(places()) > 40


def test_every_path_in_the_document_exists() -> None:
    assert [p for p, _ in places() if not (PROJECT_ROOT / p).exists()] == []


def test_every_name_beside_a_path_is_defined_there() -> None:
    missing = [
        (p, name) for p, name in places() if name and p.endswith(".py") and name not in defined(p)
    ]
    assert missing == []


# Every source file of the package: the core, the runtime and consumer sides, and the
# deploy scripts (the Grafana generator). Tests and benchmarks are not held to it.
SOURCE_FOLDERS = ("src/turnaudit", "producers", "consumers", "deploy")
MAX_SOURCE_LINES = 450


def source_lengths(root: Path = PROJECT_ROOT) -> dict[str, int]:
    """Lines (as ``wc -l`` counts them) of every Python file under the source folders."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes().count(b"\n")
        for folder in SOURCE_FOLDERS
        for path in sorted((root / folder).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def over_the_limit(root: Path = PROJECT_ROOT) -> dict[str, int]:
    return {path: n for path, n in source_lengths(root).items() if n > MAX_SOURCE_LINES}


def test_the_size_check_sees_every_part_of_the_package() -> None:
    lengths = source_lengths()
    for expected in (
        "src/turnaudit/cli.py",
        "producers/publisher.py",
        "consumers/runtime/loop.py",
        "deploy/grafana/generate.py",
    ):
        assert expected in lengths
    assert len(lengths) > 100


def test_the_size_check_names_a_file_one_line_over(tmp_path: Path) -> None:
    for folder, name, lines in (
        ("src/turnaudit", "at_limit.py", MAX_SOURCE_LINES),
        ("consumers/runtime", "over.py", MAX_SOURCE_LINES + 1),
        ("deploy/grafana", "gen.py", 3 * MAX_SOURCE_LINES),
    ):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / name).write_text("x = 1\n" * lines)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_long.py").write_text("x = 1\n" * 1000)  # not source
    assert over_the_limit(tmp_path) == {
        "consumers/runtime/over.py": MAX_SOURCE_LINES + 1,
        "deploy/grafana/gen.py": 3 * MAX_SOURCE_LINES,
    }


def test_no_source_file_is_over_the_line_limit() -> None:
    """A module over the limit does more than one job: split it by what it does."""
    over = over_the_limit()
    assert over == {}, f"over {MAX_SOURCE_LINES} lines: " + ", ".join(
        f"{path} ({n})" for path, n in sorted(over.items(), key=lambda item: -item[1])
    )
