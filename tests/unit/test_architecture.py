"""docs/architecture.md names real places: every path it quotes exists, every
class or function it names beside a path is defined there."""

from __future__ import annotations

import ast
import re

from tests.support import PROJECT_ROOT

DOC = PROJECT_ROOT / "docs" / "architecture.md"
# `path/to/module.py` or `path/to/folder/`, optionally followed by (`Name`).
PLACE = re.compile(r"`((?:src|producers|consumers|schemas|tests|docs|deploy)/[\w/.-]*)`"
                   r"(?: \(`(\w+)`\))?")


def places() -> list[tuple[str, str | None]]:
    return [(m[1], m[2]) for m in PLACE.finditer(DOC.read_text(encoding="utf-8"))]


def defined(path: str) -> set[str]:
    tree = ast.parse((PROJECT_ROOT / path).read_text(encoding="utf-8"))
    return {node.name for node in tree.body
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)}


def test_the_document_names_places() -> None:
    assert len(places()) > 40


def test_every_path_in_the_document_exists() -> None:
    assert [p for p, _ in places() if not (PROJECT_ROOT / p).exists()] == []


def test_every_name_beside_a_path_is_defined_there() -> None:
    missing = [(p, name) for p, name in places()
               if name and p.endswith(".py") and name not in defined(p)]
    assert missing == []
