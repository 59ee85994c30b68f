"""``turnaudit surface-keys rewrap`` without a usable keyring: one line, exit 2, before any
cluster is asked (the unit tier has none: reaching for it fails the test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnaudit.cli import main
from turnaudit.sealing import SURFACE_KEYRING_ENV


@pytest.mark.parametrize(
    ("keyring", "says"),
    [
        (None, f"set {SURFACE_KEYRING_ENV}"),
        ("missing.toml", "missing.toml"),
        ("readable.toml", "readable by group or others"),
    ],
)
def test_rewrap_without_a_usable_keyring_is_one_line_exit_2(
    keyring: str | None,
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if keyring is None:
        monkeypatch.delenv(SURFACE_KEYRING_ENV, raising=False)
    else:
        path = tmp_path / keyring
        if keyring == "readable.toml":
            path.write_text('active = "k"\n[keys]\nk = "' + "A" * 43 + '="\n')
            path.chmod(0o644)
        monkeypatch.setenv(SURFACE_KEYRING_ENV, str(path))
    assert main(["surface-keys", "rewrap"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("turnaudit surface-keys: ")
    assert says in err
