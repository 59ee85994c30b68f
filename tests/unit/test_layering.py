"""The import layering, as docs/architecture.md draws it.

* The core never imports producers/ or consumers/; consumers/ never imports
  producers/, nor producers/ consumers/. Only the CLI (``cli.py``,
  ``commands/``) wires stages together.
* Kafka behind one door: only ``src/turnaudit/kafka/`` imports
  ``confluent_kafka`` (the schema-registry client is there too).
* Pure modules (the domain, the pure cores of the runtime, verify and replay)
  import nothing from ``turnaudit.kafka`` and nothing that reaches the network.
* Replay takes its ranges from ``turnaudit.kafka.offsets``, never from verify.
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
    folder: str  # a folder, or one module's file
    forbidden: tuple[str, ...]
    allowed: tuple[str, ...] = ()  # files or folders of ``folder`` the rule leaves out


# Modules with no I/O: what they import from Kafka's side is a mistake.
PURE = (
    "src/turnaudit/chain.py",
    "src/turnaudit/checkpoints.py",
    "src/turnaudit/contracts.py",
    "src/turnaudit/dead_letters.py",
    "src/turnaudit/dlq.py",
    "src/turnaudit/dlq_redrive.py",
    "src/turnaudit/events.py",
    "src/turnaudit/htir.py",
    "src/turnaudit/htir_steps.py",
    "src/turnaudit/identity.py",
    "src/turnaudit/label_bounds.py",
    "src/turnaudit/records.py",
    "src/turnaudit/stamping.py",
    "src/turnaudit/stream_tracking.py",
    "src/turnaudit/telemetry.py",
    "src/turnaudit/verdicts.py",
    "src/turnaudit/verify/counts.py",
    "src/turnaudit/verify/crash.py",
    "src/turnaudit/verify/findings.py",
    "src/turnaudit/verify/reconciliation.py",
    "src/turnaudit/verify/report.py",
    "src/turnaudit/verify/trust.py",
    "src/turnaudit/verify/verifier.py",
    "src/turnaudit/replay/order.py",
    "consumers/runtime/handover.py",
    "consumers/runtime/ledger.py",
    "consumers/runtime/sink.py",
)
IO = (
    "turnaudit.kafka",
    "confluent_kafka",
    "urllib",
    "http",
    "socket",
    "turnaudit.verify.files",
    "turnaudit.verify.scrape",
    "turnaudit.verify.kafka_reads",
    "turnaudit.verify.run",
)
RULES = (
    Rule("src/turnaudit", ("turnaudit.producers", "turnaudit.consumers"), WIRING),
    Rule("consumers", ("turnaudit.producers",)),
    Rule("producers", ("turnaudit.consumers",)),
    Rule("src/turnaudit", ("confluent_kafka",), ("src/turnaudit/kafka/",)),
    Rule("consumers", ("confluent_kafka",)),
    Rule("producers", ("confluent_kafka",)),
    Rule("src/turnaudit/replay", ("turnaudit.verify",)),
    *(Rule(module, IO) for module in PURE),
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
        where = root / rule.folder
        paths = [where] if where.suffix == ".py" else sorted(where.rglob("*.py"))
        for path in paths:
            relative = path.relative_to(root).as_posix()
            if relative.startswith(rule.allowed):
                continue
            for line, name in imported(root, path):
                if any(name == f or name.startswith(f + ".") for f in rule.forbidden):
                    violations.append(f"{relative}:{line} imports {name}")
    return sorted(set(violations))


def test_the_project_keeps_its_layers() -> None:
    assert layering_violations(PROJECT) == []


def test_every_module_a_rule_names_exists() -> None:
    """A rule about a module that moved would silently check nothing."""
    named = [r.folder for r in RULES] + [a for r in RULES for a in r.allowed]
    assert [n for n in named if not (PROJECT / n).exists()] == []


def test_only_kafka_imports_confluent_kafka() -> None:
    """The grep a reader would run, independent of the rules above."""
    importers = sorted(
        path.relative_to(PROJECT).as_posix()
        for folder in PACKAGES
        for path in (PROJECT / folder).rglob("*.py")
        if any(name.split(".")[0] == "confluent_kafka" for _, name in imported(PROJECT, path))
    )
    assert "src/turnaudit/kafka/schema_registry.py" in importers
    assert [p for p in importers if not p.startswith("src/turnaudit/kafka/")] == []


def test_the_check_finds_a_forbidden_import_added_to_a_copy(tmp_path: Path) -> None:
    for folder in PACKAGES:
        shutil.copytree(
            PROJECT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    assert layering_violations(tmp_path) == []
    added = {
        "src/turnaudit/contracts.py": "from turnaudit.producers.simulator import PACKS\n",
        "src/turnaudit/kafka/consumer.py": "import turnaudit.consumers.runtime\n",
        "src/turnaudit/serialization/wire.py": "from turnaudit import consumers\n",
        "consumers/log_sink.py": "from ..producers import publisher\n",
        "consumers/runtime/loop.py": "from turnaudit.producers.spool import Spool\n",
        "producers/spool.py": "from turnaudit.consumers.runtime import sink\n",
        "src/turnaudit/htir.py": "from confluent_kafka import Consumer\n",
        "consumers/tail.py": "import confluent_kafka\n",
        "producers/adapter.py": "from confluent_kafka.admin import AdminClient\n",
        "src/turnaudit/identity.py": "from turnaudit.kafka.reading import read_range\n",
        "consumers/runtime/handover.py": "from turnaudit import kafka\n",
        "src/turnaudit/verify/report.py": "import urllib.request\n",
        "src/turnaudit/replay/run.py": "from turnaudit.verify.verifier import Verifier\n",
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
