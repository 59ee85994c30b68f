"""The import layering, as docs/architecture.md draws it.

* The core never imports producers/ or consumers/; consumers/ never imports
  producers/, nor producers/ consumers/. Only the CLI (``cli.py``,
  ``commands/``) wires stages together.
* Kafka behind one door: only ``src/turnaudit/kafka/`` imports
  ``confluent_kafka`` (the schema-registry client is there too).
* Pure modules (the domain, the pure cores of the runtime, verify and replay)
  import nothing from ``turnaudit.kafka`` and nothing that reaches the network.
* Replay takes its ranges from ``turnaudit.kafka.offsets``, never from verify.
* Settings (``settings``, ``registry_settings``, ``topic_names``) import neither the
  Kafka door nor the codecs.
* The codec floor (``serialization/``) imports only the project's errors and crate.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.support import PROJECT_ROOT
from tests.support.imports import PACKAGES, imported
from tests.support.layers import IO, PURE

PROJECT = PROJECT_ROOT

# Where the CLI wires stages: allowed to import anything.
WIRING = ("src/turnaudit/commands/", "src/turnaudit/cli.py")


@dataclass(frozen=True)
class Rule:
    folder: str  # a folder, or one module's file
    forbidden: tuple[str, ...]
    allowed: tuple[str, ...] = ()  # files or folders of ``folder`` the rule leaves out


SETTINGS = (
    "src/turnaudit/settings.py",
    "src/turnaudit/registry_settings.py",
    "src/turnaudit/topic_names.py",
)
RULES = (
    Rule("src/turnaudit", ("turnaudit.producers", "turnaudit.consumers"), WIRING),
    Rule("consumers", ("turnaudit.producers",)),
    Rule("producers", ("turnaudit.consumers",)),
    Rule("src/turnaudit", ("confluent_kafka",), ("src/turnaudit/kafka/",)),
    Rule("consumers", ("confluent_kafka",)),
    Rule("producers", ("confluent_kafka",)),
    Rule("src/turnaudit/replay", ("turnaudit.verify",)),
    # Settings are data: they take the registry's options as data and leave the
    # Kafka door and the codecs to the floors above and below them.
    *(
        Rule(module, ("turnaudit.kafka", "turnaudit.serialization", "confluent_kafka"))
        for module in SETTINGS
    ),
    *(Rule(module, IO) for module in PURE),
)


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
        "src/turnaudit/settings.py": (
            "def _check() -> None:\n    from turnaudit.kafka.producer import check_client_options\n"
        ),
        "src/turnaudit/registry_settings.py": "from turnaudit.kafka import schema_registry\n",
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


# The codec floor (framing, schemas, decoders, encoders, the native bridge) sits
# under everything: of the project it imports only the error types and the crate.
CODEC_FLOOR = "src/turnaudit/serialization"
CODEC_MAY_IMPORT = ("turnaudit.serialization", "turnaudit.errors", "turnaudit._native")


def codec_floor_imports(root: Path) -> list[str]:
    found = []
    for path in sorted((root / CODEC_FLOOR).rglob("*.py")):
        for line, name in imported(root, path):
            if name == "turnaudit" or not name.startswith("turnaudit."):
                continue  # `from turnaudit import _native` names the crate below
            if not any(name == a or name.startswith(a + ".") for a in CODEC_MAY_IMPORT):
                found.append(f"{path.relative_to(root).as_posix()}:{line} imports {name}")
    return sorted(set(found))


def test_the_codec_floor_imports_nothing_of_the_project() -> None:
    assert codec_floor_imports(PROJECT) == []


def test_the_codec_check_finds_an_import_planted_in_a_copy(tmp_path: Path) -> None:
    shutil.copytree(PROJECT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    assert codec_floor_imports(tmp_path) == []
    planted = {
        "src/turnaudit/serialization/framing.py": "from turnaudit.events import TurnEvent\n",
        "src/turnaudit/serialization/wire.py": "def f() -> None:\n    import turnaudit.settings\n",
        "src/turnaudit/serialization/schemas.py": "from turnaudit.kafka import reading\n",
    }
    for relative, text in planted.items():
        with (tmp_path / relative).open("a", encoding="utf-8") as source:
            source.write(text)
    assert sorted({f.split(":")[0] for f in codec_floor_imports(tmp_path)}) == sorted(planted)
