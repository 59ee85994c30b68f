"""``Verifier``: everything verify concludes from the messages of one range.

Fed every message of a range (partition, offset, key, value), it decodes with
the shared reader (every schema version), checks contracts 1-4 and 6 on each
event, and tracks every ordered stream with an exact ``StreamTracker``
(dedupe by event id, gaps, late arrivals, the hash chain). A turn that broke a
contract 1-4 (found here, or recorded by its producer in v4's ``breaches``) is
counted like any turn and listed in ``breaching``: on the record, not lost.
No I/O but the event ids beyond ``IdMemory.event_ids``, spilled to sorted run files
in a temporary directory (``id_store``) that ``close`` removes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from turnaudit.contracts import Breach, check_event, check_key
from turnaudit.errors import SerializationError
from turnaudit.events import occurred_millis
from turnaudit.identity import (
    StreamId,
    StreamTracker,
    TrackResult,
    TurnOutcome,
)
from turnaudit.records import Record
from turnaudit.serialization.native import VerifyStep
from turnaudit.serialization.read_plans import DecodedTurnEvent
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.verify.counts import TurnCounts
from turnaudit.verify.findings import (
    Finding,
    HeadJson,
    Where,
    breaching_turn,
    classify,
    lost_findings,
    message_where,
)
from turnaudit.verify.id_store import (
    STREAM_BATCH,
    STREAMS_FILE,
    CountedIds,
    IdMemory,
    SpilledIds,
)
from turnaudit.verify.native_step import contract_check, feed_batch
from turnaudit.verify.retained_start import Anchors, RetainedStart
from turnaudit.verify.trust_facts import TrustFacts

# Heads read from the tracker at a time for a report (streams spilled or not).
HEADS_PAGE = 10_000


class Verifier:
    """Everything verify concludes from the messages of one range."""

    def __init__(
        self,
        decode: TurnEventDeserializer,
        *,
        log_start_offsets: Mapping[int, int] | None = None,
        anchors: Anchors | None = None,
        start_gaps: bool = True,
        event_window: tuple[int, int] | None = None,
        signed: Mapping[StreamId, Mapping[int, str]] | None = None,
        memory: IdMemory | None = None,
        named_schemas: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self._decode = decode
        # ``--keyring``: positions valid checkpoints signed, per stream; the chain hashes the
        # range holds there are kept in ``signed_seen`` (one dict lookup per message).
        # With what else the judgement needs (``trust_facts``); None without a keyring.
        self.trust = None if signed is None else TrustFacts(signed, named_schemas)
        self._fed_ms = 0
        self._watched = bool(anchors) or self.trust is not None
        # ``--time event``: only turns whose occurred_at (epoch ms) is in [low, high)
        # count; the others are tallied in ``outside_window`` and otherwise ignored.
        self.event_window = event_window
        self.outside_window = 0
        # Stream heads from an earlier report: (position, chain hash) that must still be there.
        self.retained = RetainedStart(anchors)
        # Retention: a partition whose log start is past 0 lost its beginning to time
        # retention (or delete_records). Read from there, a stream first seen past
        # position 0 began before retention: the tracker opens no gap at its start, and
        # only an anchor (a head proved earlier) can make its missing prefix a finding.
        low = dict(log_start_offsets or {})
        self.log_start = low
        self._moved = {p: o for p, o in low.items() if o > 0}
        self._start_gaps = start_gaps
        self._first_fed: dict[int, int] = {}
        self.retained_from: set[int] = set()  # partitions read from a moved log start
        # Exact, in bounded memory: the most recently seen streams and the newest event
        # ids in memory, the others spilled to disk and read back from there (``close``
        # removes them); every missing position of a stream.
        memory = memory or IdMemory()
        self._spilled = SpilledIds(memory.spill_dir, memory.batch, memory.filter_bits)
        self.tracker = StreamTracker(
            max_event_ids=memory.event_ids,
            max_streams=memory.streams,
            max_missing=1 << 62,
            log_start_offsets={p: -1 if o > 0 else o for p, o in low.items()},
            start_gaps=start_gaps,
            forgotten=self._spilled.native,
            forget_batch=memory.batch,
            stream_spill=self._spilled.stream_file,
            stream_batch=min(STREAM_BATCH, memory.streams),
        )
        self.event_ids = CountedIds(self.tracker.remembered(), self._spilled)
        self.counts = TurnCounts()
        self.messages = 0
        self.redeliveries = 0
        self.duplicates: list[Finding] = []
        self.findings: list[Finding] = []  # unexplained
        self.undecodable: list[Finding] = []
        # Turns that broke a contract (1-4, by verify's own check or recorded by the
        # producer in v4's ``breaches``): counted like any turn and listed, not lost.
        self.breaching: list[Finding] = []
        self.breaches_by_contract: Counter[str] = Counter()
        self.breaching_by_pack: Counter[str] = Counter()
        # The ordinary messages of a batch, natively; not with ``--time event``, anchors
        # or signed heads (kept per message by ``feed``).
        self._step = (
            VerifyStep(
                decode, self.tracker, contract_check(), self.counts.tally, decode.native_plans()
            )
            if event_window is None and not self._watched
            else None
        )
        self.first_timestamp: int | None = None
        self.last_timestamp: int | None = None

    @property
    def spill_file(self) -> Path | None:
        """The directory older event ids were spilled to (sorted run files), while verify
        runs."""
        return self._spilled.path

    def close(self) -> None:
        """Removes the spilled event ids (``event_ids`` is unusable after)."""
        self._spilled.close()

    # -- verify --jobs: a verifier per partition set, merged ---------------------------
    def export_for_merge(self, directory: Path) -> list[Path]:
        """Every counted event id as run files in ``directory``, and every stream in
        ``directory / STREAMS_FILE``, for ``absorb_exported`` (then ``event_ids`` and the
        streams are gone here)."""
        directory.mkdir(parents=True, exist_ok=True)
        streams = directory / STREAMS_FILE
        exported = [streams] if self.tracker.export_streams(streams) else []
        return self._spilled.export_runs(self.tracker, directory) + exported

    def __getstate__(self) -> dict[str, object]:
        # Sent back from a job: its ids go by ``export_for_merge``, its decoder stays there.
        return {
            k: v
            for k, v in self.__dict__.items()
            if k not in ("_decode", "_spilled", "event_ids", "_step")
        }

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._step = None
        self._spilled = SpilledIds()
        self._spilled.close()
        self.event_ids = CountedIds(self.tracker.remembered(), self._spilled)

    def absorb(self, other: Verifier) -> None:
        """The conclusions of a verifier that read other partitions (its ids and streams:
        ``absorb_exported``)."""
        self.messages += other.messages
        self.redeliveries += other.redeliveries
        self.outside_window += other.outside_window
        self.duplicates += other.duplicates
        self.findings += other.findings
        self.undecodable += other.undecodable
        self.breaching += other.breaching
        self.breaches_by_contract.update(other.breaches_by_contract)
        self.breaching_by_pack.update(other.breaching_by_pack)
        self.counts.absorb(other.counts)
        self.tracker.absorb(other.tracker)
        if self.trust is not None and other.trust is not None:
            self.trust.absorb(other.trust)
        self.retained.absorb(other.retained)
        self._first_fed.update(other._first_fed)
        self.retained_from |= other.retained_from
        for stamp in (other.first_timestamp, other.last_timestamp):
            if stamp is not None:
                self.stamped(stamp)

    def absorb_exported(self, files: Sequence[Path]) -> None:
        """The ids and streams of verifiers that read other partitions (the files
        ``export_for_merge`` wrote), in the order given. An event id two of them counted is
        a duplicate copy or changed content at the later of its two places; each copy stays
        counted."""
        for streams in (f for f in files if f.name == STREAMS_FILE):
            self.tracker.absorb_streams(streams)
        for repeat in self._spilled.absorb_all([f for f in files if f.name != STREAMS_FILE]):
            where = message_where(repeat.repeat[1] or 0, repeat.repeat[2] or 0)
            where["event_id"] = repeat.event_id
            if repeat.repeat[0] == repeat.first[0]:
                self.duplicates.append(
                    Finding("duplicate", "the same event stored again (same content)", where)
                )
            else:
                self.findings.append(
                    Finding(
                        "content_changed",
                        "an event id seen before comes back with other content",
                        where,
                    )
                )

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _in_window(self, event: Mapping[str, Any]) -> bool:
        assert self.event_window is not None
        low, high = self.event_window
        try:
            return low <= occurred_millis(event["occurred_at"]) < high
        except (KeyError, TypeError, ValueError):
            return True  # not a TurnEvent: the checks that follow report it

    def stamped(self, timestamp_ms: int) -> None:
        if self.first_timestamp is None or timestamp_ms < self.first_timestamp:
            self.first_timestamp = timestamp_ms
        if self.last_timestamp is None or timestamp_ms > self.last_timestamp:
            self.last_timestamp = timestamp_ms

    def feed_batch(self, batch: Sequence[Record]) -> None:
        """Every message of ``batch``, in order: the ordinary ones by the native step (none
        with ``--time event``, anchors or signed heads: those are kept per message here)."""
        if self._step is not None:
            feed_batch(self, self._step, batch)
            return
        for msg in batch:
            self.feed(
                msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value(), msg.timestamp()[1]
            )

    def feed(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
    ) -> None:
        self.messages += 1
        if partition not in self._first_fed:
            self._first_fed[partition] = offset
            if self._moved.get(partition) == offset:
                self.retained_from.add(partition)
        if timestamp_ms is not None and timestamp_ms > 0:
            self.stamped(timestamp_ms)
        self._fed_ms = timestamp_ms or 0
        try:
            decoded = self._decode(value)
        except SerializationError as exc:
            self.undecodable.append(
                Finding("undecodable", str(exc), message_where(partition, offset))
            )
            return
        if self.event_window is not None and not self._in_window(decoded.event):
            self.outside_window += 1
            return
        held = len(self.tracker)
        # The chain hash binds the writer schema (a Confluent id's: the one it resolved to).
        fp = self._decode.writer_fingerprint(decoded)
        try:
            result = self.tracker.observe(
                decoded.event, value or b"", partition=partition, offset=offset, fingerprint=fp
            )
        except (KeyError, TypeError, ValueError) as exc:
            self.not_a_turn(exc, partition, offset)
            return
        self.conclude(
            partition,
            offset,
            key,
            value,
            decoded=decoded,
            result=result,
            opened=len(self.tracker) != held,
        )

    def not_a_turn(self, exc: Exception, partition: int, offset: int) -> None:
        self.undecodable.append(
            Finding("undecodable", f"not a TurnEvent: {exc!r}", message_where(partition, offset))
        )

    def conclude(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        *,
        decoded: DecodedTurnEvent,
        result: TrackResult,
        opened: bool,
    ) -> None:
        """What a placed message adds (``opened``: its placement opened a stream)."""
        event = decoded.event
        try:
            breaches = check_event(event)
        except (KeyError, TypeError, ValueError) as exc:
            self.not_a_turn(exc, partition, offset)
            return
        stream: StreamId = result.stream  # the tracker's: not built a second time per turn
        if (
            opened
            and result.sequence > 0
            and partition in self.retained_from
            and self._start_gaps
            and result.counts_as_turn
        ):
            self.retained.first_seen_past_zero(
                stream,
                str(event.get("prev_hash") or ""),
                Where(
                    partition=partition,
                    offset=offset,
                    session_id=stream[0],
                    producer_id=stream[1],
                    position=result.sequence,
                ),
            )
        # Contract 6's check only for a key that is not the session id's text (rare).
        key_breach = None if key == stream[0].encode() else check_key(key, event)
        recorded = event.get("breaches") or ()
        ordinary = (
            result.outcome is TurnOutcome.NEW
            and result.chain_break is None
            and key_breach is None
            and not breaches
            and not recorded
        )
        if not ordinary:
            # Where a finding is: built only for the few messages that have one.
            where = Where(
                partition=partition,
                offset=offset,
                session_id=stream[0],
                producer_id=stream[1],
                position=result.sequence,
                event_id=event["event_id"],
            )
            self._report(result, key_breach, breaches, where)
            if result.counts_as_turn and (breaches or recorded):
                self._breaching(event, breaches, recorded, where)
            if not result.counts_as_turn:
                return
        if self._watched:  # anchors or signed heads: their chain hashes are kept
            fp = self._decode.writer_fingerprint(decoded)
            self.retained.keep(stream, result.sequence, value, fp)
            if self.trust is not None:
                began, ms = opened and partition in self.retained_from, self._fed_ms
                self.trust.keep(stream, result.sequence, value, fp, began=began, stored_ms=ms)
        # A breach is still a turn that happened: counted, and reported above (its event
        # id is in ``event_ids``: the tracker keeps every counted one).
        self.counts.add(event, decoded.writer_version)

    @property
    def signed_seen(self) -> dict[StreamId, dict[int, set[str]]]:
        """The chain hashes the range holds at signed positions (``--keyring``)."""
        return {} if self.trust is None else self.trust.signed_seen

    def _report(
        self,
        result: TrackResult,
        key_breach: Breach | None,
        breaches: list[Breach],
        where: Where,
    ) -> None:
        if key_breach is not None:
            self.findings.append(Finding("key_mismatch", key_breach.detail, where))
        self.findings += classify(result, where)
        if result.outcome is TurnOutcome.REDELIVERY:
            self.redeliveries += 1
        elif result.outcome is TurnOutcome.DUPLICATE:
            self.duplicates.append(
                Finding("duplicate", "the same event stored again (same content)", where)
            )

    def _breaching(
        self,
        event: Mapping[str, Any],
        breaches: list[Breach],
        recorded: Sequence[str],
        where: Where,
    ) -> None:
        """A turn that broke a contract: counted as a turn (by ``feed``) and listed here."""
        pack, contracts, finding = breaching_turn(event, breaches, recorded, where)
        self.breaching_by_pack[pack] += 1
        self.breaches_by_contract.update(contracts)
        self.breaching.append(finding)

    def holds(self, stream: StreamId) -> bool:
        """Whether a turn of ``stream`` was placed (a message whose event id was seen before
        places none)."""
        return self.tracker.last_position(*stream) is not None

    def stream_counts(self) -> tuple[int, int]:
        """(chained, v1/v2 legacy) streams with a turn placed."""
        return self.tracker.stream_counts()

    def heads(self) -> list[HeadJson]:
        """Each chained stream's last position and its chain hash: keep them, and pass the
        report to a later ``verify --heads`` to detect a truncated or rewritten tail."""
        return [
            HeadJson(session_id=session, producer_id=producer, position=position, hash=digest)
            for session, producer, position, digest in self.chained_heads()
        ]

    def chained_heads(self) -> Iterator[tuple[str, str, int, str]]:
        """``heads()`` as (session, producer, position, hash), sorted by stream, read from
        the tracker a page at a time (a spilled stream's from the disk)."""
        after: tuple[str, str] | None = None
        while page := self.tracker.chained_heads(after, HEADS_PAGE):
            yield from page
            after = (page[-1][0], page[-1][1])

    def anchors_expired(self) -> int:
        """Anchored streams with no event left, in a range read from a moved log start."""
        return self.retained.expired(self.holds) if self.retained_from else 0

    def anchor_findings(self) -> list[Finding]:
        return self.retained.findings(
            self.holds,
            lambda stream: self.tracker.head(*stream),
            retained_from_moved_start=bool(self.retained_from),
        )

    def lost(self) -> list[Finding]:
        return lost_findings(self.tracker.missing())

    def lost_positions(self) -> int:
        return sum(len(p) for p in self.tracker.missing().values())
