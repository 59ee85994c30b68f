"""The offset ledger of a group member: pure bookkeeping, no client.

Per partition it knows the next offset handed to the sink (``delivered``) and
the next offset stored for the committer (``stored``). The at-least-once rule
lives here: an offset is stored only once the sink has taken everything before
it, never past what the sink still holds (``held``), never backwards, and only
for a partition this member still owns; a revoked or lost partition is
forgotten whole. The loop asks it what to store and what to commit, then does
the I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping


class OffsetLedger:
    """Delivered and stored offsets per partition (thread-safe: health reads it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stored: dict[int, int] = {}  # next offset stored, per partition
        self._delivered: dict[int, int] = {}  # next offset the sink was handed
        self._owned: set[int] = set()

    def assigned(self, partitions: Iterable[int]) -> None:
        with self._lock:
            self._owned.update(partitions)

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions revoked or lost: what was known of them is the next owner's."""
        with self._lock:
            for p in partitions:
                self._owned.discard(p)
                self._stored.pop(p, None)
                self._delivered.pop(p, None)

    def delivered(self, next_offsets: Mapping[int, int]) -> None:
        """The sink has taken (and made durable) everything before these offsets."""
        with self._lock:
            self._delivered.update((p, o) for p, o in next_offsets.items() if p in self._owned)

    def to_store(
        self, held: Mapping[int, int] | None, next_offsets: Mapping[int, int] | None = None
    ) -> dict[int, int]:
        """Offsets to store now, recorded as stored: ``next_offsets`` (default: every
        delivered position) capped by what the sink still ``held``, for owned
        partitions, where they move forward."""
        with self._lock:
            candidates = self._delivered if next_offsets is None else next_offsets
            advanced = {}
            for p, offset in candidates.items():
                capped = min(offset, held[p]) if held is not None and p in held else offset
                if p in self._owned and capped > self._stored.get(p, -1):
                    advanced[p] = capped
            self._stored.update(advanced)
            return advanced

    def to_commit(self, partitions: Iterable[int] | None = None) -> dict[int, int]:
        """Stored offsets to commit: of these partitions, or of every owned one."""
        with self._lock:
            if partitions is None:
                return dict(self._stored)
            wanted = set(partitions)
            return {p: o for p, o in self._stored.items() if p in wanted}

    def stored(self) -> dict[int, int]:
        """Next offset stored per partition (everything before it is in the sink)."""
        with self._lock:
            return dict(self._stored)

    def delivered_positions(self) -> dict[int, int]:
        """Next offset the sink was handed per partition (a sink that holds offsets,
        such as the HTIR feeder's open traces, has taken more than is stored)."""
        with self._lock:
            return dict(self._delivered)

    def owned(self) -> set[int]:
        with self._lock:
            return set(self._owned)
