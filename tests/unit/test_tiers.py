"""The collection hook refuses a test in the wrong tier, and the unit tier refuses Kafka and
the programs ``make test-fast`` does not provide."""

from __future__ import annotations

import pytest

from tests.support import PROJECT_ROOT
from tests.support.tiers import UNIT_REFUSED_PROGRAMS, started_program

CONFTEST = """
import pytest
from pathlib import Path
from tests.support.tiers import tier_violations

def pytest_collection_modifyitems(config, items):
    problems = tier_violations(items, Path(__file__).parent / "tests")
    if problems:
        raise pytest.UsageError("tests in the wrong tier:\\n  " + "\\n  ".join(problems))

@pytest.fixture
def kafka_bootstrap():
    return "127.0.0.1:1"
"""
HEADER = "import pytest\n"
PLACED = {
    "tests/unit/test_pure.py": "def test_pure():\n    assert True\n",
    "tests/broker/test_real.py": (
        "pytestmark = pytest.mark.broker\n"
        "def test_real(kafka_bootstrap):\n    assert kafka_bootstrap\n"
    ),
}
MISPLACED = {
    "tests/unit/test_reaches.py": (
        "def test_reaches(kafka_bootstrap):\n    assert kafka_bootstrap\n"
    ),
    "tests/unit/test_marked.py": "@pytest.mark.broker\ndef test_marked():\n    assert True\n",
    "tests/broker/test_unmarked.py": "def test_unmarked():\n    assert True\n",
    "tests/other/test_anywhere.py": (
        "def test_anywhere(kafka_bootstrap):\n    assert kafka_bootstrap\n"
    ),
}


def _write(pytester: pytest.Pytester, files: dict[str, str]) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    broker: needs the broker\n")
    for relative, body in files.items():
        path = pytester.path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER + body)


def test_placed_tests_collect(pytester: pytest.Pytester) -> None:
    _write(pytester, PLACED)
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*2 tests collected*"])


@pytest.mark.parametrize("misplaced", sorted(MISPLACED))
def test_each_misplaced_test_stops_the_collection(
    pytester: pytest.Pytester, misplaced: str
) -> None:
    _write(pytester, {**PLACED, misplaced: MISPLACED[misplaced]})
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    name = misplaced.rsplit("/", 1)[1].removesuffix(".py")
    result.stderr.fnmatch_lines([f"*{name}*"])


def test_the_unit_tier_fails_a_test_that_asks_for_the_broker(
    pytester: pytest.Pytester,
) -> None:
    """The real unit conftest: its broker fixture fails the test, it never skips."""
    pytester.makeconftest((PROJECT_ROOT / "tests/unit/conftest.py").read_text())
    pytester.makepyfile(test_x="def test_x(kafka_bootstrap):\n    assert kafka_bootstrap\n")
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*the unit tier has no broker*"])


# One inner session under the real unit conftest: every refused program started from the
# test's own process (by a path that does not exist: refused before it would run), run by a
# child shell through PATH (the stand-in runs; the test fails when it ends even though it
# asserted nothing about the child), and what the unit tier may run.
REFUSALS = """
import subprocess
import sys

import pytest

PROGRAMS = {programs!r}


@pytest.mark.parametrize("program", PROGRAMS)
def test_started(program):
    subprocess.run(["/nowhere/bin/" + program, "--version"], check=False)


@pytest.mark.parametrize("program", PROGRAMS)
def test_child(program):
    subprocess.run(["sh", "-c", program + " --version || true"], check=True)


def test_allowed():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    subprocess.run("echo shell", shell=True, check=True, capture_output=True)
    subprocess.run(["make", "--version"], check=True, capture_output=True)
"""


def test_the_unit_tier_fails_a_test_that_runs_a_program_test_fast_does_not_provide(
    pytester: pytest.Pytester,
) -> None:
    programs = sorted(UNIT_REFUSED_PROGRAMS)
    pytester.makeconftest((PROJECT_ROOT / "tests/unit/conftest.py").read_text())
    pytester.makepyfile(test_x=REFUSALS.format(programs=programs))
    recorded = pytester.inline_run("-q", "-p", "no:cacheprovider")
    outcomes = {
        (report.nodeid.split("::")[1], report.when): report
        for report in recorded.getreports("pytest_runtest_logreport")
    }
    for program in programs:
        started = outcomes[(f"test_started[{program}]", "call")]
        assert started.failed, program
        assert f"the unit tier does not run {program}:" in str(started.longrepr)
        child = outcomes[(f"test_child[{program}]", "call")]
        assert child.passed, program  # the test itself did not notice
        ended = outcomes[(f"test_child[{program}]", "teardown")]
        assert ended.failed, program
        assert f"the unit tier does not run {program}:" in str(ended.longrepr)
    assert all(r.passed for (name, _), r in outcomes.items() if name == "test_allowed")
    assert ("test_allowed", "call") in outcomes


@pytest.mark.parametrize(
    ("args", "program"),
    [
        (["promtool", "check"], "promtool"),
        (("/usr/bin/java", "-version"), "java"),
        (b"/opt/go/bin/go", "go"),
        (PROJECT_ROOT / "deploy/tools/bin/kcat", "kcat"),
        ("mvn -q package", "mvn"),
        ("  amtool check-config x", "amtool"),
        ([], ""),
        ("", ""),
    ],
)
def test_the_started_program_is_the_first_words_file_name(args: object, program: str) -> None:
    assert started_program(args) == program
