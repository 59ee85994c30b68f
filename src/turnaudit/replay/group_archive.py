"""``replay --archive --group``: each member reads the archive's part of the partitions
Kafka assigns it, then the topic; the group's committed offsets say where a partition is,
in the archive or on the topic, so a member taking a partition over goes on where the
last one committed (no coordinator of our own).

A partition whose next offset the archive holds is read from its segments
(``ArchiveFeed.records``); the consumer is given it at the archive's end (where the topic
takes over), and what it fetches of it meanwhile is dropped and the partition paused.
When the archive's records of it are used up, the consumer is sought back to the
partition's next offset and resumed: no offset twice, none skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol

from turnaudit.archive.reading import ArchiveFeed
from turnaudit.errors import BrokerError
from turnaudit.records import Record


class PausingConsumer(Protocol):
    """What the archive's part asks of the member's consumer (``KafkaConsumer``)."""

    def pause(self, partitions: list[int]) -> None: ...
    def resume(self, partitions: list[int]) -> None: ...
    def seek_each(self, offsets: Mapping[int, int]) -> bool: ...


@dataclass
class ArchivePart:
    """The archive in front of a group member's partitions."""

    feed: ArchiveFeed
    topic: str
    # Per partition being read from the archive: its records still to come.
    reading: dict[int, Iterator[Record]] = field(default_factory=dict)
    # Partitions whose fetched records were dropped while the archive fed them: the
    # consumer is sought back to their next offset when the archive's part is done.
    dropped: set[int] = field(default_factory=set)

    def archived(self, partition: int, at: int) -> bool:
        """Whether the archive feeds ``partition`` at offset ``at``."""
        return self.feed.archived(partition, at)

    def consumer_start(self, partition: int, at: int) -> int:
        """Where the consumer is to start ``partition`` whose next offset is ``at``: the
        archive's end while the archive feeds it."""
        return max(at, self.feed.upto.get(partition, at))

    def read(self, next_at: Mapping[int, int], limit: int) -> list[Record]:
        """Up to ``limit`` archived records of the partitions at ``next_at`` the archive
        feeds, in offset order per partition."""
        got: list[Record] = []
        for p, at in sorted(next_at.items()):
            if len(got) >= limit:
                break
            if not self.feed.archived(p, at):
                self.reading.pop(p, None)
                continue
            records = self.reading.get(p)
            if records is None:
                records = self.reading[p] = iter(self.feed.records(p, at))
            chunk = list(islice(records, limit - len(got)))
            if not chunk:
                raise BrokerError(
                    f"the archive's segments of {self.topic} partition {p} end at offset "
                    f"{at - 1}, their names at {self.feed.upto[p] - 1}: run turnaudit "
                    "archive check"
                )
            got.extend(chunk)
        return got

    def keep_live(self, partition: int, at: int, consumer: PausingConsumer) -> bool:
        """Whether a fetched record of ``partition`` (next offset ``at``) is the topic's
        to take; while the archive feeds the partition it is dropped and the partition
        paused."""
        if not self.feed.archived(partition, at):
            return True
        if partition not in self.dropped:
            self.dropped.add(partition)
            consumer.pause([partition])
        return False

    def hand_over(
        self, next_at: Mapping[int, int], ends: Mapping[int, int], consumer: PausingConsumer
    ) -> None:
        """Partitions whose archive part is done and whose fetched records were dropped:
        the consumer sought back to their next offset and resumed (a partition not
        fetching yet is tried again at the next call); one done at its end (``ends``)
        stays paused."""
        self.dropped -= {p for p in self.dropped if next_at.get(p, 0) >= ends.get(p, 0)}
        done = {
            p: next_at[p]
            for p in sorted(self.dropped)
            if p in next_at and not self.feed.archived(p, next_at[p])
        }
        if done and consumer.seek_each(done):
            consumer.resume(sorted(done))
            self.dropped -= done.keys()

    def forget(self, partitions: set[int]) -> None:
        """Partitions this member holds no more."""
        for p in partitions:
            self.reading.pop(p, None)
            self.dropped.discard(p)
