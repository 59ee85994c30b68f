"""The command line: wrong arguments get one line saying what is wrong."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.forked_cli import forked_turnaudit
from turnaudit.cli import build_parser, main

COMMANDS = ["broker", "schemas", "simulate", "demo", "eval"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return forked_turnaudit(*args)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["simulate", "--events", "many"], "'many' is not a whole number"),
        (["simulate", "--schema-versions", "1,7"], "shipped are 1, 2, 3, 4 and 5"),
        (["broker", "restart"], "invalid choice: 'restart'"),
        (["nonsense"], "invalid choice: 'nonsense'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_a_wrong_argument_gets_one_line(args: list[str], says: str) -> None:
    result = run(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert says in lines[0]


def test_a_project_error_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNAUDIT_TOPIC_PARTITIONS", "zero")
    result = run("simulate", "--events", "1")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "turnaudit simulate: TURNAUDIT_TOPIC_PARTITIONS='zero' is not a whole number"
    )


def test_every_command_group_is_registered() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(COMMANDS) <= set(sub.choices)  # type: ignore[arg-type]  # argparse types choices loosely


def test_schemas_check_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schemas", "check", "--records", "50"]) == 0
    out = capsys.readouterr().out
    assert "written with v1, read with v2: 50 records equal" in out
    assert "FULL_TRANSITIVE" in out


def test_the_command_without_its_native_module_is_one_line_exit_2() -> None:
    """A broken install (the native module missing or unloadable): one line naming the wheel
    and ``make setup``, exit 2, no traceback, whichever command was asked for."""
    import subprocess  # noqa: PLC0415 - this test only
    import sys  # noqa: PLC0415

    for argv in ([], ["verify", "--json"], ["sink", "metrics"]):
        code = (
            "import sys; sys.modules['turnaudit._native'] = None\n"
            f"sys.argv = ['turnaudit', *{argv!r}]\n"
            "from turnaudit.__main__ import main\n"
            "sys.exit(main())\n"
        )
        ran = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
        )
        assert ran.returncode == 2, ran.stderr
        assert ran.stdout == ""
        lines = ran.stderr.splitlines()
        assert len(lines) == 1, ran.stderr
        assert "turnaudit._native" in lines[0]
        assert "make setup" in lines[0]
        assert "wheel" in lines[0]
        assert "Traceback" not in ran.stderr
