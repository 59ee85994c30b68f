"""The repository's documentation stands alone: no link leaves it, the contracts are in docs/."""

from __future__ import annotations

import re

from tests.support import PROJECT_ROOT
from turnaudit.contracts import Contract

DOCS = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").rglob("*.md"))]


def test_no_document_points_outside_the_repository() -> None:
    for path in DOCS:
        text = path.read_text()
        assert "shared/" not in text, path
        assert "PIPELINE.md" not in text, path  # the design notes are not shipped


def test_every_relative_link_resolves() -> None:
    for path in DOCS:
        for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", path.read_text()):
            assert (path.parent / target).resolve().exists(), (path, target)


def test_the_readme_links_the_contracts_and_they_name_all_seven() -> None:
    assert "](docs/contracts.md)" in (PROJECT_ROOT / "README.md").read_text()
    contracts = (PROJECT_ROOT / "docs/contracts.md").read_text()
    for contract in Contract:
        assert f"`{contract.value}`" in contracts, contract
    for number in range(1, 8):
        assert re.search(rf"^\| {number} \|", contracts, re.M), number
