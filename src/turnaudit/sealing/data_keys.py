"""Data keys: one per session (per publisher process), random, wrapped by a KEK and
kept as a record on the compacted ``<prefix>surface-keys`` topic under its id.

The turn carries only the data key's id (``sealed.data_key_id``), never the key, so
destroying the record (a tombstone, then compaction) makes the session's surfaces
unrecoverable without touching the KEK or any other session. Pure: the Kafka side is
``turnaudit.sealing.key_topic``.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _json_text  # json.dumps' (C)
from typing import Literal

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from turnaudit.errors import ConfigurationError, SerializationError
from turnaudit.events import OutgoingTurnEvent, TurnEvent
from turnaudit.sealing.envelope import (
    Opened,
    OpenFailedError,
    Sealed,
    SealState,
    TurnSealer,
    cover_sealed,
    open_event,
    write_surfaces,
)
from turnaudit.sealing.keys import (
    KEY_BYTES,
    SURFACE_KEYRING_ENV,
    KeyUnavailableError,
    RandomPool,
    SurfaceKeyProvider,
    WrappedKey,
)

DEFAULT_CACHED_SESSIONS = 65_536
DAY_MS = 86_400_000
KEY_PERIOD_ENV = "TURNAUDIT_SURFACE_KEY_PERIOD"
# How long a data key seals a session's turns: the whole session, or one UTC day of it.
KeyPeriod = Literal["session", "day"]
KEY_PERIODS: tuple[KeyPeriod, ...] = ("session", "day")


def key_period_from_env(env: Mapping[str, str] | None = None) -> KeyPeriod:
    """``TURNAUDIT_SURFACE_KEY_PERIOD``: ``session`` (unset) or ``day``."""
    raw = (os.environ if env is None else env).get(KEY_PERIOD_ENV, "").strip().lower()
    if not raw:
        return "session"
    for period in KEY_PERIODS:
        if raw == period:
            return period
    raise ConfigurationError(f"{KEY_PERIOD_ENV}={raw!r}: expected session or day")


SEALED_SINCE_VERSION = 5  # the first TurnEvent version with ``sealed``


class KeyRecordError(ValueError):
    """A value on the key topic that is not a data key record."""


@dataclass(frozen=True, slots=True)
class DataKeyRecord:
    """A session's wrapped data key, as stored on ``<prefix>surface-keys``: made at
    ``created_at_ms`` (the publisher's clock, on the first turn it seals) for ``period``
    (a record written before the field was kept reads as ``session``)."""

    data_key_id: str
    session_id: str
    wrapped: WrappedKey
    created_at_ms: int
    period: KeyPeriod = "session"

    def sealed_within(self, from_ms: int, to_ms: int) -> bool:
        """Whether an erasure of the times ``[from_ms, to_ms)`` destroys this key: a day
        key when its UTC day overlaps the range (the whole day goes), a session key when
        it was made in the range (its session's first sealed turn: the later turns go
        with it). docs/privacy.md says why."""
        if self.period == "day":
            day_start = self.created_at_ms - self.created_at_ms % DAY_MS
            return day_start < to_ms and from_ms < day_start + DAY_MS
        return from_ms <= self.created_at_ms < to_ms

    def encode(self) -> bytes:
        """``json.dumps`` of the fields with ``sort_keys=True``, byte for byte, written out
        (0.6 µs against 3.1: one a new session): the keys in sorted order, each
        text by the string encoder ``json.dumps`` uses, the number as ``repr``."""
        return (
            f'{{"created_at_ms": {int.__repr__(self.created_at_ms)}, '
            f'"data_key_id": {_json_text(self.data_key_id)}, '
            f'"kek_id": {_json_text(self.wrapped.kek_id)}, '
            f'"nonce": "{base64.b64encode(self.wrapped.nonce).decode()}", '
            f'"period": {_json_text(self.period)}, '
            f'"session_id": {_json_text(self.session_id)}, '
            f'"wrapped": "{base64.b64encode(self.wrapped.sealed).decode()}"}}'
        ).encode()

    @classmethod
    def decode(cls, value: bytes) -> DataKeyRecord:
        try:
            raw = json.loads(value)
            return cls(
                data_key_id=str(raw["data_key_id"]),
                session_id=str(raw["session_id"]),
                wrapped=WrappedKey(
                    str(raw["kek_id"]),
                    base64.b64decode(raw["nonce"], validate=True),
                    base64.b64decode(raw["wrapped"], validate=True),
                ),
                created_at_ms=int(raw["created_at_ms"]),
                # Unknown (a later period) or absent (an older record): by its creation.
                period="day" if raw.get("period") == "day" else "session",
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise KeyRecordError(f"not a data key record: {exc}") from None


class SessionKeys:
    """The publisher's side: each session's data key, made on its first turn (``period``
    ``day``: again on its first turn of each UTC day, by ``clock_ms``), its record handed
    to ``store`` (the key topic) before any turn sealed with it; kept for up to
    ``max_sessions`` sessions (a session evicted gets a new data key: a session may
    have several, each with its own record)."""

    def __init__(
        self,
        provider: SurfaceKeyProvider,
        store: Callable[[DataKeyRecord], None],
        *,
        clock_ms: Callable[[], int],
        max_sessions: int = DEFAULT_CACHED_SESSIONS,
        period: KeyPeriod = "session",
    ) -> None:
        self._provider, self._store, self._clock_ms = provider, store, clock_ms
        self._max = max_sessions
        self._daily = period == "day"
        # session -> (the UTC day its key was made on, its sealer)
        self._keys: OrderedDict[str, tuple[int, TurnSealer]] = OrderedDict()
        self._lock = threading.Lock()
        self._random = RandomPool()  # nonces and new data keys, taken under the lock
        self.made = 0

    def _made(self, session_id: str, now_ms: int, day: int) -> TurnSealer:
        """A new data key for the session (under the lock): its record handed to ``store``
        first, then kept as the session's sealer (the least recently used one forgotten)."""
        fresh = self._random.take(16 + KEY_BYTES)
        data_key_id, data_key = fresh[:16].hex(), fresh[16:]
        wrapped = self._provider.wrap(session_id, data_key_id, data_key)
        # Raises when the record can be kept nowhere: no key is kept, nothing sealed.
        period: KeyPeriod = "day" if self._daily else "session"
        self._store(DataKeyRecord(data_key_id, session_id, wrapped, now_ms, period))
        self.made += 1
        sealer = TurnSealer(AESGCM(data_key), data_key_id)
        self._keys[session_id] = (day, sealer)
        self._keys.move_to_end(session_id)  # a new day's key for a session kept
        if len(self._keys) > self._max:
            self._keys.popitem(last=False)
        return sealer

    def seal(self, event: OutgoingTurnEvent) -> None:
        """Seal a stamped event in place (its plaintext fields emptied); a turn of a
        version without ``sealed`` (before v5) is refused, never written in the clear."""
        if event["verdicts"]["schema_version"] < SEALED_SINCE_VERSION:
            raise SerializationError(
                f"{SURFACE_KEYRING_ENV} is set: sealed surfaces need TurnEvent "
                f"v{SEALED_SINCE_VERSION} or later, this turn is "
                f"v{event['verdicts']['schema_version']}"
            )
        session_id = event["session_id"]
        with self._lock:
            # The clock is read for a day's key, or to date a new session key's record.
            now_ms = self._clock_ms() if self._daily else 0
            day = now_ms // DAY_MS
            found = self._keys.get(session_id)
            if found is not None and found[0] == day:
                self._keys.move_to_end(session_id)
                sealer = found[1]
            else:
                sealer = self._made(session_id, now_ms if self._daily else self._clock_ms(), day)
            nonce = self._random.take()
        sealer.seal(event, nonce)


class KeyDirectory:
    """The readers' side: the data key records read from the key topic (a tombstone
    forgets one), unwrapped on first use with the reader's provider (None: no keyring)."""

    def __init__(
        self,
        provider: SurfaceKeyProvider | None,
        refresh: Callable[[KeyDirectory], None] | None = None,
    ) -> None:
        self.provider = provider
        self._refresh = refresh  # reads what the key topic gained since (a newer session's key)
        self._records: dict[str, DataKeyRecord] = {}
        self._opened: dict[str, AESGCM] = {}
        self._missed: set[str] = set()  # refreshed for once already: not asked again

    def __len__(self) -> int:
        return len(self._records)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One message of the key topic (a bad one is left out: its turns stay sealed)."""
        if key is None:
            return
        data_key_id = key.decode("utf-8", "replace")
        if value is None:  # a tombstone: the session was erased
            self._records.pop(data_key_id, None)
            self._opened.pop(data_key_id, None)
            return
        try:
            record = DataKeyRecord.decode(value)
        except KeyRecordError:
            return
        if record.data_key_id == data_key_id:
            self._records[data_key_id] = record

    def records(self) -> list[DataKeyRecord]:
        return list(self._records.values())

    def records_of(self, session_id: str) -> list[DataKeyRecord]:
        return [r for r in self._records.values() if r.session_id == session_id]

    def records_within(self, from_ms: int, to_ms: int) -> list[DataKeyRecord]:
        """The data keys an erasure of ``[from_ms, to_ms)`` destroys (``sealed_within``)."""
        return [r for r in self._records.values() if r.sealed_within(from_ms, to_ms)]

    def knows(self, data_key_id: str) -> bool:
        return data_key_id in self._records

    def aead(self, data_key_id: str, session_id: str) -> AESGCM:
        """The data key for a turn of ``session_id``; ``OpenFailedError`` when it cannot
        be had (no keyring, erased, its KEK not held, altered, another session's)."""
        opened = self._opened.get(data_key_id)
        if opened is not None and self._records[data_key_id].session_id == session_id:
            return opened
        if self.provider is None:
            raise OpenFailedError("no_keyring")
        record = self._records.get(data_key_id)
        if record is None and self._refresh is not None and data_key_id not in self._missed:
            self._missed.add(data_key_id)
            self._refresh(self)
            record = self._records.get(data_key_id)
        if record is None:
            raise OpenFailedError("key_erased")
        try:
            key = self.provider.unwrap(session_id, data_key_id, record.wrapped)
        except KeyUnavailableError as exc:
            raise OpenFailedError(
                "kek_unknown" if exc.reason == "kek_unknown" else "key_tampered"
            ) from None
        self._opened[data_key_id] = aead = AESGCM(key)
        return aead

    def open_in_place(self, event: TurnEvent) -> SealState | None:
        """Open a decoded turn's sealed surfaces into its fields (``Opened``), or write
        placeholders there (``Sealed`` with the reason); None: the turn is not sealed."""
        sealed = event.get("sealed")
        if sealed is None:
            return None
        try:
            aead = self.aead(sealed["data_key_id"], event["session_id"])
            surfaces = open_event(event, aead)
        except OpenFailedError as exc:
            cover_sealed(event, exc.reason)
            return Sealed(exc.reason)
        write_surfaces(event, surfaces)
        return Opened(surfaces)
