"""Verify's keyring: the public keys signed checkpoints may be signed with (each valid from
``valid_from`` until ``revoked_at``), whether every stream must be signed, and the
migration allowances for streams allowed to be unsigned. Parsed from TOML; pure."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from turnaudit.errors import ConfigurationError


def millis_time(moment_ms: int) -> datetime:
    return datetime.fromtimestamp(moment_ms / 1000, UTC)


@dataclass(frozen=True)
class KeyEntry:
    """A public key verify trusts from ``valid_from`` until ``revoked_at`` (exclusive)."""

    key_id: str
    public_key: Ed25519PublicKey
    valid_from: datetime
    revoked_at: datetime | None = None

    def valid_at(self, moment: datetime) -> bool:
        return self.valid_from <= moment and (self.revoked_at is None or moment < self.revoked_at)


@dataclass(frozen=True)
class UnsignedAllowance:
    """A migration allowance: streams allowed to be unsigned (no finding), by producer id
    (``""``: v1/v2 streams outside signed sessions) and/or by the time range their
    records were stored in (the writer's timestamps: ``[since, until)``)."""

    producer_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    reason: str = ""

    def allows(self, producer_id: str, times_ms: tuple[int, int] | None) -> bool:
        if self.producer_id is not None and producer_id != self.producer_id:
            return False
        if self.since is None and self.until is None:
            return True
        if times_ms is None:
            return False
        first, last = millis_time(times_ms[0]), millis_time(times_ms[1])
        return (self.since is None or self.since <= first) and (
            self.until is None or last < self.until
        )

    def describe(self) -> str:
        parts = []
        if self.producer_id is not None:
            parts.append(f"producer {self.producer_id or '(none: v1/v2)'}")
        if self.since is not None or self.until is not None:
            since = "the start" if self.since is None else self.since.isoformat()
            until = "now" if self.until is None else self.until.isoformat()
            parts.append(f"stored from {since} until {until}")
        return " ".join(parts) + (f": {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class Keyring:
    """The public keys checkpoints may be signed with, whether every stream must be, and
    the unsigned streams allowed while runtimes migrate (``[[allow_unsigned]]``)."""

    keys: Mapping[str, KeyEntry] = field(default_factory=dict)
    require_signed: bool = False
    allow_unsigned: tuple[UnsignedAllowance, ...] = ()


def parse_keyring(text: str, source: str = "keyring") -> Keyring:
    """A keyring from TOML::

        require_signed = true            # optional: every stream must be signed
        [keys."runtime-2026-01"]
        public_key = "-----BEGIN PUBLIC KEY-----\\n…\\n-----END PUBLIC KEY-----\\n"
        valid_from = 2026-01-01T00:00:00Z
        revoked_at = 2026-06-01T00:00:00Z   # optional

    Raises ``ConfigurationError`` (one line, naming ``source`` and the key) otherwise."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{source}: not TOML: {exc}") from None
    unknown = set(data) - {"require_signed", "keys", "allow_unsigned"}
    if unknown:
        raise ConfigurationError(f"{source}: unknown setting(s) {sorted(unknown)}")
    require = data.get("require_signed", False)
    if not isinstance(require, bool):
        raise ConfigurationError(f"{source}: require_signed must be true or false")
    table = data.get("keys", {})
    if not isinstance(table, dict) or not table:
        raise ConfigurationError(f"{source}: no [keys.<key id>] table")
    keys = {}
    for key_id, entry in table.items():
        keys[key_id] = _key_entry(key_id, entry, source)
    allowances = data.get("allow_unsigned", [])
    if not isinstance(allowances, list):
        raise ConfigurationError(f"{source}: allow_unsigned must be [[allow_unsigned]] tables")
    return Keyring(keys, require, tuple(_allowance(i, a, source) for i, a in enumerate(allowances)))


def _allowance(index: int, entry: object, source: str) -> UnsignedAllowance:
    where = f"{source}: allow_unsigned #{index + 1}"
    if not isinstance(entry, dict):
        raise ConfigurationError(f"{where}: expected a table")
    unknown = set(entry) - {"producer_id", "since", "until", "reason"}
    if unknown:
        raise ConfigurationError(f"{where}: unknown setting(s) {sorted(unknown)}")
    producer = entry.get("producer_id")
    if producer is not None and not isinstance(producer, str):
        raise ConfigurationError(f"{where}: producer_id must be a string")
    reason = entry.get("reason", "")
    if not isinstance(reason, str):
        raise ConfigurationError(f"{where}: reason must be a string")
    since = _moment(entry.get("since"), f"{where}: since")
    until = _moment(entry.get("until"), f"{where}: until")
    if producer is None and since is None and until is None:
        raise ConfigurationError(f"{where}: name a producer_id or a time range (since/until)")
    if since is not None and until is not None and until <= since:
        raise ConfigurationError(f"{where}: until is not after since")
    return UnsignedAllowance(producer, since, until, reason)


def _key_entry(key_id: str, entry: object, source: str) -> KeyEntry:
    where = f"{source}: key {key_id!r}"
    if not isinstance(entry, dict):
        raise ConfigurationError(f"{where}: expected a table")
    unknown = set(entry) - {"public_key", "valid_from", "revoked_at"}
    if unknown:
        raise ConfigurationError(f"{where}: unknown setting(s) {sorted(unknown)}")
    pem = entry.get("public_key")
    if not isinstance(pem, str):
        raise ConfigurationError(f"{where}: public_key (PEM) is missing")
    try:
        public = load_pem_public_key(pem.encode("ascii"))
    except (ValueError, TypeError, UnicodeEncodeError):
        public = None
    if not isinstance(public, Ed25519PublicKey):
        raise ConfigurationError(f"{where}: public_key is not an Ed25519 public key in PEM")
    valid_from = _moment(entry.get("valid_from"), f"{where}: valid_from")
    if valid_from is None:
        raise ConfigurationError(f"{where}: valid_from is missing")
    revoked = _moment(entry.get("revoked_at"), f"{where}: revoked_at")
    if revoked is not None and revoked <= valid_from:
        raise ConfigurationError(f"{where}: revoked_at is not after valid_from")
    return KeyEntry(key_id, public, valid_from, revoked)


def _moment(value: object, what: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ConfigurationError(f"{what}: {value!r} is not an ISO 8601 time") from None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ConfigurationError(f"{what}: expected a time with its offset (…Z)")
    return value.astimezone(UTC)


def keyring_entry_toml(key_id: str, pem: str, valid_from: datetime) -> str:
    """The keyring lines for a new public key (what ``turnaudit keys generate`` prints)."""
    quoted = pem.strip().replace("\n", "\\n")
    return (
        f'[keys."{key_id}"]\npublic_key = "{quoted}\\n"\n'
        f"valid_from = {valid_from.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}\n"
    )
