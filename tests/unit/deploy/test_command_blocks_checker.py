"""The command-block checker (test_command_blocks.py) on small documents of its own: it
reports exactly the wrong blocks, each with its place and what is wrong, and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.deploy.test_command_blocks import document_problems

# The checker on small documents of its own: a root with one test file and a Makefile.
SYNTHETIC_TESTS = """
@pytest.fixture(scope="module")
def published(spool):
    run_turnaudit("simulate", "--events", "100")


@pytest.fixture
def spool():
    run_turnaudit("htir", "feed")


def test_verifies_what_was_published(published):
    run_turnaudit("verify")


def test_counts_the_letters():
    run_turnaudit("dlq", "count", "--json")
    subprocess.run(["make", "lint"])


class TestReplay:
    def test_replays_a_day(self):
        run_turnaudit("replay", "--into", "jsonl:day.jsonl")


def helper_not_a_test():
    run_turnaudit("verify")
"""
SYNTHETIC_MAKEFILE = ".PHONY: lint bench\nlint: setup\n\truff check\nbench:\n\ttrue\n"
COUNTS = "<!-- runs-in: tests/unit/test_cli.py::test_counts_the_letters -->"
REPLAYS = "<!-- runs-in: tests/unit/test_cli.py::TestReplay::test_replays_a_day -->"
WHY = "<!-- illustrative: needs a production cluster; test_dlq.py runs it on a local one -->"


@pytest.fixture
def synthetic_root(tmp_path: Path) -> Path:
    (tmp_path / "tests/unit").mkdir(parents=True)
    (tmp_path / "tests/unit/test_cli.py").write_text(SYNTHETIC_TESTS)
    return tmp_path


# (the document, a fragment of each problem the checker must report, in order)
CHECKER_TABLE: dict[str, tuple[str, list[str]]] = {
    "sh block without a marker": (
        "Count them:\n\n```sh\nturnaudit dlq count\n```\n",
        ["doc:3: ```sh block carries no marker"],
    ),
    "untyped block without a marker": (
        "```\nturnaudit dlq count\n```\n",
        ["doc:1: an untyped block carries no marker"],
    ),
    "python, toml and yaml blocks without a marker": (
        "```python\nprint(1)\n```\n\n```toml\na = 1\n```\n\n```yaml\na: 1\n```\n",
        ["doc:1: ```python block", "doc:5: ```toml block", "doc:9: ```yaml block"],
    ),
    "a text block needs no marker": ("```text\nturnaudit frobnicate\nmake nosuch\n```\n", []),
    "tilde fence without a marker": ("~~~bash\nmake lint\n~~~\n", ["doc:1: ```bash block"]),
    "fence in a list item without a marker": (
        "1. Run:\n\n   ```sh\n   turnaudit dlq count\n   ```\n",
        ["doc:3: ```sh block carries no marker"],
    ),
    "indented code block without a marker": (
        "Run:\n\n    turnaudit dlq count\n",
        ["doc:3: an untyped block carries no marker"],
    ),
    "marker a blank line away from its block": (
        f"{COUNTS}\n\n```sh\nturnaudit dlq count\n```\n",
        ["doc:3: ```sh block carries no marker", "doc:1: a marker with no block right after"],
    ),
    "a marker quoted in prose is none": (
        f"Mark it `{WHY}` as docs say.\n\nThen: `{COUNTS}`\n```sh\nturnaudit dlq count\n```\n",
        ["doc:4: ```sh block carries no marker"],
    ),
    "runs-in naming a file that is not there": (
        "<!-- runs-in: tests/unit/test_gone.py::test_counts_the_letters -->\n"
        "```sh\nturnaudit dlq count\n```\n",
        ["doc:2: runs-in names tests/unit/test_gone.py::test_counts_the_letters, which is no"],
    ),
    "runs-in naming a function that is not in the file": (
        "<!-- runs-in: tests/unit/test_cli.py::test_gone -->\n```sh\nturnaudit dlq count\n```\n",
        ["doc:2: runs-in names tests/unit/test_cli.py::test_gone, which is no test function"],
    ),
    "runs-in naming a helper, not a test": (
        "<!-- runs-in: tests/unit/test_cli.py::helper_not_a_test -->\n"
        "```sh\nturnaudit verify\n```\n",
        ["doc:2: runs-in names tests/unit/test_cli.py::helper_not_a_test, which is no"],
    ),
    "runs-in naming a method without its class": (
        "<!-- runs-in: tests/unit/test_cli.py::test_replays_a_day -->\n"
        "```sh\nturnaudit replay\n```\n",
        ["doc:2: runs-in names tests/unit/test_cli.py::test_replays_a_day, which is no"],
    ),
    "runs-in naming no test at all": (
        "<!-- runs-in:  -->\n```sh\nturnaudit dlq count\n```\n",
        ["doc:2: runs-in names no test"],
    ),
    "runs-in whose test runs another subcommand": (
        f"{COUNTS}\n```sh\nturnaudit replay --to 2026-11-08 --into verify:week.json\n```\n",
        ["doc:2: the block runs `turnaudit replay` and tests/unit/test_cli.py::"],
    ),
    "runs-in whose test runs one of two commands on a line": (
        f"{COUNTS}\n```sh\nturnaudit dlq count && turnaudit replay | head\n```\n",
        ["doc:2: the block runs `turnaudit replay` and tests/unit/test_cli.py::"],
    ),
    "runs-in whose test runs the group but not the subcommand": (
        f"{COUNTS}\n```sh\nturnaudit dlq count\nturnaudit dlq redrive --dry-run\n```\n",
        ["the block runs `turnaudit dlq redrive` and tests/unit/test_cli.py::test_counts_the_"],
    ),
    "runs-in whose test runs another make target": (
        f"{COUNTS}\n```sh\nmake lint\nmake bench\n```\n",
        ["doc:2: the block runs `make bench` and tests/unit/test_cli.py::test_counts_the_letters"],
    ),
    "runs-in over a make target the Makefile lacks": (
        f"{COUNTS}\n```sh\nmake lint && make nosuch\n```\n",
        ["doc:2: `make nosuch` is no target of the Makefile"],
    ),
    "runs-in over a turnaudit word that is no subcommand": (
        f"{COUNTS}\n```sh\nturnaudit dlq count\nturnaudit frobnicate --now\n```\n",
        ["doc:2: `turnaudit frobnicate` is no turnaudit subcommand"],
    ),
    "illustrative with no reason to speak of": (
        "<!-- illustrative: not run -->\n```sh\nturnaudit dlq count\n```\n",
        ["doc:2: illustrative needs a reason of 4 words or more"],
    ),
    "runs-in whose test runs every command of the block": (
        f"{COUNTS}\n```sh\n.venv/bin/turnaudit dlq count \\\n  --json  # or: turnaudit replay\n"
        "make -j2 lint TURNAUDIT_X=1\n```\n",
        [],
    ),
    "runs-in naming a method with its class": (
        f"{REPLAYS}\n```console\nturnaudit replay --into jsonl:day.jsonl\n```\n",
        [],
    ),
    "runs-in naming two tests that together run the block": (
        f"<!-- runs-in: {COUNTS[14:-4]} {REPLAYS[14:-4]} -->\n"
        "```sh\nturnaudit dlq count\nturnaudit replay\n```\n",
        [],
    ),
    "runs-in over a python block checks the test only": (
        f"{COUNTS}\n```python\nimport subprocess\nsubprocess.run(['turnaudit', 'verify'])\n```\n",
        [],
    ),
    "runs-in whose test's fixtures (of its file) run the rest": (
        "<!-- runs-in: tests/unit/test_cli.py::test_verifies_what_was_published -->\n"
        "```sh\nturnaudit htir feed\nturnaudit simulate && turnaudit verify\n```\n",
        [],
    ),
    "runs-in whose test's fixtures do not run it either": (
        "<!-- runs-in: tests/unit/test_cli.py::test_verifies_what_was_published -->\n"
        "```sh\nturnaudit simulate && turnaudit dlq count\n```\n",
        ["doc:2: the block runs `turnaudit dlq count` and tests/unit/test_cli.py::test_verifies"],
    ),
    "illustrative with a reason": (f"{WHY}\n```sh\nturnaudit dlq redrive\n```\n", []),
    "a marker in a block quote": (f"> {WHY}\n> ```sh\n> turnaudit dlq redrive\n> ```\n", []),
}


@pytest.mark.parametrize("case", CHECKER_TABLE)
def test_the_checker_reports_exactly_the_wrong_blocks(case: str, synthetic_root: Path) -> None:
    markdown, expected = CHECKER_TABLE[case]
    problems = document_problems(markdown, "doc", synthetic_root, SYNTHETIC_MAKEFILE)
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected, strict=True):
        assert fragment in problem
