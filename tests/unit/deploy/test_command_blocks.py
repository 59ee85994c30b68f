"""Every block in README.md and docs/ that a user would paste runs in the suite or says why
not (docs/development.md, "Command blocks"): the line right before its fence is
``<!-- runs-in: tests/FILE.py::test_name -->`` or ``<!-- illustrative: the reason -->``.

A ``runs-in`` must name test functions that exist, and their source (with the fixtures of
their file they ask for) must mention every ``turnaudit`` subcommand (as the CLI's own parser
reads the line) and every ``make`` target the block runs, so a block cannot name an unrelated
test. The checker's own table is test_command_blocks_checker.py. Blocks whose info string is
``text`` (diagrams, layouts, output and byte samples) are not pasted and carry no marker.
The documents are read with markdown-it-py (CommonMark), so a fence is found exactly where
a Markdown renderer finds it: in a list, behind a longer fence, with ``~~~``.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from tests.support import PROJECT_ROOT
from turnaudit.cli import build_parser

DOCS = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").rglob("*.md"))]
# The one info string of blocks nobody pastes: diagrams, layouts, output and byte samples.
NOT_PASTED = "text"
# Blocks read as shell commands (an untyped block is one unless it is marked `text`).
SHELL_INFOS = frozenset({"", "sh", "bash", "console", "shell"})
RUNS_IN = re.compile(r"<!-- runs-in: (?P<tests>.*?) -->")
ILLUSTRATIVE = re.compile(r"<!-- illustrative:(?P<reason>.*?)-->")
# pytest's own node id: FILE::test_name, or FILE::TestClass::test_name for a method.
TEST_ID = re.compile(r"(?P<file>tests/[\w/]+\.py)::(?:(?P<cls>Test\w*)::)?(?P<name>test\w*)")
# A reason says what runs instead or why nothing can: a few words, not a shrug.
MIN_REASON_WORDS = 4
# A command word: at a line's start or after a shell operator, under any folder
# (`.venv/bin/turnaudit`), never a part of a longer word (`turnaudit.reading`).
COMMAND_START = r"(?:^|(?<=[\s;&|(]))"
TURNAUDIT_LINE = re.compile(COMMAND_START + r"(?:[\w./-]*/)?turnaudit[ \t]+(?P<rest>.*)")
MAKE_LINE = re.compile(COMMAND_START + r"make[ \t]+(?P<rest>.*)")
MAKE_TARGET = re.compile(r"[\w.][\w./-]*")
MAKEFILE_RULE = re.compile(r"^(?P<targets>[\w.][\w./ -]*?)\s*:(?!=)", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    """One code block of a document, as a renderer finds it."""

    where: str  # `doc:line` of its opening fence, for the messages
    info: str  # the info string's first word ("" for an untyped or indented block)
    body: str
    marker: str  # the line right before the fence, stripped


@dataclass(frozen=True)
class Commands:
    """What a shell block runs: turnaudit subcommand paths and make targets."""

    turnaudit: tuple[tuple[str, ...], ...]
    unknown: tuple[str, ...]  # `turnaudit WORD` where WORD is no subcommand
    make: tuple[str, ...]


def blocks(markdown: str, doc: str) -> Iterator[Block]:
    lines = markdown.splitlines()
    for token in MarkdownIt("commonmark").parse(markdown):
        if token.type in ("fence", "code_block") and token.map is not None:
            start = token.map[0]
            info = token.info.split()[0] if token.info.strip() else ""
            before = lines[start - 1].strip().lstrip(">").strip() if start > 0 else ""
            yield Block(f"{doc}:{start + 1}", info, token.content, before)


@cache
def subcommand_paths() -> frozenset[tuple[str, ...]]:
    """Every path of subcommands the CLI's parser accepts: ("dlq",), ("dlq", "redrive"), ..."""
    paths: set[tuple[str, ...]] = set()

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:  # argparse keeps its subparsers nowhere public
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    paths.add((*path, name))
                    walk(child, (*path, name))

    walk(build_parser(), ())
    return frozenset(paths)


def make_targets(makefile: str) -> frozenset[str]:
    return frozenset(
        target for rule in MAKEFILE_RULE.finditer(makefile) for target in rule["targets"].split()
    )


def shell_commands(body: str) -> list[str]:
    """The block's simple commands: continuations joined, `#` comments cut, each line cut
    at the shell's operators (`&&`, `||`, `;`, `|`, `&`, subshells)."""
    joined = re.sub(r"\\\n", " ", body)
    lines = [re.sub(r"(?:^|\s)#.*", "", line) for line in joined.splitlines()]
    return [part for line in lines for part in re.split(r"[;&|()]", line) if part.strip()]


def commands(body: str) -> Commands:
    known = subcommand_paths()
    paths: list[tuple[str, ...]] = []
    unknown: list[str] = []
    targets: list[str] = []
    for command in shell_commands(body):
        found = TURNAUDIT_LINE.search(command)
        if found is not None:
            words = found["rest"].split()
            path: tuple[str, ...] = ()
            for word in words:
                if (*path, word) not in known:
                    break
                path = (*path, word)
            if path:
                paths.append(path)
            elif words and not words[0].startswith("-"):
                unknown.append(words[0])
        found = MAKE_LINE.search(command)
        if found is not None:
            targets += [
                word
                for word in found["rest"].split()
                if not word.startswith("-") and "=" not in word and MAKE_TARGET.fullmatch(word)
            ]
    return Commands(tuple(paths), tuple(unknown), tuple(targets))


Function = ast.FunctionDef | ast.AsyncFunctionDef


def is_fixture(node: Function) -> bool:
    return any("fixture" in ast.unparse(decorator) for decorator in node.decorator_list)


def named_test_source(root: Path, test_id: str) -> str | None:
    """The source of the test function a pytest id names, decorators included, and of the
    fixtures of its file it asks for (how a test often runs a command); None when the file,
    the class or the function is not there."""
    named = TEST_ID.fullmatch(test_id)
    if named is None:
        return None
    path = root / named["file"]
    if not path.is_file():
        return None
    text = path.read_text()
    module: list[ast.stmt] = ast.parse(text).body
    scope = module
    if named["cls"] is not None:
        classes = [n for n in module if isinstance(n, ast.ClassDef) and n.name == named["cls"]]
        if not classes:
            return None
        scope = classes[0].body
    tests = [n for n in scope if isinstance(n, Function) and n.name == named["name"]]
    if not tests:
        return None
    fixtures = {n.name: n for n in [*module, *scope] if isinstance(n, Function) and is_fixture(n)}
    used: list[Function] = []
    todo: list[Function] = tests[:1]
    while todo:
        node = todo.pop()
        if node not in used:
            used.append(node)
            todo += [fixtures[a.arg] for a in node.args.args if a.arg in fixtures]
    lines = text.splitlines()
    return "\n".join(
        "\n".join(lines[min([n.lineno, *(d.lineno for d in n.decorator_list)]) - 1 : n.end_lineno])
        for n in used
    )


def mentions(source: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", source) is not None


def runs_in_problems(block: Block, tests: str, root: Path, makefile: str) -> list[str]:
    named = tests.split()
    if not named:
        return [f"{block.where}: runs-in names no test"]
    problems: list[str] = []
    sources: list[str] = []
    for test_id in named:
        source = named_test_source(root, test_id)
        if source is None:
            problems.append(
                f"{block.where}: runs-in names {test_id}, which is no test function "
                "(tests/FILE.py::test_name or FILE::TestClass::test_name, as pytest names it)"
            )
        else:
            sources.append(source)
    if problems or block.info not in SHELL_INFOS:
        return problems
    source = "\n".join(sources)
    run = commands(block.body)
    problems += [
        f"{block.where}: `turnaudit {word}` is no turnaudit subcommand" for word in run.unknown
    ]
    for path in run.turnaudit:
        missing = [word for word in path if not mentions(source, word)]
        if missing:
            problems.append(
                f"{block.where}: the block runs `turnaudit {' '.join(path)}` and {tests} "
                f"never mentions {', '.join(missing)}"
            )
    targets = make_targets(makefile)
    for target in run.make:
        if target not in targets:
            problems.append(f"{block.where}: `make {target}` is no target of the Makefile")
        elif not (mentions(source, "make") and mentions(source, target)):
            problems.append(
                f"{block.where}: the block runs `make {target}` and {tests} never mentions it"
            )
    return problems


def block_problems(block: Block, root: Path, makefile: str) -> list[str]:
    if block.info == NOT_PASTED:
        return []
    runs_in = RUNS_IN.fullmatch(block.marker)
    if runs_in is not None:
        return runs_in_problems(block, runs_in["tests"], root, makefile)
    illustrative = ILLUSTRATIVE.fullmatch(block.marker)
    if illustrative is not None:
        if len(illustrative["reason"].split()) < MIN_REASON_WORDS:
            return [
                f"{block.where}: illustrative needs a reason of {MIN_REASON_WORDS} words or "
                "more (why it is not run, what runs instead)"
            ]
        return []
    kind = f"```{block.info}" if block.info else "an untyped"
    return [
        f"{block.where}: {kind} block carries no marker on the line right before it "
        "(<!-- runs-in: tests/FILE.py::test_name --> or <!-- illustrative: why -->; "
        "```text for what is not pasted)"
    ]


def document_problems(markdown: str, doc: str, root: Path, makefile: str) -> list[str]:
    found = list(blocks(markdown, doc))
    problems = [p for block in found for p in block_problems(block, root, makefile)]
    # A marker must stand right before a block: one left behind by a moved or deleted
    # block would vouch for nothing.
    fences = {block.where for block in found}
    # (A marker is a line of its own: one quoted in prose, as docs/development.md does, is none.)
    for number, line in enumerate(markdown.splitlines(), start=1):
        marker = line.strip().lstrip(">").strip()
        if (RUNS_IN.fullmatch(marker) or ILLUSTRATIVE.fullmatch(marker)) and (
            f"{doc}:{number + 1}" not in fences
        ):
            problems.append(f"{doc}:{number}: a marker with no block right after it")
    return problems


MAKEFILE = (PROJECT_ROOT / "Makefile").read_text()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_block_a_user_would_paste_runs_in_a_test_or_says_why_not(doc: Path) -> None:
    name = str(doc.relative_to(PROJECT_ROOT))
    assert document_problems(doc.read_text(), name, PROJECT_ROOT, MAKEFILE) == []


def test_the_documents_hold_blocks_of_both_kinds_and_the_checker_reads_them_all() -> None:
    found = [b for doc in DOCS for b in blocks(doc.read_text(), doc.name)]
    markers = [b.marker.split(":")[0] for b in found if b.info != NOT_PASTED]
    assert "<!-- runs-in" in markers
    assert "<!-- illustrative" in markers
    # Every fence a renderer sees, and nothing else, is a block here.
    # (A backtick run followed by another backtick on its line is inline code, no fence.)
    fence_line = re.compile(r"^ {0,3}(?:`{3,}[^`\n]*$|~{3,})", re.MULTILINE)
    fences = sum(len(fence_line.findall(doc.read_text())) for doc in DOCS)
    assert fences == 2 * len(found)


def test_every_marked_block_without_its_marker_is_found() -> None:
    """Mutation over the real documents: cut any one marker and that block is reported."""
    cut = 0
    for doc in DOCS:
        markdown = doc.read_text()
        lines = markdown.splitlines(keepends=True)
        for block in blocks(markdown, "doc"):
            if block.info == NOT_PASTED:
                continue
            fence = int(block.where.split(":")[1])
            mutated = "".join([*lines[: fence - 2], "\n", *lines[fence - 1 :]])
            problems = document_problems(mutated, "doc", PROJECT_ROOT, MAKEFILE)
            assert any(p.startswith(f"{block.where}: ") for p in problems), block.where
            cut += 1
    assert cut > 0
