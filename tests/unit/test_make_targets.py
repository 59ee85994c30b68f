"""The Makefile's two tiers and its tools: ``make test-fast`` needs Python and cargo only,
``make test`` gets every tool first, and the Debian tools come into the ignored deploy/tools/
without root (no sudo, no ``apt-get install``), with one line when apt-get or dpkg is missing."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT

MAKEFILE = (PROJECT_ROOT / "Makefile").read_text()
# What only `make test` provides: the Kafka jars and the schema registry's server (Maven),
# the Debian tools, the collector (Go).
INTEGRATION_STAMPS = {
    "deploy/kafka/target/jars/.resolved",
    "deploy/registry/target/server/.resolved",
    "deploy/tools/.prometheus",
    "deploy/tools/.alertmanager",
    "deploy/tools/.kcat",
    "deploy/otelcol/bin/.built",
}
INTEGRATION_ONLY = INTEGRATION_STAMPS | {
    "jars",
    "registry",
    "tools",
    "promtool",
    "alertmanager",
    "kcat",
}


def make() -> str:
    found = shutil.which("make")
    assert found is not None, "make not found"
    return found


@cache
def database() -> str:
    """make's own reading of the Makefile (``make -pq``: rules and variables, nothing run)."""
    return subprocess.run(
        [make(), "-pq", "--no-print-directory", "setup-fast"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout


@cache
def rules() -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """target -> (prerequisites, recipe lines as written)."""
    found: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    target: str | None = None
    for line in database().splitlines():
        rule = re.match(r"^([\w./-]+):(?!=)\s*(.*)$", line)
        if rule:
            target = rule.group(1)
            found[target] = (tuple(rule.group(2).replace("|", " ").split()), ())
        elif target and line.startswith("\t"):
            prerequisites, recipe = found[target]
            found[target] = (prerequisites, (*recipe, line.strip()))
        elif not line.strip():
            target = None
    return found


def expanded(line: str) -> str:
    """``line`` with the Makefile's variables written in."""
    variables = dict(re.findall(r"^(\w+) :?= (.*)$", database(), re.MULTILINE))
    for _ in range(5):
        line = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), m.group(0)), line)
    return line


def needs(goal: str) -> set[str]:
    """Every target ``make GOAL`` brings up to date: prerequisites, and the targets its
    recipes run through ``$(MAKE)``, all the way down."""
    seen: set[str] = set()
    todo = [goal]
    while todo:
        target = todo.pop()
        if target in seen:
            continue
        seen.add(target)
        prerequisites, recipe = rules().get(target, ((), ()))
        todo += prerequisites
        for line in recipe:
            if "$(MAKE)" in line:
                todo += [w for w in line.split("$(MAKE)", 1)[1].split() if not w.startswith("-")]
    return seen


def test_the_edit_loop_needs_no_jars_no_tools_and_no_collector() -> None:
    edit_loop = needs("test-fast")
    assert {"lint", "setup-fast", ".venv/.installed", ".venv/.installed-native"} <= edit_loop
    assert edit_loop & INTEGRATION_ONLY == set()


def test_the_whole_suite_gets_every_tool_first() -> None:
    assert needs("test") >= INTEGRATION_STAMPS


# The container runtime is the one system package the suite installs (README.md), as root
# where podman is missing; nothing else is installed.
INSTALLS_A_SYSTEM_PACKAGE = frozenset({"podman"})


def recipe_commands(skip: frozenset[str] = frozenset()) -> list[str]:
    """Every recipe line (but those of the ``skip`` targets), its quoted text (messages) out."""
    return [
        re.sub(r"\"[^\"]*\"|'[^']*'", "''", expanded(line))
        for target, (_, recipe) in rules().items()
        if target not in skip
        for line in recipe
    ]


def test_no_recipe_runs_sudo_and_the_tools_are_fetched_not_installed() -> None:
    commands = recipe_commands()
    assert any("debian-tools.sh" in command for command in commands)  # the database is read
    for command in commands:
        assert not re.search(r"\bsudo\b", command), command
    for command in recipe_commands(skip=INSTALLS_A_SYSTEM_PACKAGE):
        assert not re.search(r"\b(apt-get|apt|dpkg)\s+(-\S+\s+)*install\b", command), command
    assert not needs("test-fast") & INSTALLS_A_SYSTEM_PACKAGE
    assert "deploy/tools" in (PROJECT_ROOT / ".gitignore").read_text().split()


@pytest.mark.parametrize(
    ("on_path", "missing"),
    [((), "apt-get"), (("apt-get",), "apt-cache"), (("apt-get", "apt-cache"), "dpkg")],
)
@pytest.mark.parametrize("target", ["promtool", "alertmanager", "kcat"])
def test_without_apt_or_dpkg_make_says_so_in_one_line(
    tmp_path: Path, target: str, on_path: tuple[str, ...], missing: str
) -> None:
    # A PATH with only stand-ins (never run: the script looks before it fetches anything);
    # -W makes the script look changed, so the rule runs whether or not the tools are there.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in on_path:
        (bin_dir / name).write_text("#!/bin/sh\necho 'ran' >&2\nexit 3\n")
        (bin_dir / name).chmod(0o755)
    run = subprocess.run(
        [make(), "--no-print-directory", "-W", "deploy/debian-tools.sh", target],
        cwd=PROJECT_ROOT,
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert run.returncode != 0
    assert run.stdout.splitlines()[-1] == (
        f"{missing} not found: the monitoring tools and kcat come from Debian's packages "
        "(apt-get download, dpkg -x into deploy/tools/), which need a Debian or Ubuntu system"
    )
    assert "ran" not in run.stderr


def test_only_the_edit_loop_draws_a_share_of_the_property_examples() -> None:
    def pytest_lines(target: str) -> list[str]:
        return [expanded(line) for line in rules()[target][1] if "bin/pytest" in expanded(line)]

    assert pytest_lines("test-fast")
    assert all("--hypothesis-profile=edit-loop" in line for line in pytest_lines("test-fast"))
    assert pytest_lines("test")
    assert not any("hypothesis-profile" in line for line in pytest_lines("test"))
    assert "hypothesis-profile" not in (PROJECT_ROOT / "pyproject.toml").read_text()


def test_the_whole_suite_runs_every_tier_of_tests() -> None:
    """Each directory of tests under tests/ is named by a pytest line of ``make test``."""
    lines = [expanded(line) for line in rules()["test"][1] if "bin/pytest" in expanded(line)]
    named = {
        word.rstrip("/") for line in lines for word in line.split() if word.startswith("tests/")
    }
    tiers = {
        f"tests/{d.name}"
        for d in (PROJECT_ROOT / "tests").iterdir()
        if d.is_dir() and any(d.rglob("test_*.py"))
    }
    assert tiers == {"tests/unit", "tests/broker"}
    assert named == tiers


def test_every_ignore_rule_ignores_a_link_as_well_as_a_folder() -> None:
    # A rule written `name/` ignores only a folder: a link of that name (a build folder
    # shared from another checkout) would be committed, and a merge would then replace the
    # folder of every other checkout with that link.
    rules = [
        line
        for line in (PROJECT_ROOT / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules
    assert [rule for rule in rules if rule.endswith("/")] == []
