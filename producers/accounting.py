"""Where every event handed to the publisher is: the counts and what they promise.

``Ledger`` moves an event between places (librdkafka's queue, the spool,
delivered, refused, failed) one step at a time; each step keeps the sum
``published + inherited == delivered + in_flight + spooled + refused + failed``.
``PublisherStats`` is a snapshot of it, ``CloseReport`` what ``close()`` says.

Every step but ``delivered`` is taken under ``lock``; ``delivered`` has one
writer (the thread serving delivery reports) and is read once per snapshot.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PublisherStats:
    """Where every event handed to ``publish()`` is now.

    ``published + inherited == delivered + in_flight + spooled + refused + failed``.
    """

    published: int  # publish() calls that got an event id and sequence number
    delivered: int  # acknowledged by the broker (from delivery reports)
    failed: int  # refused by the broker for good (kept in <spool_dir>/rejected)
    spooled: int  # on disk, waiting for the broker
    in_flight: int  # in librdkafka's queue, not yet acknowledged
    refused: int = 0  # not accepted by publish(): spool full or its disk failing
    inherited: int = 0  # found in the spool when the publisher opened it
    dead_lettered: int = 0  # sent to the dead-letter topic by dead_letter()
    spool_bytes: int = 0
    oldest_spooled_age_s: float = 0.0
    worker_errors: int = 0  # unexpected errors the background thread survived

    @property
    def balanced(self) -> bool:
        counts = (
            self.published,
            self.delivered,
            self.failed,
            self.spooled,
            self.in_flight,
            self.refused,
            self.inherited,
        )
        return min(counts) >= 0 and self.published + self.inherited == (
            self.delivered + self.in_flight + self.spooled + self.refused + self.failed
        )


@dataclass(frozen=True, slots=True)
class CloseReport:
    delivered: int
    undelivered: int  # left in the spool for the next publisher
    failed: int  # refused by the broker for good; kept in <spool_dir>/rejected
    spool_dir: str
    refused: int = 0  # not accepted by publish(): spool full or its disk failing
    lost: int = 0  # could be neither delivered nor put back on disk at close

    @property
    def ok(self) -> bool:
        return not (self.undelivered or self.failed or self.refused or self.lost)

    def describe(self) -> str:
        return (
            f"{self.delivered} delivered, {self.undelivered} waiting in the spool "
            f"({self.spool_dir}), {self.refused} refused, {self.failed} failed, {self.lost} lost"
        )


class Ledger:
    """The publisher's counts of turn events (dead letters are not events of the stream)."""

    def __init__(self, inherited: int = 0) -> None:
        self.lock = threading.Lock()
        self.published = 0
        self.inherited = inherited
        self.spooled = inherited  # on disk now
        self.spooled_total = 0  # that went to the spool since the start
        self.produced = 0  # handed to librdkafka (directly or drained from the spool)
        self.delivered = 0  # one writer: the thread serving delivery reports
        self.failed_in_client = 0  # refused for good by the broker
        self.purged = 0  # taken back out of librdkafka at close, into the spool
        self.lost = 0  # could not be put back on disk at close
        self.refused_by_reason: dict[str, int] = {}
        self.dead_lettered = 0
        self.worker_errors = 0
        self.aged_out = 0  # purged from librdkafka for age (max_unacked_s), into the spool
        # When each event still in librdkafka was handed to it (monotonic s), in
        # hand-over order; one is taken off per report. Under a hung broker this
        # is exact; with some partitions answering, the head is an estimate of
        # the oldest unacknowledged event (reports are not in hand-over order
        # across partitions).
        self.handed_at: deque[float] = deque()

    # -- steps (under ``lock``, except ``delivered``) ---------------------------------
    def to_client(self) -> None:
        """publish(): handed to librdkafka."""
        self.published += 1
        self.produced += 1
        self.handed_at.append(time.monotonic())

    def reported(self) -> None:
        """librdkafka reported an event handed to it (delivered, failed or purged)."""
        if self.handed_at:
            self.handed_at.popleft()  # deque.popleft is atomic: no lock needed

    def oldest_unacked_age(self, now: float) -> float:
        """Seconds since the oldest event still in librdkafka was handed to it."""
        try:
            return max(0.0, now - self.handed_at[0])
        except IndexError:
            return 0.0

    def to_spool(self) -> None:
        """publish(): appended to the spool."""
        self.published += 1
        self.spooled += 1
        self.spooled_total += 1

    def refuse(self, reason: str) -> None:
        """publish(): neither sent nor spooled."""
        self.published += 1
        self.refused_by_reason[reason] = self.refused_by_reason.get(reason, 0) + 1

    def drained(self) -> None:
        """A spooled event handed to librdkafka (it stays on disk until reported)."""
        self.spooled -= 1
        self.produced += 1
        self.handed_at.append(time.monotonic())

    def failed(self) -> None:
        """librdkafka reported an event refused for good (kept in rejected/)."""
        self.failed_in_client += 1

    def purged_back(self) -> None:
        """An event taken back from librdkafka at close, for the spool."""
        self.purged += 1
        self.spooled += 1

    def lose(self, count: int) -> None:
        """Events meant for the spool at close that the disk did not take."""
        self.spooled -= count
        self.lost += count

    # -- reading ----------------------------------------------------------------------
    @property
    def refused(self) -> int:
        return sum(self.refused_by_reason.values())

    def snapshot(
        self, *, spool_bytes: int = 0, oldest_appended_at: float | None = None
    ) -> PublisherStats:
        """Call under ``lock``."""
        delivered = self.delivered  # read once: it moves without the lock
        failed = self.failed_in_client + self.lost
        return PublisherStats(
            published=self.published,
            delivered=delivered,
            failed=failed,
            spooled=self.spooled,
            in_flight=self.produced - delivered - self.failed_in_client - self.purged,
            refused=self.refused,
            inherited=self.inherited,
            dead_lettered=self.dead_lettered,
            spool_bytes=spool_bytes,
            oldest_spooled_age_s=0.0
            if oldest_appended_at is None
            else max(0.0, time.time() - oldest_appended_at),
            worker_errors=self.worker_errors,
        )
