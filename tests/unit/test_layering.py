"""The import layering: the core never imports producers/ or consumers/, and
consumers/ never imports producers/. Only the CLI (``cli.py``, ``commands/``)
wires stages together.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.support import PROJECT_ROOT

PROJECT = PROJECT_ROOT

# Folder -> the dotted package it installs as (pyproject's package-dir mapping).
PACKAGES = {
    "src/turnaudit": "turnaudit",
    "consumers": "turnaudit.consumers",
    "producers": "turnaudit.producers",
}
# Where the CLI wires stages: allowed to import anything.
WIRING = ("src/turnaudit/commands/", "src/turnaudit/cli.py")


@dataclass(frozen=True)
class Rule:
    folder: str
    forbidden: tuple[str, ...]


RULES = (
    Rule("src/turnaudit", ("turnaudit.producers", "turnaudit.consumers")),
    Rule("consumers", ("turnaudit.producers",)),
)


def module_name(root: Path, path: Path) -> tuple[str, bool]:
    """Dotted module name of ``path`` and whether it is a package's ``__init__``."""
    relative = path.relative_to(root).as_posix()
    for folder, package in PACKAGES.items():
        if relative.startswith(folder + "/"):
            parts = relative[len(folder) + 1 : -len(".py")].split("/")
            is_init = parts[-1] == "__init__"
            if is_init:
                parts = parts[:-1]
            return ".".join([package, *parts]), is_init
    raise ValueError(relative)


def imported(root: Path, path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of everything ``path`` imports, relative imports resolved."""
    name, is_init = module_name(root, path)
    package = name if is_init else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def layering_violations(root: Path) -> list[str]:
    violations = []
    for rule in RULES:
        for path in sorted((root / rule.folder).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative.startswith(WIRING):
                continue
            for line, name in imported(root, path):
                if any(name == f or name.startswith(f + ".") for f in rule.forbidden):
                    violations.append(f"{relative}:{line} imports {name}")
    return violations


def test_the_project_keeps_its_layers() -> None:
    assert layering_violations(PROJECT) == []


def test_the_check_finds_a_forbidden_import_added_to_a_copy(tmp_path: Path) -> None:
    for folder in PACKAGES:
        shutil.copytree(
            PROJECT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    assert layering_violations(tmp_path) == []
    added = {
        "src/turnaudit/contracts.py": "from turnaudit.producers.simulator import PACKS\n",
        "src/turnaudit/kafka/clients.py": "import turnaudit.consumers.runtime\n",
        "src/turnaudit/serialization/wire.py": "from turnaudit import consumers\n",
        "consumers/log_sink.py": "from ..producers import publisher\n",
        "consumers/runtime/loop.py": "from turnaudit.producers.spool import Spool\n",
    }
    for relative, line in added.items():
        with (tmp_path / relative).open("a", encoding="utf-8") as source:
            source.write(line)
    found = layering_violations(tmp_path)
    assert sorted({v.split(":")[0] for v in found}) == sorted(added)
    # The wiring may import every layer: the same lines there are no violation.
    for relative in ("src/turnaudit/commands/demo.py", "src/turnaudit/cli.py"):
        with (tmp_path / relative).open("a", encoding="utf-8") as source:
            source.write("import turnaudit.producers.simulator\n")
    assert sorted({v.split(":")[0] for v in layering_violations(tmp_path)}) == sorted(added)
