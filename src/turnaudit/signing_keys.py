"""Key files for signed checkpoints: the publisher's private key, a new key pair, verify's
keyring; and the publisher's checkpoint settings.

A private key is read only from a file only its owner may read (mode 0600 or tighter):
a key group or others could read is refused with one line. Nothing here puts key
material in an error, a log line or a repr (``SigningKey`` hides it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from turnaudit.checkpoints import Keyring, SigningKey, keyring_entry_toml, parse_keyring
from turnaudit.errors import ConfigurationError
from turnaudit.files import read_secret

KEY_FILE_ENV = "TURNAUDIT_SIGNING_KEY_FILE"
KEY_ID_ENV = "TURNAUDIT_SIGNING_KEY_ID"
INTERVAL_ENV = "TURNAUDIT_CHECKPOINT_INTERVAL_S"
MAX_TURNS_ENV = "TURNAUDIT_CHECKPOINT_MAX_TURNS"
DEFAULT_CHECKPOINT_INTERVAL_S = 5.0
DEFAULT_CHECKPOINT_MAX_TURNS = 10_000


def load_signing_key(path: Path, key_id: str, *, setting: str = KEY_FILE_ENV) -> SigningKey:
    """The Ed25519 private key in PEM at ``path``, refused when group or others may read
    it. Errors name the setting and the path, never the file's content."""
    where = f"{setting}={path}"
    data = read_secret(
        path, where, "the private key", limit=1 << 16, cannot="cannot read the key file: "
    )
    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        key = None
    except Exception:  # an unsupported algorithm or encoding: still one line, no content
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigurationError(f"{where}: not an unencrypted Ed25519 private key in PEM")
    return SigningKey(key, key_id)


@dataclass(frozen=True)
class CheckpointSettings:
    """The publisher's signed checkpoints: its key (None: it writes none, its streams are
    unsigned), the interval and the count of turns after which it writes one."""

    key: SigningKey | None = None
    interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S
    max_turns: int = DEFAULT_CHECKPOINT_MAX_TURNS

    def __post_init__(self) -> None:
        if not 0 < self.interval_s < float("inf"):
            raise ConfigurationError(
                f"{INTERVAL_ENV}={self.interval_s!r}: expected a number of seconds above 0"
            )
        if self.max_turns < 1:
            raise ConfigurationError(
                f"{MAX_TURNS_ENV}={self.max_turns!r}: expected a whole number of 1 or more"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CheckpointSettings:
        env = os.environ if env is None else env
        raw_file = env.get(KEY_FILE_ENV, "").strip()
        key = None
        if raw_file:
            key_id = env.get(KEY_ID_ENV, "").strip()
            if not key_id:
                raise ConfigurationError(
                    f"{KEY_FILE_ENV} is set: {KEY_ID_ENV} must name the "
                    "key (its id in verify's keyring)"
                )
            key = load_signing_key(Path(raw_file), key_id)
        return cls(
            key,
            _seconds(env, INTERVAL_ENV, DEFAULT_CHECKPOINT_INTERVAL_S),
            _whole(env, MAX_TURNS_ENV, DEFAULT_CHECKPOINT_MAX_TURNS),
        )


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ConfigurationError(f"{name}={raw!r}: expected a number of seconds above 0")
    return value


def _whole(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigurationError(f"{name}={raw!r}: expected a whole number of 1 or more")
    return value


@dataclass(frozen=True)
class GeneratedKeys:
    private_path: Path
    public_path: Path
    keyring_entry: str  # the lines to add to verify's keyring


def generate_keys(out: Path, key_id: str, *, now: datetime | None = None) -> GeneratedKeys:
    """A new Ed25519 key pair in ``out``: ``<key_id>.key`` (owner-only, created so: never
    readable by others, not even for a moment) and ``<key_id>.pub``. Refuses to
    overwrite a key."""
    if not key_id or "/" in key_id or key_id.startswith(".") or "\x00" in key_id:
        raise ConfigurationError(f"--key-id {key_id!r}: expected a plain name (no '/')")
    try:
        out.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ConfigurationError(f"--out {out}: cannot create the folder: {exc.strerror}") from None
    private_path, public_path = out / f"{key_id}.key", out / f"{key_id}.pub"
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    try:
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigurationError(
            f"--out {out}: {private_path.name} exists already: choose another --key-id"
        ) from None
    except OSError as exc:
        raise ConfigurationError(f"--out {out}: cannot write the key: {exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)
    signing = SigningKey(key, key_id)
    public = signing.public_pem()
    public_path.write_text(public, encoding="ascii")
    entry = keyring_entry_toml(key_id, public, now or datetime.now(UTC))
    return GeneratedKeys(private_path, public_path, entry)


def load_keyring(path: Path) -> Keyring:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigurationError(f"--keyring {path}: cannot read it: {reason}") from None
    return parse_keyring(text, source=f"--keyring {path}")
