"""``turnaudit erase``: its arguments (a session, or a time range) and who it records,
each refusal one line, exit 2, before any cluster is asked (the unit tier has none:
reaching for it fails the test)."""

from __future__ import annotations

import argparse
import getpass

import pytest

from turnaudit.cli import main
from turnaudit.commands.erase import ERASED_BY_ENV, _erased_by, erased_range, register
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
        (["erase", "--from", "2026-12-02", "--to", "2026-12-01"], "--to must be later than --from"),
        (["erase", "--from", "2026-12-01T10:00Z", "--to", "2026-12-01T10:00Z"], "later than"),
        (["erase", "--from", "yesterday", "--to", "2026-12-01"], "'yesterday' is not an ISO 8601"),
        (["erase", "--from", "2026-12-01", "--to", "2026-13-01"], "is not an ISO 8601 time"),
        (["erase", "--from", "2026-12-01"], "needs both --from and --to"),
        (["erase", "--to", "2026-12-01"], "needs both --from and --to"),
        (["erase", "--session", "s", "--from", "2026-12-01", "--to", "2026-12-02"], "not both"),
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


@pytest.mark.parametrize(
    ("since", "until", "expected"),
    [
        ("2026-12-01", "2026-12-02", (1_796_083_200_000, 1_796_169_600_000)),
        (
            "2026-12-01T01:00:00+01:00",
            "2026-12-01T00:00:01Z",
            (1_796_083_200_000, 1_796_083_201_000),
        ),
    ],
)
def test_a_range_is_read_in_utc_milliseconds_from_included_to_excluded(
    since: str, until: str, expected: tuple[int, int]
) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["erase", "--from", since, "--to", until])
    assert erased_range(args) == expected
