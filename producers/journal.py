"""The publisher's journal mode: each turn is on disk, fsynced, before it is produced.

Without it, a turn handed to librdkafka is in memory until the broker acknowledges
it, and a killed process loses it. With it (``TURNAUDIT_PUBLISH_JOURNAL=1`` or
``TurnEventPublisher(journal=True)``):

* ``publish()`` appends the encoded turn to the journal and waits for the group
  commit: a background thread writes every turn that arrived while its previous
  fsync ran (plus ``window_s``, default 0: a lone caller is not made to wait for
  company) with one ``write`` and one ``fsync``, then hands them, in journal
  order, to librdkafka or the spool. That wait is the mode's cost.
* Each turn has a ticket (its number in the journal). A delivery report, a turn
  set aside as rejected, or one put in the spool (itself on disk) acknowledges its
  ticket. The journal is written in segments of ``SEGMENT_ENTRIES`` tickets; a
  segment whose every ticket is acknowledged is deleted: the journal is truncated
  up to its acknowledged prefix as it goes. A clean ``close()`` deletes the rest
  (everything left is delivered, spooled or rejected by then).
* Acknowledgements are written too, into their segment, with the next group
  commit's write or, when no turn comes, within ``ACK_FLUSH_S``: after a crash only
  the turns not acknowledged are re-sent, plus at most those acknowledged in the
  last ``ACK_FLUSH_S`` (or since the last commit) before it.
* Should the journal's disk fail, the error is logged and the publisher goes on
  as in the default mode (the turn waiting is handed over without it).
* After a crash the next publisher on the same spool directory (in either mode)
  reads the journals left there and puts their turns in front of the spool, which
  re-sends them. A turn the broker did take but whose acknowledgement never came
  is sent twice: the copy has the same event id and stream position, and readers
  count it once.

The files' records: ``turnaudit.producers.journal_records``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

import structlog

from turnaudit.errors import ConfigurationError, EventRefusedError
from turnaudit.files import private_dir, private_fd
from turnaudit.producers.journal_records import (
    SUFFIX,
    JournalEntry,
    frame,
    frame_acks,
    left_journals,
    recover,
)
from turnaudit.producers.ordering import in_stream_order
from turnaudit.producers.spool import SpooledMessage, open_spool

log = structlog.get_logger("turnaudit.publisher")

JOURNAL_ENV = "TURNAUDIT_PUBLISH_JOURNAL"
GROUP_WINDOW_S = 0.0  # extra wait for more turns to share a commit's fsync
SEGMENT_ENTRIES = 4096
# Acknowledgements wait at most this long for a group commit to carry them to disk.
ACK_FLUSH_S = 0.1


def journal_from_env(default: bool = False) -> bool:
    """``TURNAUDIT_PUBLISH_JOURNAL``: 1/true/yes/on or 0/false/no/off (unset: ``default``)."""
    raw = os.environ.get(JOURNAL_ENV, "").strip().lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ConfigurationError(f"{JOURNAL_ENV}={raw!r}: expected 1 or 0")


class _Pending:
    """Turns appended but not yet committed: one buffer, handed over as a group."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.entries: list[tuple[int, JournalEntry]] = []


class Journal:
    """One publisher's journal: group commit, acknowledgement, segment truncation."""

    def __init__(
        self,
        directory: Path,
        producer_id: str,
        hand_over: Callable[[list[tuple[int, JournalEntry]]], None],
        *,
        window_s: float = GROUP_WINDOW_S,
        segment_entries: int = SEGMENT_ENTRIES,
    ) -> None:
        self.directory = private_dir(directory)
        self._name = producer_id
        self._hand_over = hand_over  # called after each fsync, in ticket order
        self._window_s = window_s
        self._segment_entries = segment_entries
        self._cond = threading.Condition()
        self._pending = _Pending()
        self._next_ticket = 0
        self.committed = 0  # tickets below this are fsynced and handed over
        self.commits = 0  # fsyncs done (each a group of turns)
        self._acked: dict[int, int] = {}  # segment -> acknowledged tickets in it
        self._unsaved: dict[int, list[int]] = {}  # segment -> acknowledged, not yet on disk
        self._fd: int | None = None
        self._fd_segment = -1
        self._closed = False
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="turnaudit-journal", daemon=True)
        self._thread.start()

    # -- publish() ------------------------------------------------------------------
    def append(self, entry: JournalEntry) -> int | None:
        """Queue ``entry`` for the next group commit; its ticket (None: closed)."""
        with self._cond:
            if self._closed or self._error is not None:  # the caller goes on without it
                return None
            ticket = self._next_ticket
            self._next_ticket += 1
            self._pending.frames.append(frame(entry))
            self._pending.entries.append((ticket, entry))
            self._cond.notify_all()
            return ticket

    def wait(self, ticket: int) -> None:
        """Until ``ticket`` is fsynced and handed over (raises the commit's OSError)."""
        with self._cond:
            while self.committed <= ticket:
                if self._error is not None:
                    raise self._error
                self._cond.wait(1.0)

    # -- acknowledgements (delivery reports, the spool) -----------------------------
    def ack(self, ticket: int) -> None:
        segment, index = divmod(ticket, self._segment_entries)
        with self._cond:
            done = self._acked.get(segment, 0) + 1
            self._acked[segment] = done
            full = done >= self._segment_entries and segment != self._fd_segment
            if not full:  # written with the next commit (a deleted segment needs none)
                if not self._unsaved:
                    self._cond.notify_all()  # the committer's idle wait gets a deadline
                self._unsaved.setdefault(segment, []).append(index)
        if full:
            self._drop(segment)

    def _drop(self, segment: int) -> None:
        with self._cond:
            self._acked.pop(segment, None)
            self._unsaved.pop(segment, None)
        try:
            self._path(segment).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("journal_segment_not_deleted", segment=segment, error=str(exc))

    # -- the committer ---------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending.entries and not self._closed:
                    if self._unsaved:  # no commit to carry them: written within ACK_FLUSH_S
                        if not self._cond.wait(ACK_FLUSH_S) and not self._pending.entries:
                            break
                    else:
                        self._cond.wait()
                if not self._pending.entries and self._closed:
                    return
            if self._pending.entries and self._window_s > 0:  # turns meanwhile share the fsync
                threading.Event().wait(self._window_s)
            with self._cond:
                group, self._pending = self._pending, _Pending()
                acks, self._unsaved = self._unsaved, {}
            try:
                if not group.entries:
                    self._write_acks(acks)
                    continue
                self._write(group, acks)
            except OSError as exc:
                log.critical("journal_write_failed", error=str(exc))
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return
            self._hand_over(group.entries)
            with self._cond:
                self.committed = group.entries[-1][0] + 1
                self.commits += 1
                self._cond.notify_all()

    def _write(self, group: _Pending, acks: dict[int, list[int]]) -> None:
        # One write and one fsync per segment the group touches (almost always one),
        # carrying that segment's acknowledgements; others' go to their own segments.
        by_segment: dict[int, list[bytes]] = {}
        for (ticket, _), data in zip(group.entries, group.frames, strict=True):
            by_segment.setdefault(ticket // self._segment_entries, []).append(data)
        for segment, frames in by_segment.items():
            if segment in acks:
                frames.insert(0, frame_acks(acks.pop(segment)))
        self._write_acks(acks)
        for segment, frames in by_segment.items():
            fd = self._segment_fd(segment)
            size = os.fstat(fd).st_size
            view = memoryview(b"".join(frames))
            try:
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            except OSError:
                # A part-written group (disk full) is cut back: the journal keeps
                # whole records only, whatever is appended after.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise

    def _write_acks(self, acks: dict[int, list[int]]) -> None:
        """Acknowledgements into their segments (one write and fsync each). A segment
        already deleted (all acknowledged) needs none: it is not created again."""
        for segment, indexes in acks.items():
            record = frame_acks(indexes)
            if segment == self._fd_segment and self._fd is not None:
                os.write(self._fd, record)
                os.fsync(self._fd)
                continue
            try:
                fd = os.open(self._path(segment), os.O_WRONLY | os.O_APPEND)
            except FileNotFoundError:
                continue
            try:
                os.write(fd, record)
                os.fsync(fd)
            finally:
                os.close(fd)

    def _segment_fd(self, segment: int) -> int:
        if self._fd is not None and self._fd_segment == segment:
            return self._fd
        previous = self._fd_segment
        if self._fd is not None:
            os.close(self._fd)
        self._fd = private_fd(self._path(segment), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        with self._cond:
            self._fd_segment = segment
            full = previous >= 0 and self._acked.get(previous, 0) >= self._segment_entries
        if full:  # every ticket of the one just left was acknowledged already
            self._drop(previous)
        return self._fd

    def _path(self, segment: int) -> Path:
        return self.directory / f"{self._name}-{segment:010d}{SUFFIX}"

    def own_files(self) -> Iterator[Path]:
        return (p for p in left_journals(self.directory) if p.name.startswith(self._name + "-"))

    # -- close -------------------------------------------------------------------------
    def close(self) -> None:
        """Commit and hand over what is pending, then stop the committer."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        """Delete this publisher's journal: everything in it is delivered, spooled or
        rejected (after ``close``)."""
        for path in self.own_files():
            path.unlink(missing_ok=True)


def recover_journal(
    spool_dir: Path, spool_max_bytes: int, topic: str, position: Callable[[bytes], int | None]
) -> int:
    """Put the turns of the journals left in ``<spool_dir>/journal`` in front of the
    spool (they were in a crashed publisher's client queue: older than anything it
    spooled), then delete those journals; the count recovered. A turn that was
    delivered after all is re-sent: same event id, counted once by readers."""
    entries, files = recover(spool_dir / "journal")
    if not files:
        return 0
    spool = open_spool(spool_dir, spool_max_bytes)
    try:
        messages = [SpooledMessage(e.topic, e.key, e.value) for e in entries]
        spool.requeue_front(in_stream_order(messages, topic, position))
    finally:
        spool.close()
    for path in files:  # only once the spool holds them (requeue_front fsyncs)
        path.unlink(missing_ok=True)
    log.warning("journal_recovered", turns=len(entries), files=len(files))
    return len(entries)


Turn = TypeVar("Turn")
# The publisher's hand-over of a committed turn (under its lock): its refusal, if any.
HandOver = Callable[[Turn, bytes, bytes, "int | None"], "EventRefusedError | None"]


class JournalMode(Generic[Turn]):
    """The publisher's side of journal mode: ``publish()`` appends a turn and waits
    for its group commit; the committer thread hands committed turns over in
    journal order (``hand_over``, under ``lock``); a turn leaves the journal once it
    is dealt with (delivered, set aside, spooled or refused)."""

    def __init__(
        self, directory: Path, producer_id: str, hand_over: HandOver[Turn], lock: threading.Lock
    ) -> None:
        self._hand_over = hand_over
        self._lock = lock
        # Appended, not yet committed (under lock): the turn and its entry.
        self._waiting: dict[int, tuple[Turn, JournalEntry]] = {}
        self._refusals: dict[int, EventRefusedError] = {}  # committed and refused
        self.journal = Journal(directory, producer_id, self._committed)

    def append(self, entry: JournalEntry, turn: Turn) -> int | None:
        """Under ``lock``: the turn's ticket, or None when the journal takes no more (closed,
        or its disk failed). Then what still waits for a commit is handed over first, so the
        caller's own hand-over follows it (a data key record ahead of its turns:
        turnaudit.producers.key_records)."""
        ticket = self.journal.append(entry)
        if ticket is not None:
            self._waiting[ticket] = (turn, entry)
        else:
            self._hand_over_waiting(before=None)
        return ticket

    def _hand_over_waiting(self, before: int | None) -> None:
        """Under ``lock``: the turns appended and not committed (those before ``before``),
        handed over without the journal, in journal order; their refusals kept for their
        waiters."""
        for earlier in sorted(t for t in self._waiting if before is None or t < before):
            turn, entry = self._waiting.pop(earlier)
            refusal = self._hand_over(turn, entry.key, entry.value, None)
            if refusal is not None:
                self._refusals[earlier] = refusal

    def ack(self, ticket: int | None) -> None:
        if ticket is not None:
            self.journal.ack(ticket)

    def reported(self, ticket: int, purged: bool) -> None:
        # Delivered, or set aside in rejected/; a purged one goes back to the
        # spool, and the journal keeps it until then (a crash re-sends it).
        if not purged:
            self.ack(ticket)

    def _committed(self, entries: list[tuple[int, JournalEntry]]) -> None:
        """A group commit's turns, fsynced: handed over in journal order (committer thread)."""
        with self._lock:
            for ticket, entry in entries:
                waiting = self._waiting.pop(ticket, None)
                if waiting is None:
                    continue  # handed over already, when the journal closed meanwhile
                refusal = self._hand_over(waiting[0], entry.key, entry.value, ticket)
                if refusal is not None:
                    self._refusals[ticket] = refusal

    def wait(self, ticket: int, key: bytes, value: bytes) -> EventRefusedError | None:
        """Until the turn is committed and handed over: its refusal, if any."""
        try:
            self.journal.wait(ticket)
        except OSError as exc:
            # The journal's disk failed: the turn is handed over without it (the
            # mode's promise is gone for it, the default mode's still holds).
            log.error("journal_failed_publishing_without", error=str(exc))
            with self._lock:
                # Everything appended before it first, in journal order (a data key record
                # ahead of its turns: turnaudit.producers.key_records).
                self._hand_over_waiting(before=ticket)
                waiting = self._waiting.pop(ticket, None)
                if waiting is None:
                    return self._refusals.pop(ticket, None)
                return self._hand_over(waiting[0], key, value, None)
        with self._lock:
            return self._refusals.pop(ticket, None)

    def close(self) -> None:
        self.journal.close()

    def discard(self) -> None:
        self.journal.discard()
