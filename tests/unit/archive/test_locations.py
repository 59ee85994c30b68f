"""Every command that takes an archive LOCATION (``archive check``, ``archive export``,
``verify --archive``, ``replay --archive``, ``eval rebuild --archive``, and ``archive
run``'s TURNAUDIT_ARCHIVE_DIR)
takes a directory or ``s3://bucket/prefix`` the same way: a wrong location or S3 setting
is one line and exit 2, an S3 server that does not answer one line and exit 1, before
the cluster is asked (nothing listens at the bootstrap address)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnaudit.archive.s3_store import S3Location
from turnaudit.cli import main
from turnaudit.errors import ConfigurationError
from turnaudit.signing_keys import generate_keys

# Nothing answers on port 1 of loopback: connection refused at once.
UNREACHABLE = "http://127.0.0.1:1"


def command(kind: str, location: str, tmp_path: Path) -> list[str]:
    return {
        "check": ["archive", "check", location, "--keyring", str(tmp_path / "k.toml")],
        "export": ["archive", "export", location, "--jsonl", str(tmp_path / "out.jsonl")],
        "verify": ["verify", "--archive", location],
        "replay": ["replay", "--archive", location, "--into", f"jsonl:{tmp_path / 'o.jsonl'}"],
        "rebuild": [
            *("eval", "rebuild", "--archive", location, "--labels", str(tmp_path / "labels")),
            *("--output", str(tmp_path / "evidence.json")),
        ],
    }[kind]


COMMANDS = ("check", "export", "verify", "replay", "rebuild")
# (location, S3 endpoint setting, what the line says, exit code)
LOCATIONS = [
    ("ftp://host/archive", "", "not an archive location", 2),
    ("s3://", "", "no bucket", 2),
    ("s3:///prefix", "", "no bucket", 2),
    ("s3://bucket/a/../b", "", "'.' and '..'", 2),
    ("s3://bucket/p", "localhost:9000", "TURNAUDIT_ARCHIVE_S3_ENDPOINT_URL='localhost:9000'", 2),
    ("s3://bucket/p", UNREACHABLE, "s3://bucket/p: open failed: Could not connect", 1),
    ("{tmp}/no-such-folder", "", "no-such-folder: not a directory", 2),
]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No cluster, and S3 credentials from the environment only (no ~/.aws, no instance
    metadata service)."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("TURNAUDIT_CONNECT_TIMEOUT_S", "1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "TURNAUDIT_ARCHIVE_S3_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("kind", COMMANDS)
@pytest.mark.parametrize("wrong", LOCATIONS, ids=[f"{w[0]}|{w[1]}" for w in LOCATIONS])
def test_a_wrong_or_unreachable_location_is_one_line_with_its_exit_code(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    wrong: tuple[str, str, str, int],
) -> None:
    location, endpoint, said, exit_code = wrong
    if endpoint:
        monkeypatch.setenv("TURNAUDIT_ARCHIVE_S3_ENDPOINT_URL", endpoint)
    code = main(command(kind, location.format(tmp=tmp_path), tmp_path))
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, len(err)) == (exit_code, 1), err
    assert err[0].startswith("turnaudit ")
    assert said in err[0]


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("kind", COMMANDS)
def test_s3_without_credentials_is_one_line_and_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("TURNAUDIT_ARCHIVE_S3_ENDPOINT_URL", UNREACHABLE)
    code = main(command(kind, "s3://bucket/p", tmp_path))
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, len(err)) == (2, 1), err
    assert "no S3 credentials" in err[0]


# archive run: the location and the S3 settings judged with the others, before anything starts.
RUN_SETTINGS = [
    ("s3://", "", "no bucket"),
    ("s3://bucket/../x", "", "'.' and '..'"),
    ("s3://bucket/x", "minio:9000", "expected an http:// or https:// URL"),
]


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("wrong", RUN_SETTINGS)
def test_a_wrong_s3_setting_of_archive_run_is_one_line_and_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    wrong: tuple[str, str, str],
) -> None:
    location, endpoint, said = wrong
    key_file = generate_keys(tmp_path / "keys", "archiver-1").private_path
    monkeypatch.setenv("TURNAUDIT_ARCHIVE_DIR", location)
    monkeypatch.setenv("TURNAUDIT_ARCHIVE_KEY_FILE", str(key_file))
    monkeypatch.setenv("TURNAUDIT_ARCHIVE_KEY_ID", "archiver-1")
    monkeypatch.setenv("TURNAUDIT_ARCHIVE_S3_ENDPOINT_URL", endpoint)
    assert main(["archive", "run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert said in err[0]


BUCKET = st.from_regex(r"[a-z0-9][a-z0-9.-]{1,20}[a-z0-9]", fullmatch=True)
PARTS = st.lists(st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,8}", fullmatch=True), max_size=4)


@given(bucket=BUCKET, parts=PARTS, slashes=st.lists(st.integers(1, 3), min_size=6, max_size=6))
def test_an_s3_location_is_its_bucket_and_a_prefix_whatever_its_slashes(
    bucket: str, parts: list[str], slashes: list[int]
) -> None:
    """``s3://b/p/q``, ``s3://b//p/q/`` and the like are one location: the prefix of every
    key is the parts joined by one / and ended by one ('' for none); written back, it
    parses to itself."""
    text = f"s3://{bucket}" + "".join(
        "/" * n + part for n, part in zip(slashes, parts, strict=False)
    )
    text += "/" * slashes[-1] if parts else ""
    location = S3Location.parse(text)
    assert location.bucket == bucket
    assert location.prefix == "".join(f"{part}/" for part in parts)
    assert S3Location.parse(str(location)) == location


@pytest.mark.parametrize("text", ["s3://bucket/.", "s3://bucket/a/..", "s3:/bucket", "bucket"])
def test_what_is_no_s3_location_is_refused(text: str) -> None:
    with pytest.raises(ConfigurationError):
        S3Location.parse(text)
