"""Key-encryption keys (KEKs): the provider protocol and the file keyring.

A surface key provider wraps a session's data key under its active KEK and unwraps a
wrapped data key under the KEK it names. The file keyring holds the KEKs themselves
(TOML, one active); a KMS plugin would hold them elsewhere and implement the same
``SurfaceKeyProvider`` protocol. Pure: no Kafka.

The keyring file::

    active = "kek-2026-12"
    [keys]
    kek-2026-11 = "<base64 of 32 random bytes>"
    kek-2026-12 = "<base64 of 32 random bytes>"

Rotation: add a key and make it ``active``; data keys made since are wrapped by it, the
older ones still open while their KEK stays in the file.
"""

from __future__ import annotations

import base64
import binascii
import os
import threading
import tomllib
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from turnaudit.errors import ConfigurationError
from turnaudit.files import read_secret

SURFACE_KEYRING_ENV = "TURNAUDIT_SURFACE_KEYRING"
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # GCM's 96-bit nonce
_WRAP_CONTEXT = b"turnaudit.surface-key.v1\x00"


class KeyUnavailableError(Exception):
    """A wrapped data key cannot be unwrapped: its KEK is not held, or it was altered."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class WrappedKey:
    """A data key wrapped by the KEK ``kek_id`` (AES-256-GCM; ``sealed`` holds the tag),
    bound to its session and id: a wrapped key moved to another session does not open."""

    kek_id: str
    nonce: bytes
    sealed: bytes


POOL_BYTES = 512 * NONCE_BYTES


class RandomPool:
    """Random bytes for nonces and new data keys, drawn from the OS ``POOL_BYTES`` at a
    time: a getrandom call lets go of the GIL, and under a busy publisher taking it back
    cost more than the rest of sealing a turn. Not thread-safe: its owner calls ``take``
    under its own lock. A forked child's pools are emptied (``os.register_at_fork``), so a
    child never hands out the nonces (or keys) its parent does."""

    __slots__ = ("__weakref__", "_at", "_drawn")

    def __init__(self) -> None:
        self._drawn, self._at = b"", 0
        _POOLS.add(self)

    def take(self, size: int = NONCE_BYTES) -> bytes:
        """``size`` random bytes never handed out before (a nonce, by default)."""
        at = self._at
        if at + size > len(self._drawn):
            self._drawn, at = os.urandom(max(POOL_BYTES, size)), 0
        self._at = at + size
        return self._drawn[at : at + size]

    def forget(self) -> None:
        """Drop the bytes drawn and not handed out: the next ``take`` draws anew."""
        self._drawn, self._at = b"", 0


_POOLS: weakref.WeakSet[RandomPool] = weakref.WeakSet()


def _forget_drawn() -> None:
    for pool in list(_POOLS):
        pool.forget()


os.register_at_fork(after_in_child=_forget_drawn)


def _wrap_aad(session_id: str, data_key_id: str) -> bytes:
    s, d = session_id.encode("utf-8", "surrogatepass"), data_key_id.encode()
    return _WRAP_CONTEXT + len(s).to_bytes(4, "big") + s + d


class SurfaceKeyProvider(Protocol):
    """Wraps data keys under an active KEK and unwraps them (the file keyring, a KMS)."""

    @property
    def active_key_id(self) -> str: ...

    def wrap(self, session_id: str, data_key_id: str, data_key: bytes) -> WrappedKey: ...

    def unwrap(self, session_id: str, data_key_id: str, wrapped: WrappedKey) -> bytes:
        """The data key; ``KeyUnavailableError`` when it cannot be had."""
        ...


class FileKeyring:
    """KEKs held in a TOML file (see the module docstring)."""

    def __init__(self, keys: Mapping[str, bytes], active: str) -> None:
        if active not in keys:
            raise ConfigurationError(f"surface keyring: active key {active!r} is not in [keys]")
        self._keks = {key_id: AESGCM(secret) for key_id, secret in keys.items()}
        self._active = active
        self._random, self._lock = RandomPool(), threading.Lock()

    @property
    def active_key_id(self) -> str:
        return self._active

    @property
    def key_ids(self) -> frozenset[str]:
        return frozenset(self._keks)

    def wrap(self, session_id: str, data_key_id: str, data_key: bytes) -> WrappedKey:
        with self._lock:
            nonce = self._random.take()
        sealed = self._keks[self._active].encrypt(
            nonce, data_key, _wrap_aad(session_id, data_key_id)
        )
        return WrappedKey(self._active, nonce, sealed)

    def unwrap(self, session_id: str, data_key_id: str, wrapped: WrappedKey) -> bytes:
        kek = self._keks.get(wrapped.kek_id)
        if kek is None:
            raise KeyUnavailableError("kek_unknown")
        try:
            key = kek.decrypt(wrapped.nonce, wrapped.sealed, _wrap_aad(session_id, data_key_id))
        except (InvalidTag, ValueError):
            raise KeyUnavailableError("key_tampered") from None
        if len(key) != KEY_BYTES:
            raise KeyUnavailableError("key_tampered")
        return key

    @classmethod
    def parse(cls, text: str, where: str) -> FileKeyring:
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigurationError(f"{where}: not TOML ({exc})") from None
        active, table = raw.get("active"), raw.get("keys")
        if not isinstance(active, str) or not active:
            raise ConfigurationError(f"{where}: 'active' must name a key id")
        if not isinstance(table, dict) or not table:
            raise ConfigurationError(f"{where}: a [keys] table of key id = base64 secret")
        if active not in table:
            raise ConfigurationError(f"{where}: active key {active!r} is not in [keys]")
        keys: dict[str, bytes] = {}
        for key_id, encoded in table.items():
            try:
                secret = base64.b64decode(str(encoded), validate=True)
            except (binascii.Error, ValueError):
                secret = b""
            if len(secret) != KEY_BYTES:
                raise ConfigurationError(
                    f"{where}: key {key_id!r} must be the base64 of {KEY_BYTES} bytes"
                )
            keys[key_id] = secret
        return cls(keys, active)

    @classmethod
    def load(cls, path: Path, setting: str = SURFACE_KEYRING_ENV) -> FileKeyring:
        """The keyring at ``path``, refused when group or others may read it (it holds
        secret keys). Errors name the setting and the path, never the file's content."""
        where = f"{setting}={path}"
        data = read_secret(path, where, "the keyring", limit=1 << 20)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigurationError(f"{where}: not UTF-8 text") from None
        return cls.parse(text, where)


def provider_from_env(env: Mapping[str, str] | None = None) -> FileKeyring | None:
    """The keyring ``TURNAUDIT_SURFACE_KEYRING`` names, or None when it is not set."""
    env = os.environ if env is None else env
    raw = env.get(SURFACE_KEYRING_ENV, "").strip()
    return None if not raw else FileKeyring.load(Path(raw))


def new_key_entry(key_id: str) -> str:
    """A keyring line for a new random KEK."""
    return f'{key_id} = "{base64.b64encode(os.urandom(KEY_BYTES)).decode()}"\n'
