"""The archiver's settings, from ``TURNAUDIT_ARCHIVE_*`` variables (one line for a wrong one)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from turnaudit.archive.s3_store import S3_SETTINGS, SCHEME, S3Location, S3Settings
from turnaudit.archive.segments import CODECS
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.checkpoints import SigningKey
from turnaudit.errors import ConfigurationError
from turnaudit.signing_keys import load_signing_key

DIR_ENV = "TURNAUDIT_ARCHIVE_DIR"
KEY_FILE_ENV = "TURNAUDIT_ARCHIVE_KEY_FILE"
KEY_ID_ENV = "TURNAUDIT_ARCHIVE_KEY_ID"
WINDOW_ENV = "TURNAUDIT_ARCHIVE_WINDOW_S"
MAX_BYTES_ENV = "TURNAUDIT_ARCHIVE_SEGMENT_MAX_BYTES"
GRACE_ENV = "TURNAUDIT_ARCHIVE_SEAL_GRACE_S"
DIGEST_ENV = "TURNAUDIT_ARCHIVE_DIGEST_INTERVAL_S"
CODEC_ENV = "TURNAUDIT_ARCHIVE_CODEC"
SETTINGS = (
    DIR_ENV,
    KEY_FILE_ENV,
    KEY_ID_ENV,
    WINDOW_ENV,
    MAX_BYTES_ENV,
    GRACE_ENV,
    DIGEST_ENV,
    CODEC_ENV,
    *S3_SETTINGS,
)


@dataclass(frozen=True)
class ArchiveSettings:
    """Where the archive is (a directory or ``s3://bucket/prefix``), the key its digests
    are signed with, and its policy."""

    location: str
    key: SigningKey
    policy: ArchivePolicy

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ArchiveSettings:
        env = os.environ if env is None else env
        # Every setting read before any is judged: the first wrong one is named.
        raw = {name: env.get(name, "").strip() for name in SETTINGS}
        if not raw[DIR_ENV]:
            raise ConfigurationError(
                f"{DIR_ENV} is not set: name the archive's directory or s3://bucket/prefix"
            )
        if raw[DIR_ENV].startswith(SCHEME):  # judged now; the bucket is asked at start
            S3Location.parse(raw[DIR_ENV])
            S3Settings.from_env(env)
        if not raw[KEY_FILE_ENV] or not raw[KEY_ID_ENV]:
            raise ConfigurationError(
                f"{KEY_FILE_ENV} and {KEY_ID_ENV} must name the Ed25519 key digests are "
                "signed with (turnaudit keys generate) and its id in the keyring"
            )
        codec = raw[CODEC_ENV] or "deflate"
        if codec not in CODECS:
            raise ConfigurationError(f"{CODEC_ENV}={codec!r}: choose {' or '.join(CODECS)}")
        policy = ArchivePolicy(
            window_ms=int(_number(raw, WINDOW_ENV, 3600.0, minimum=0.001) * 1000),
            max_bytes=int(_number(raw, MAX_BYTES_ENV, 32 * 1024 * 1024, minimum=1)),
            seal_grace_s=_number(raw, GRACE_ENV, 60.0, minimum=0),
            digest_interval_s=_number(raw, DIGEST_ENV, 3600.0, minimum=0),
            codec=codec,
        )
        key = load_signing_key(Path(raw[KEY_FILE_ENV]), raw[KEY_ID_ENV], setting=KEY_FILE_ENV)
        return cls(raw[DIR_ENV], key, policy)


def _number(env: Mapping[str, str], name: str, default: float, *, minimum: float) -> float:
    raw = env[name]
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not minimum <= value < float("inf"):
        raise ConfigurationError(f"{name}={raw!r}: expected a number of at least {minimum:g}")
    return value
