"""``turnaudit erase``: its arguments and who it records, each refusal one line, exit 2,
before any cluster is asked (the unit tier has none: reaching for it fails the test)."""

from __future__ import annotations

import getpass

import pytest

from turnaudit.cli import main
from turnaudit.commands.erase import ERASED_BY_ENV, _erased_by
from turnaudit.errors import ConfigurationError


def _exit_code(argv: list[str]) -> int:
    """What ``turnaudit`` exits with (argparse's own refusals raise ``SystemExit``)."""
    try:
        return main(argv)
    except SystemExit as stopped:
        return int(str(stopped.code))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["erase"], "--session"),
        (["erase", "--session", ""], "--session: give the session id to erase"),
        (["erase", "--session", "s", "--by", " "], f"--by WHO or {ERASED_BY_ENV}"),
    ],
)
def test_a_wrong_erase_is_one_line_exit_2(
    argv: list[str],
    says: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ERASED_BY_ENV, raising=False)
    monkeypatch.setattr(getpass, "getuser", lambda: "")
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert says in err


@pytest.mark.parametrize(
    ("given", "env", "login", "recorded"),
    [
        ("dpo", "ops", "root", "dpo"),
        (None, "ops", "root", "ops"),
        (None, "", "root", "root"),
        (None, "  ", "alice", "alice"),
    ],
)
def test_who_erases_is_the_flag_then_the_setting_then_the_login(
    given: str | None, env: str, login: str, recorded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ERASED_BY_ENV, env)
    monkeypatch.setattr(getpass, "getuser", lambda: login)
    assert _erased_by(given) == recorded


def test_no_one_to_record_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ERASED_BY_ENV, raising=False)

    def no_login() -> str:
        raise OSError("no login name")

    monkeypatch.setattr(getpass, "getuser", no_login)
    with pytest.raises(ConfigurationError, match=ERASED_BY_ENV):
        _erased_by(None)
