"""``turnaudit archive``: every wrong setting of ``run`` and wrong argument of ``check`` is
one line and exit 2 before anything starts; ``check`` prints one line per finding and exits
1, or one line per partition and exits 0."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.archive import archive_records, signing_key
from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.settings import ArchiveSettings
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.checkpoints import keyring_entry_toml
from turnaudit.cli import main
from turnaudit.signing_keys import generate_keys

KEY = signing_key()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    return generate_keys(tmp_path / "keys", "archiver-1").private_path


def good_env(tmp_path: Path, key_file: Path) -> dict[str, str]:
    return {
        "TURNAUDIT_ARCHIVE_DIR": str(tmp_path / "archive"),
        "TURNAUDIT_ARCHIVE_KEY_FILE": str(key_file),
        "TURNAUDIT_ARCHIVE_KEY_ID": "archiver-1",
    }


WRONG_SETTINGS = [
    ("TURNAUDIT_ARCHIVE_DIR", "", "TURNAUDIT_ARCHIVE_DIR is not set"),
    ("TURNAUDIT_ARCHIVE_KEY_ID", "", "TURNAUDIT_ARCHIVE_KEY_ID must name"),
    ("TURNAUDIT_ARCHIVE_KEY_FILE", "", "TURNAUDIT_ARCHIVE_KEY_FILE and"),
    ("TURNAUDIT_ARCHIVE_KEY_FILE", "/no/such/key", "cannot read the key file"),
    ("TURNAUDIT_ARCHIVE_CODEC", "snappy", "choose null or deflate"),
    ("TURNAUDIT_ARCHIVE_WINDOW_S", "0", "TURNAUDIT_ARCHIVE_WINDOW_S='0'"),
    ("TURNAUDIT_ARCHIVE_WINDOW_S", "an hour", "expected a number"),
    ("TURNAUDIT_ARCHIVE_SEGMENT_MAX_BYTES", "0.5", "TURNAUDIT_ARCHIVE_SEGMENT_MAX_BYTES"),
    ("TURNAUDIT_ARCHIVE_SEAL_GRACE_S", "-1", "TURNAUDIT_ARCHIVE_SEAL_GRACE_S"),
    ("TURNAUDIT_ARCHIVE_DIGEST_INTERVAL_S", "inf", "TURNAUDIT_ARCHIVE_DIGEST_INTERVAL_S"),
]


@pytest.mark.parametrize("wrong", WRONG_SETTINGS)
def test_a_wrong_setting_of_run_is_one_line_and_exit_2(
    tmp_path: Path,
    key_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    wrong: tuple[str, str, str],
) -> None:
    name, value, said = wrong
    for key, good in good_env(tmp_path, key_file).items():
        monkeypatch.setenv(key, good)
    monkeypatch.setenv(name, value)
    assert main(["archive", "run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("turnaudit archive: ")
    assert said in err


def test_a_key_others_may_read_is_refused(tmp_path: Path, key_file: Path) -> None:
    key_file.chmod(0o644)
    with pytest.raises(Exception, match="readable by group or others"):
        ArchiveSettings.from_env(good_env(tmp_path, key_file))


def test_the_settings_read_what_they_are_given(tmp_path: Path, key_file: Path) -> None:
    env = {
        **good_env(tmp_path, key_file),
        "TURNAUDIT_ARCHIVE_WINDOW_S": "60",
        "TURNAUDIT_ARCHIVE_SEGMENT_MAX_BYTES": "5000",
        "TURNAUDIT_ARCHIVE_SEAL_GRACE_S": "0",
        "TURNAUDIT_ARCHIVE_DIGEST_INTERVAL_S": "10",
        "TURNAUDIT_ARCHIVE_CODEC": "null",
    }
    settings = ArchiveSettings.from_env(env)
    assert settings.policy == ArchivePolicy(60_000, 5000, 0.0, 10.0, "null")
    assert settings.key.key_id == "archiver-1"
    assert settings.location == str(tmp_path / "archive")


def built(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "archive"
    records = [ArchivedRecord("t.turn-events", 0, o, 1000 * o, 1, None, b"v") for o in range(5)]
    archive_records(LocalArchive(root), records, KEY, ArchivePolicy(window_ms=2000))
    keyring = tmp_path / "keyring.toml"
    keyring.write_text(
        keyring_entry_toml(KEY.key_id, KEY.public_pem(), datetime(2020, 1, 1, tzinfo=UTC))
    )
    return root, keyring


def test_check_of_an_intact_archive_exits_0_with_a_line_per_partition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, keyring = built(tmp_path)
    assert main(["archive", "check", str(root), "--keyring", str(keyring)]) == 0
    out = capsys.readouterr().out
    assert out == "t.turn-events/0: 5 records in 3 segments (offsets 0-4), 2 digests\n"


def test_check_names_each_finding_on_a_line_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, keyring = built(tmp_path)
    segments = sorted((root / "t.turn-events/0/segments").iterdir())
    segments[0].write_bytes(segments[0].read_bytes()[:-1])
    segments[1].unlink()
    assert main(["archive", "check", str(root), "--keyring", str(keyring)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [
        f"altered t.turn-events/0/segments/{segments[0].name}: SHA-256 differs from its digest's",
        f"missing t.turn-events/0/segments/{segments[1].name}: listed with 2 records",
    ]
    assert lines[-1] == "2 findings"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["/no/such/archive", "--keyring", "k.toml"], "/no/such/archive: not a directory"),
        ([".", "--keyring", "/no/such/keyring.toml"], "cannot read it"),
    ],
)
def test_a_wrong_argument_of_check_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert main(["archive", "check", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert said in err


def test_check_without_a_keyring_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["archive", "check", "."])
    assert stopped.value.code == 2
    assert "the following arguments are required: --keyring" in capsys.readouterr().err
