"""What a ``Verifier`` keeps of a range for the trust judgement (``verify --keyring``):
the chain hashes at signed positions, the first turn of a stream written with a writer
schema its producer's checkpoints do not name, where streams begin past position 0 in a
partition read from a moved log start, and the stored times of streams no checkpoint
signs (for the keyring's allowances). Pure."""

from __future__ import annotations

from collections.abc import Mapping

from turnaudit.chain import StreamId, chain_hash
from turnaudit.verify.trust import StreamFacts


class TrustFacts:
    def __init__(
        self,
        signed: Mapping[StreamId, Mapping[int, str]],
        named_schemas: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self.signed = signed
        self.named = dict(named_schemas or {})
        self.signed_seen: dict[StreamId, dict[int, set[str]]] = {}
        self.unnamed_schema: dict[StreamId, tuple[int, str]] = {}
        self.started_at: dict[StreamId, int] = {}
        self.unsigned_times: dict[StreamId, tuple[int, int]] = {}

    def keep(
        self,
        stream: StreamId,
        sequence: int,
        value: bytes | None,
        fingerprint: bytes | None,
        *,
        began: bool,
        stored_ms: int,
    ) -> None:
        """One counted turn (``began``: it opened its stream in a partition read from a
        moved log start; ``stored_ms``: its record timestamp, 0 when unknown)."""
        wanted = self.signed.get(stream)
        if wanted is not None and sequence in wanted:
            self.signed_seen.setdefault(stream, {}).setdefault(sequence, set()).add(
                chain_hash(value or b"", fingerprint)
            )
        if began and sequence > 0:
            self.started_at.setdefault(stream, sequence)
        named = self.named.get(stream[1])
        if named is not None and (fingerprint is None or fingerprint.hex() not in named):
            have = self.unnamed_schema.get(stream)
            if have is None or sequence < have[0]:
                shown = "(unknown)" if fingerprint is None else fingerprint.hex()
                self.unnamed_schema[stream] = (sequence, shown)
        if wanted is None and stored_ms > 0:
            first, last = self.unsigned_times.get(stream, (stored_ms, stored_ms))
            self.unsigned_times[stream] = (min(first, stored_ms), max(last, stored_ms))

    def absorb(self, other: TrustFacts) -> None:
        """What a verifier of other partitions kept."""
        for stream, hashes in other.signed_seen.items():
            for position, seen in hashes.items():
                self.signed_seen.setdefault(stream, {}).setdefault(position, set()).update(seen)
        for stream, (position, fp) in other.unnamed_schema.items():
            if stream not in self.unnamed_schema or position < self.unnamed_schema[stream][0]:
                self.unnamed_schema[stream] = (position, fp)
        for stream, position in other.started_at.items():
            self.started_at[stream] = min(position, self.started_at.get(stream, position))
        for stream, (first, last) in other.unsigned_times.items():
            have = self.unsigned_times.get(stream, (first, last))
            self.unsigned_times[stream] = (min(first, have[0]), max(last, have[1]))

    def facts(self) -> StreamFacts:
        return StreamFacts(self.unnamed_schema, self.started_at, self.unsigned_times)
