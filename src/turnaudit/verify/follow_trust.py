"""``verify --follow --keyring``: each stream's trust, judged as turns and signed
checkpoints arrive. Pure: no I/O, no clock of its own.

The rules are one-shot verify's (``turnaudit.verify.trust``), held live:

* a checkpoint is judged as it is read with ``judge_signature`` (key known, valid at
  the signing and append times, signature holds) and ``follows`` (it continues its
  producer's chain from the last valid checkpoint of that producer: the checkpoints
  topic has one partition, so a chain arrives in order), or resumes it past a hole
  retention explains. A bad one is a finding of its own and changes no stream;
* v1/v2 turns are judged: ``forged`` in a session a valid checkpoint signs, else
  uncovered; a turn whose writer schema its producer's checkpoints do not name is
  ``forged`` once a checkpoint covers its position;
* a position a valid checkpoint signs is compared with the chain hash of the turn at
  that position, whichever arrives first (the turn's hash is kept for the last
  ``WINDOW`` unsigned positions of its stream); another hash is ``forged`` at once;
* positions no valid checkpoint covers within ``grace_s`` (counted from the turn's
  arrival, and only once the checkpoint reader has read the whole topic that far: a
  follower reading a backlog judges nothing its reader has not caught up with) make a
  stream ``unsigned``, or ``forged`` when signatures are required; turns of a producer
  after its final checkpoint are ``forged``;
* a signed position that has not arrived when its partition's event time is ``grace_s``
  past the checkpoint is ``truncated``, unless retention explains it (a later one was read).

State per stream and per producer (the last valid checkpoint), checkpointable beside the
proof (``checkpoint``, ``load``); a stream the proof retired leaves once settled signed.

One ``FollowTrust`` judges the streams of one turn partition (its ``scope``): it takes
from each checkpoint only the heads of streams whose key places them there (``owns``),
and its records are keyed by the scope. Each judges every checkpoint's signature and
chain for itself (a producer's chain is small); only one (``reports_checkpoints``, the
judge of partition 0) reports an invalid checkpoint, so a group of workers finds it once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

from turnaudit.checkpoint_chain import (
    KEPT_FOR_EVER,
    ChainLink,
    Judged,
    Problem,
    RetentionStart,
    follows,
    judge_signature,
    link_of,
)
from turnaudit.checkpoints import Checkpoint, Keyring
from turnaudit.identity import LEGACY_PRODUCER, StreamId
from turnaudit.verify.follow_trust_findings import GAUGE_STATES, Forgery, GaugeState, Reason
from turnaudit.verify.follow_trust_state import (
    ProducerChain,
    StreamTrust,
    parse_trust_key,
    trust_producer_key,
    trust_reader_key,
    trust_retired_key,
    trust_stream_key,
)

WINDOW = 64  # unsigned positions per stream whose hash is kept for a later checkpoint
_DIGITS = 32  # hex digits of a chain hash kept and compared (128 bits)


def _every_stream(stream: StreamId) -> bool:
    return True


class FollowTrust:
    """Per-stream trust of the streams of one turn partition, checkpointable."""

    def __init__(
        self,
        keyring: Keyring,
        *,
        grace_s: float,
        scope: int = 0,
        owns: Callable[[StreamId], bool] = _every_stream,
        reports_checkpoints: bool = True,
        start: RetentionStart = KEPT_FOR_EVER,
    ) -> None:
        self.keyring = keyring
        self.grace_ms = int(grace_s * 1000)
        self.scope = scope
        self._owns = owns
        self.reports_checkpoints = reports_checkpoints
        self._start = start  # when a chain may begin past a hole retention explains
        self.streams: dict[StreamId, StreamTrust] = {}
        self.producers: dict[str, ProducerChain] = {}
        self.reader_offsets: dict[int, int] = {}  # the checkpoints topic, read to
        self.valid = 0
        self.invalid = 0
        self._found: list[Forgery] = []
        self._dirty: set[StreamId] = set()
        self._dirty_producers: set[str] = set()
        self._reader_moved = False
        self._signed_sessions: set[str] = set()  # sessions a valid checkpoint signs
        # Streams with unsigned positions or signed ones not yet read: what sweep looks at.
        self._watch: set[StreamId] = set()
        # Streams the proof retired (ended whole), waiting for their trust to settle signed;
        # then they leave, counted in ``retired_signed`` (a tombstone at the checkpoint).
        self._retiring: set[StreamId] = set()
        self._tombstones: set[StreamId] = set()
        self.retired_signed = 0

    def read_to(self, partition: int, offset: int) -> None:
        """The checkpoints topic is read up to ``offset`` (exclusive) in ``partition``."""
        self.reader_offsets[partition] = offset
        self._reader_moved = True

    # -- checkpoints ---------------------------------------------------------------------
    def take_checkpoint(self, checkpoint: Checkpoint, appended_ms: int | None) -> Judged:
        """One checkpoint as read from the topic, in order."""
        verdict = judge_signature(checkpoint, self.keyring, appended_ms)
        last = self.producers.get(checkpoint.producer_id)
        if verdict.problem is None:
            if last is not None and checkpoint.index <= last.link.index:
                if checkpoint.index < last.link.index or checkpoint.digest() == last.link.digest:
                    return verdict  # a copy re-sent, already taken
                verdict = Judged(
                    checkpoint,
                    "chain_break",
                    f"a second checkpoint {checkpoint.index} of producer "
                    f"{checkpoint.producer_id} (the chain forks)",
                )
            elif not follows(checkpoint, None if last is None else last.link) and not (
                self._start.resumes(checkpoint, -1 if last is None else last.link.index)
            ):
                verdict = Judged(
                    checkpoint,
                    "chain_break",
                    f"checkpoint {checkpoint.index} of producer {checkpoint.producer_id} names a "
                    "predecessor not read last (removed, not by retention; or never signed)",
                )
        if verdict.problem is not None:
            self._invalid(verdict, verdict.problem)
            return verdict
        self.valid += 1
        named = None if last is None else last.schemas
        if checkpoint.format >= 2:
            named = (named or frozenset()) | frozenset(checkpoint.schemas)
        self.producers[checkpoint.producer_id] = ProducerChain(
            link_of(checkpoint), checkpoint.final, named
        )
        self._dirty_producers.add(checkpoint.producer_id)
        for head in checkpoint.heads:
            if self._owns(head.stream):
                self._signed(head.stream, head.sequence, head.hash, checkpoint)
        return verdict

    def _invalid(self, verdict: Judged, problem: Problem) -> None:
        self.invalid += 1
        if not self.reports_checkpoints:
            return
        c = verdict.checkpoint
        detail = (
            f"checkpoint {c.index} of producer {c.producer_id} (key {c.key_id!r}) is "
            f"not valid: {verdict.detail}"
        )
        self._found.append(Forgery(problem, detail))

    def _signed(self, stream_id: StreamId, position: int, digest: str, c: Checkpoint) -> None:
        stream = self._stream(stream_id)
        self._dirty.add(stream_id)
        if position > stream.top:
            stream.expected[position] = (digest[:_DIGITS], c.at_ms)
            stream.written_after[position] = max(c.prev_at_ms, c.at_ms - 2 * c.interval_ms)
            self._watch.add(stream_id)
        elif position in stream.seen:
            have = stream.seen[position][0]
            if have != digest[:_DIGITS]:
                self._rewritten(stream_id, stream, position, have, digest)
        elif position > stream.signed:
            stream.unchecked += 1  # its turn's hash left the window: not compared
        if position > stream.signed:
            stream.signed = position
            stream.seen = {p: v for p, v in stream.seen.items() if p > position}
            if not stream.seen:
                stream.uncovered_late = False
        self._schemas_named(stream_id, stream)
        legacy = (stream_id[0], LEGACY_PRODUCER)
        self._signed_sessions.add(stream_id[0])
        if legacy in self.streams:
            self._legacy_in_signed(legacy)

    def _schemas_named(self, stream_id: StreamId, stream: StreamTrust) -> None:
        """A signed position written with a writer schema its producer never named."""
        named = self.producers.get(stream_id[1])
        if named is None or named.schemas is None:
            return
        for fp, position in stream.schemas.items():
            if position <= stream.signed and fp not in named.schemas:
                self._forge(
                    stream_id,
                    stream,
                    "unnamed_schema",
                    f"position {position} is written with writer schema {fp}, which no "
                    "valid checkpoint of its producer names (re-framed)",
                )

    def _legacy_in_signed(self, legacy: StreamId) -> None:
        self._forge(
            legacy,
            self._stream(legacy),
            "legacy_in_signed_session",
            "v1/v2 turns (no chain) inside a session a valid checkpoint signs",
        )

    def _rewritten(
        self, stream_id: StreamId, stream: StreamTrust, position: int, have: str, signed: str
    ) -> None:
        self._forge(
            stream_id,
            stream,
            "rewritten",
            f"position {position} has chain hash "
            f"{have[:16]}…, the signed checkpoint says {signed[:16]}… (rewritten)",
        )

    # -- turns ---------------------------------------------------------------------------
    def observe(
        self,
        stream_id: StreamId,
        partition: int,
        position: int,
        digest: str,
        at_ms: int,
        *,
        schema: str = "",
    ) -> None:
        """A turn read: its stream, position, chain hash, arrival (epoch ms) and writer
        schema (hex fingerprint)."""
        stream = self._stream(stream_id)
        self._dirty.add(stream_id)
        stream.partition = partition
        if stream_id[1] == LEGACY_PRODUCER:  # v1/v2: no chain, nothing signs it
            if stream_id[0] in self._signed_sessions:
                self._legacy_in_signed(stream_id)
            elif not stream.seen:
                stream.seen[-1] = ("", at_ms)  # judged uncovered once the grace has run
                self._watch.add(stream_id)
            return
        if schema and schema not in stream.schemas:
            stream.schemas[schema] = position
            self._schemas_named(stream_id, stream)
        stream.top = max(stream.top, position)
        expected = stream.expected.pop(position, None)
        stream.written_after.pop(position, None)
        if expected is not None:
            if expected[0] != digest[:_DIGITS]:
                self._rewritten(stream_id, stream, position, digest, expected[0])
            return
        if position <= stream.signed:
            return  # covered by a later signed head
        stream.seen[position] = (digest[:_DIGITS], at_ms)
        self._watch.add(stream_id)
        if len(stream.seen) > WINDOW:
            del stream.seen[min(stream.seen)]
        chain = self.producers.get(stream_id[1])
        if chain is not None and chain.final:
            self._forge(
                stream_id,
                stream,
                "after_final",
                f"position {position} after its producer's final checkpoint {chain.link.index}",
            )

    def _stream(self, stream_id: StreamId) -> StreamTrust:
        stream = self.streams.get(stream_id)
        if stream is None:
            stream = self.streams[stream_id] = StreamTrust()
        return stream

    def _forge(
        self,
        stream_id: StreamId,
        stream: StreamTrust,
        reason: Reason,
        detail: str,
        *,
        count: bool = True,
    ) -> None:
        self._dirty.add(stream_id)
        if stream.forged:
            return  # forged once; the first reason stays
        stream.forged, stream.reason = detail, reason
        if count:
            self._found.append(Forgery(reason, detail, stream_id))

    # -- streams that ended ------------------------------------------------------------
    def retire(self, stream_id: StreamId) -> None:
        """The proof retired the stream (it ended whole): its trust leaves memory and the
        state topic once settled signed (every position read signed, none owed), now or
        when a checkpoint signs the rest; any other verdict stays, a finding. A producer's
        checkpoints name only streams whose head moved: none waits for it afterwards."""
        if stream_id in self.streams:
            self._retiring.add(stream_id)
            self._leave_if_settled(stream_id)

    def _leave_if_settled(self, stream_id: StreamId) -> None:
        if not self.streams[stream_id].settled_signed():
            return
        del self.streams[stream_id]
        self._retiring.discard(stream_id)
        self._watch.discard(stream_id)
        self._dirty.discard(stream_id)
        self._tombstones.add(stream_id)
        self._signed_sessions.discard(stream_id[0])  # a later signature names it again
        self.retired_signed += 1

    # -- over time ---------------------------------------------------------------------
    def sweep(self, *, horizon_ms: int | None, event_time_ms: Mapping[int, int]) -> None:
        """``horizon_ms``: the time up to which every checkpoint written has been read
        (None: the reader has not reached the topic's end yet); ``event_time_ms``: each
        partition's event time proved to."""
        for stream_id in list(self._retiring):
            retiring = self.streams.get(stream_id)
            if retiring is not None and retiring.status() in ("signed", "pending"):
                self._leave_if_settled(stream_id)
            else:
                self._retiring.discard(stream_id)  # gone, or a finding: it stays
        for stream_id in list(self._watch):
            stream = self.streams[stream_id]
            if stream.forged or not (stream.seen or stream.expected):
                self._watch.discard(stream_id)
                continue
            if horizon_ms is not None and stream.seen and not stream.uncovered_late:
                oldest = min(t for _, t in stream.seen.values())
                if horizon_ms - oldest >= self.grace_ms:
                    self._uncovered(stream_id, stream)
            if not stream.truncated and stream.expected and stream.partition >= 0:
                proved = event_time_ms.get(stream.partition, 0)
                late = [p for p, (_, at) in stream.expected.items() if proved - at >= self.grace_ms]
                if late := stream.forget_removed(late, self._start.may_have_removed):
                    self._dirty.add(stream_id)
                    stream.truncated = (
                        f"signed position {min(late)} has not arrived "
                        f"{self.grace_ms / 1000:g} s after its checkpoint "
                        f"(the stream is read to position {stream.top})"
                    )

    def _uncovered(self, stream_id: StreamId, stream: StreamTrust) -> None:
        self._dirty.add(stream_id)
        stream.uncovered_late = True
        if not self.keyring.require_signed and stream.signed < 0:
            # Fail closed: an unsigned stream is a finding, unless the keyring allows it.
            if not any(a.allows(stream_id[1], None) for a in self.keyring.allow_unsigned):
                self._found.append(
                    Forgery("unsigned", "no valid checkpoint names the stream", stream_id)
                )
            return
        if self.keyring.require_signed:
            where = (
                f"after its last signed head {stream.signed}"
                if stream.signed >= 0
                else "and no checkpoint names the stream"
            )
            self._forge(
                stream_id,
                stream,
                "uncovered",
                f"{len(stream.seen)} position(s) "
                f"{where}, which no valid checkpoint covers within "
                f"{self.grace_ms / 1000:g} s, and the keyring requires signatures",
            )

    def found(self) -> list[Forgery]:
        """Forgeries found since the last call."""
        out, self._found = self._found, []
        return out

    def by_status(self) -> dict[GaugeState, int]:
        counts: dict[GaugeState, int] = dict.fromkeys(GAUGE_STATES, 0)
        for stream in self.streams.values():
            if stream.partition >= 0 or stream.forged:
                counts[stream.status()] += 1
        counts["signed"] += self.retired_signed
        return counts

    # -- checkpoints of the follower's state --------------------------------------------
    def changed(self) -> bool:
        """Whether anything changed since the last ``checkpoint()``."""
        return bool(self._dirty or self._dirty_producers or self._reader_moved or self._tombstones)

    def checkpoint(self) -> list[tuple[bytes, bytes | None]]:
        scope = self.scope
        records: list[tuple[bytes, bytes | None]] = [
            (trust_stream_key(scope, s), json.dumps(self.streams[s].as_json()).encode())
            for s in sorted(self._dirty)
            if s in self.streams
        ]
        records += [(trust_stream_key(scope, s), None) for s in sorted(self._tombstones)]
        if self._tombstones:  # the count moves with them
            records.append((trust_retired_key(scope), json.dumps(self.retired_signed).encode()))
        records += [
            (trust_producer_key(scope, p), json.dumps(self.producers[p].as_json()).encode())
            for p in sorted(self._dirty_producers)
        ]
        if self._reader_moved:
            records.append(
                (
                    trust_reader_key(scope),
                    json.dumps(
                        {str(p): o for p, o in sorted(self.reader_offsets.items())}
                    ).encode(),
                )
            )
        self._dirty.clear()
        self._dirty_producers.clear()
        self._tombstones.clear()
        self._reader_moved = False
        return records

    def load(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """The trust state from the state topic's records (in log order); records of
        other scopes, and the proof's own, are skipped."""
        for key, value in records:
            parsed = parse_trust_key(key)
            if parsed is None or parsed[0] != self.scope:
                continue
            _, kind, rest = parsed
            if kind == "stream":
                session, producer = json.loads(rest)
                if value is None:
                    self.streams.pop((session, producer), None)
                    self._watch.discard((session, producer))
                else:
                    stream = StreamTrust.from_json(json.loads(value))
                    self.streams[(session, producer)] = stream
                    if stream.signed >= 0:
                        self._signed_sessions.add(session)
                    if stream.seen or stream.expected:
                        self._watch.add((session, producer))
            elif kind == "producer" and value is not None:
                d = json.loads(value)
                named = d.get("s")
                self.producers[rest] = ProducerChain(
                    ChainLink(rest, d["i"], d["d"]),
                    d["f"],
                    None if named is None else frozenset(named),
                )
            elif kind == "reader" and value is not None:
                self.reader_offsets = {int(p): o for p, o in json.loads(value).items()}
            elif kind == "retired" and value is not None:
                self.retired_signed = int(json.loads(value))
