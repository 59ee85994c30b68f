"""One owner for the topics' names: ``turnaudit.topic_names.TopicNames``.

Every topic the project makes is a property of ``TopicNames``; no module of
src/turnaudit, producers/ or consumers/ but ``topic_names.py`` spells a topic's
suffix (a literal suffix, ``f"{prefix}<suffix>"`` or ``prefix + "<suffix>"``).
The scan is proved on planted spellings in a copy of the tree.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import PROJECT_ROOT
from turnaudit.kafka.acls import plan_acls
from turnaudit.kafka.topics import topic_specs
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TOPIC_SUFFIXES, TopicNames

SOURCE_FOLDERS = ("src/turnaudit", "producers", "consumers")
OWNER = "src/turnaudit/topic_names.py"


def _starts_with_suffix(text: str) -> str | None:
    """The suffix ``text`` begins with, when what follows it cannot continue a name."""
    for suffix in sorted(TOPIC_SUFFIXES, key=len, reverse=True):
        rest = text[len(suffix) :]
        if text.startswith(suffix) and not (rest and (rest[0].isalnum() or rest[0] in "_-.")):
            return suffix
    return None


def _allowed_word(node: ast.Constant, parents: dict[ast.AST, ast.AST]) -> bool:
    """The same word used as something other than a topic: a JSON key
    (``report["checkpoints"]``, ``{"schemas": …}``, ``{"schemas"}``) or a command's name
    (``add_parser("dlq")``)."""
    parent = parents.get(node)
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return True
    if isinstance(parent, ast.Dict) and any(key is node for key in parent.keys):
        return True
    if isinstance(parent, ast.Set):
        return True
    return (
        isinstance(parent, ast.Call)
        and isinstance(parent.func, ast.Attribute)
        and parent.func.attr == "add_parser"
        and parent.args[:1] == [node]
    )


def spelled_suffixes(path: Path) -> list[tuple[int, str]]:
    """(line, suffix) of every place ``path`` spells a topic's suffix."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # f"{prefix}stream-heads"
            for before, part in zip(node.values, node.values[1:], strict=False):
                if isinstance(before, ast.FormattedValue) and isinstance(part, ast.Constant):
                    suffix = _starts_with_suffix(str(part.value))
                    if suffix:
                        found.append((node.lineno, suffix))
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add)
            and isinstance(node.right, ast.Constant)
            and node.right.value in TOPIC_SUFFIXES
        ):  # prefix + "stream-heads"
            found.append((node.lineno, str(node.right.value)))
        elif (
            isinstance(node, ast.Constant)
            and node.value in TOPIC_SUFFIXES
            and id(node) not in docstrings
            and not isinstance(parents.get(node), ast.BinOp | ast.JoinedStr)
            and not _allowed_word(node, parents)
        ):  # STREAM_HEADS_SUFFIX = "stream-heads"
            found.append((node.lineno, str(node.value)))
    return found


def spellings_outside_the_owner(root: Path) -> list[str]:
    return sorted(
        f"{path.relative_to(root).as_posix()}:{line} spells {suffix!r}"
        for folder in SOURCE_FOLDERS
        for path in sorted((root / folder).rglob("*.py"))
        if path.relative_to(root).as_posix() != OWNER
        for line, suffix in spelled_suffixes(path)
    )


def test_no_module_but_the_owner_spells_a_topic_suffix() -> None:
    assert spellings_outside_the_owner(PROJECT_ROOT) == []


def test_the_owner_spells_every_suffix() -> None:
    """The scan looks for the right words: the owner's own spellings are all found."""
    owned = {suffix for _, suffix in spelled_suffixes(PROJECT_ROOT / OWNER)}
    assert owned == set(TOPIC_SUFFIXES)


PLANTED = {
    "src/turnaudit/kafka/state_topic.py": 'X = f"{PREFIX}verify-state"\n',
    "src/turnaudit/verify/kafka_reads.py": 'X = "p." + "stream-heads"\n',
    "producers/checkpointer.py": 'CHECKPOINTS_SUFFIX = "checkpoints"\n',
    "consumers/htir_feeder.py": 'def topic(p: str) -> str:\n    return f"{p}htir-traces"\n',
    "consumers/auditor_worker.py": 'T = f"{P}auditor-observations"\n',
    "src/turnaudit/dead_letters.py": 'T = f"{P}dlq"\n',
    "src/turnaudit/kafka/topics.py": 'T = ("schemas", 1)\n',
    "producers/publisher.py": 'T = f"{P}turn-events"\n',
    "src/turnaudit/sealing/key_topic.py": 'T = f"{P}surface-keys"\n',
    "src/turnaudit/commands/erase.py": 'T = "p." + "erasures"\n',
}


def test_the_scan_finds_a_suffix_planted_in_a_copy(tmp_path: Path) -> None:
    for folder in SOURCE_FOLDERS:
        shutil.copytree(
            PROJECT_ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    assert spellings_outside_the_owner(tmp_path) == []
    for relative, line in PLANTED.items():
        with (tmp_path / relative).open("a", encoding="utf-8") as source:
            source.write(line)
    found = spellings_outside_the_owner(tmp_path)
    assert sorted({f.split(":")[0] for f in found}) == sorted(PLANTED)
    assert {f.rsplit(" ", 1)[1].strip("'") for f in found} == set(TOPIC_SUFFIXES)


@pytest.mark.parametrize(
    "text",
    [
        'report["checkpoints"]',
        'subparsers.add_parser("dlq")',
        '"dlq.reason"',
        '"""dlq"""',
        '{"schemas": []}',
        '{"schemas"}',
    ],
)
def test_the_same_word_used_otherwise_is_not_a_topic(tmp_path: Path, text: str) -> None:
    path = tmp_path / "module.py"
    path.write_text(f"X = {text}\n" if not text.startswith('"""') else f"{text}\n")
    assert spelled_suffixes(path) == []


prefixes = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", max_size=30)


@given(prefixes)
def test_every_topic_is_a_property_under_the_prefix(prefix: str) -> None:
    names = TopicNames(prefix)
    properties = [
        names.turn_events,
        names.schemas,
        names.dlq,
        names.htir_traces,
        names.auditor_observations,
        names.stream_heads,
        names.checkpoints,
        names.verify_state,
        names.surface_keys,
        names.erasures,
    ]
    assert properties == list(names.every())
    assert properties == [prefix + suffix for suffix in TOPIC_SUFFIXES]


@given(prefixes)
def test_creation_and_the_acl_plan_name_only_the_owners_topics(prefix: str) -> None:
    """What ``topics create`` makes and every topic an ACL names come from ``TopicNames``."""
    names = TopicNames(prefix)
    created = {spec.name for spec in topic_specs(KafkaSettings(topics=names))}
    # verify-state is made by verify --follow itself (turnaudit.kafka.state_topic).
    assert created == set(names.every()) - {names.verify_state}
    in_acls = {rule.name for rule in plan_acls(prefix) if rule.resource == "topic"}
    assert in_acls == set(names.every())
