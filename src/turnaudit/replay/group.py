"""Several replay processes sharing one range through Kafka: a consumer group of their own.

The processes (same arguments and group name, each its own output) join the
consumer group ``<prefix>replay.NAME`` (``turnaudit.kafka.groups``: the
reconciler's namespace, which no live service's group falls under). Kafka
assigns the partitions; on assignment a member starts each partition at the
group's committed offset, or, for a partition no member has held yet, at the
range's start, and records that partition's bound (start and end, as resolved
by that first member) in the commit's metadata, so every member stops at the
same bound. Offsets are committed at every checkpoint, when a partition's
range is done and when a partition is taken away, always after the output is
durable. A member exits once every partition of the range is committed at its
end. No coordinator of our own: the group protocol and the committed offsets
are Kafka's.

Each member's output holds the messages it read, per partition by offset,
partitions interleaved as they arrived; merged and ordered by (partition,
offset), the outputs hold every message of the range once. If a member is
killed, the messages it wrote after its last commit are read again by the
member that takes its partitions over (duplicates, never a loss); a member
restarted on the same output cuts it back to its last checkpoint.

With ``--archive``, a member reads the archive's part of the partitions it is assigned
first (``turnaudit.replay.group_archive``), then the topic; the committed offsets may lie
in the archive, and a member taking a partition over goes on from them there.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from turnaudit.archive.reading import ArchivedMessage, ArchiveFeed
from turnaudit.errors import BrokerError, ConfigurationError
from turnaudit.kafka.admin import GroupAdmin
from turnaudit.kafka.consumer import KafkaConsumer
from turnaudit.kafka.groups import replay_group_id
from turnaudit.records import Record
from turnaudit.replay.archived import archive_feed
from turnaudit.replay.checkpoint import ReplayCheckpoint
from turnaudit.replay.group_archive import ArchivePart
from turnaudit.replay.outputs import ReplayOutput
from turnaudit.replay.reader import READER_CONFIG
from turnaudit.replay.request import ReplayRequest, ReplayTarget
from turnaudit.replay.run import (
    BatchHook,
    Outputs,
    Prologue,
    ReplaySummary,
    closing,
    in_window,
)
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

_BOUND_TAG = "turnaudit-replay/1"


def group_id(prefix: str, name: str) -> str:
    """The consumer group of ``replay --group NAME``; ``ConfigurationError`` for a
    name that cannot be one."""
    if not name or any(c.isspace() for c in name):
        raise ConfigurationError(f"--group {name!r}: a name without spaces")
    return replay_group_id(prefix, name)


def bound_metadata(fingerprint: str, start: int, end: int) -> str:
    """The commit metadata recording a partition's bound for the group."""
    return f"{_BOUND_TAG} {fingerprint[:16]} {start} {end}"


def parse_bound(metadata: str | None) -> tuple[str, int, int] | None:
    """(fingerprint prefix, start, end) of :func:`bound_metadata`; None for anything else."""
    parts = (metadata or "").split()
    if len(parts) != 4 or parts[0] != _BOUND_TAG:
        return None
    return parts[1], int(parts[2]), int(parts[3])


class GroupMember:
    """One process of a replay group: Kafka assigns it partitions, the group's committed
    offsets carry each partition's recorded bound (``start end`` in the commit metadata).
    The consumer's ``RebalanceListener``."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        group: str,
        own: ReplayCheckpoint,
        output: ReplayOutput,
        local: ReplayCheckpoint,
        checkpoint: Path,
        members: int = 1,
        archive: ArchiveFeed | None = None,
    ) -> None:
        self.topic = own.topic
        # --archive: the archive's part of the partitions this member holds.
        self.archive = None if archive is None else ArchivePart(archive, own.topic)
        self.own = own
        self.output = output
        self.local = local
        self.checkpoint = checkpoint
        self.group = group_id(settings.topics.prefix, group)
        self.bounds: dict[int, tuple[int, int]] = {}
        self.next: dict[int, int] = {}
        self.error: str | None = None
        self.closing = False
        # Reading starts once the group is stable with this many members.
        self.members = members
        self.started = members <= 1
        # Assigned before the group is complete: where each partition will start.
        self.waiting: dict[int, int] = {}
        self.admin = GroupAdmin(settings)
        self.consumer = KafkaConsumer(
            settings,
            self.topic,
            READER_CONFIG,
            group_id=self.group,
            fixed={
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "range",
                # A member joining is noticed by the others at their next heartbeat: the
                # default 3 s would be most of a short replay's time.
                "heartbeat.interval.ms": 250,
            },
        )

    def subscribe(self) -> None:
        self.consumer.subscribe_assigning(self)

    # -- RebalanceListener -----------------------------------------------------------------
    def assigned(self, partitions: list[int]) -> Mapping[int, int]:
        """The partitions to read and where from: the group's committed offset, or the
        range's start for a partition no member has held (its bound recorded now)."""
        if self.closing:
            return {}
        fingerprint = self.own.fingerprint
        record = {}
        for p, found in self.consumer.committed(partitions, timeout=30).items():
            bound = parse_bound(found.metadata)
            if bound is not None:
                if bound[0] != fingerprint[:16]:
                    self.error = (
                        f"replay group {self.group} is replaying a range with other "
                        "arguments; use another --group name"
                    )
                    continue
                self.bounds[p] = (bound[1], bound[2])
                self.next[p] = max(found.offset, bound[1])
            elif p in self.own.end:
                self.bounds[p] = (self.own.start[p], self.own.end[p])
                self.next[p] = record[p] = self.own.start[p]
        if record:  # the first member to hold a partition records its bound for the group
            self._commit(record)
        assigned = {p: self.next[p] for p in sorted(self.next) if self.next[p] < self.bounds[p][1]}
        starts = self._consumer_starts(assigned)
        if not self.started:
            # Nothing is read before the group is complete: messages fetched meanwhile
            # are dropped (take() skips partitions not in ``next``) and each partition
            # is sought back to its start when reading begins.
            self.waiting.update(assigned)
            self.next.clear()
        return starts

    def _consumer_starts(self, at: Mapping[int, int]) -> dict[int, int]:
        """Where the consumer starts each partition: its next offset, or the archive's
        end while the archive feeds it."""
        part = self.archive
        return {p: o if part is None else part.consumer_start(p, o) for p, o in at.items()}

    def revoked(self, partitions: set[int]) -> None:
        if not self.closing:  # a closing member has committed already
            self.commit()
        self._forget(partitions)

    def lost(self, partitions: set[int]) -> None:
        self._forget(partitions)  # another member holds them now: committing would be wrong

    def _forget(self, partitions: set[int]) -> None:
        for p in partitions:
            self.next.pop(p, None)
            self.waiting.pop(p, None)
        if self.archive is not None:
            self.archive.forget(partitions)

    # -- reading and committing --------------------------------------------------------------
    def start_when_joined(self) -> None:
        """Begin reading once the group is stable with ``members`` members."""
        found = self.admin.describe_group(self.group, timeout=30)
        if not found.stable or found.members < self.members:
            return
        if not self.consumer.seek_each(self._consumer_starts(self.waiting)):
            return  # a partition not fetching yet cannot be sought: next check
        self.next.update(self.waiting)
        self.waiting.clear()
        self.started = True

    def commit(self) -> None:
        """Output durable, then the local position, then the group's offsets: a crash in
        between repeats messages (at-least-once), never loses one."""
        self.local.output_bytes = self.output.sync()
        self.local.save(self.checkpoint)
        if self.next:
            self._commit(dict(sorted(self.next.items())))

    def _commit(self, offsets: dict[int, int]) -> None:
        """Commit now; during a rebalance the broker refuses, and the revocation that
        follows commits the same offsets (or, if the partitions are lost, the next
        owner reads those messages again)."""
        fingerprint = self.own.fingerprint
        self.consumer.commit_unless_rebalancing(
            offsets, {p: bound_metadata(fingerprint, *self.bounds[p]) for p in offsets}
        )

    def run(
        self,
        decode: TurnEventDeserializer,
        *,
        batch_size: int,
        timeout: float,
        after_batch: BatchHook | None,
        checkpoint_every: int,
        checkpoint_seconds: float,
    ) -> None:
        """Read what Kafka assigns until every partition of the range is done."""
        local = self.local
        since_sync, synced_at, checked_at, asked_at = 0, time.monotonic(), 0.0, 0.0
        last_message = time.monotonic()
        while True:
            # The archive's records first; the consumer polled either way (the group's
            # heartbeats and rebalances), what it fetches of an archived partition dropped.
            archived = self._archived(batch_size)
            got = archived + self.consumer.consume(batch_size, 0.0 if archived else 0.2)
            if self.error is not None:
                raise ConfigurationError(self.error)
            batch, finished = self.take(got)
            if got:
                last_message = time.monotonic()
            kept = in_window(decode, batch, local)
            if kept:
                local.undecodable += self.output.write(kept)
                local.events += len(kept)
                since_sync += len(kept)
            # The partitions this member has read (its summary's range).
            local.start.update({p: self.bounds[p][0] for p in self.next})
            local.end.update({p: self.bounds[p][1] for p in self.next})
            local.next.update({p: max(o, local.next.get(p, 0)) for p, o in self.next.items()})
            if kept and after_batch is not None:
                after_batch(local)
            now = time.monotonic()
            if finished or since_sync >= checkpoint_every or now - synced_at >= checkpoint_seconds:
                self.commit()
                since_sync, synced_at = 0, now
            if not self.started:
                if now - asked_at >= 0.25:
                    asked_at = now
                    self.start_when_joined()
                last_message = now
            elif not got and now - checked_at >= 0.25:
                checked_at = now
                if self.range_done():
                    return
                if now - last_message > timeout and any(
                    self.next[p] < self.bounds[p][1] for p in self.next
                ):
                    raise BrokerError(
                        f"no message of {self.topic} for {timeout:.0f} s in "
                        f"replay group {self.group}"
                    )

    def _archived(self, batch_size: int) -> list[Record]:
        """The archive's next records of the partitions it feeds (none once it feeds none:
        the partitions it fed go on from the topic)."""
        part = self.archive
        if part is None or not self.started:
            return []
        got = part.read(self.next, batch_size)
        if not got:
            ends = {p: bound[1] for p, bound in self.bounds.items()}
            part.hand_over(self.next, ends, self.consumer)
        return got

    def take(self, got: Sequence[Record]) -> tuple[list[Record], bool]:
        """The messages of the range (and whether one finished a partition)."""
        batch = []
        finished = []
        part = self.archive
        for msg in got:
            p, offset = msg.partition(), msg.offset()
            if p is None or offset is None or p not in self.next:
                continue
            if (
                part is not None
                and not isinstance(msg, ArchivedMessage)
                and not part.keep_live(p, self.next[p], self.consumer)
            ):
                continue
            end = self.bounds[p][1]
            if offset < self.next[p] or offset >= end:
                continue
            batch.append(msg)
            self.next[p] = offset + 1
            if self.next[p] >= end:
                finished.append(p)
        if finished:
            self.consumer.pause(finished)
        return batch, bool(finished)

    def range_done(self) -> bool:
        """Every partition of the range committed at its recorded end, by any member."""
        found = self.consumer.committed(sorted(self.own.end), timeout=30)
        for committed in found.values():
            bound = parse_bound(committed.metadata)
            if bound is None or committed.offset < bound[2]:
                return False
        return True


def replay_group(
    settings: KafkaSettings,
    decode: TurnEventDeserializer,
    request: ReplayRequest,
    target: ReplayTarget,
    *,
    group: str,
    batch_size: int = 500,
    timeout: float = 300.0,
    after_batch: BatchHook | None = None,
    outputs: Outputs | None = None,
    checkpoint_every: int = 50_000,
    checkpoint_seconds: float = 5.0,
    members: int = 1,
) -> ReplaySummary:
    """One of several processes sharing the range of ``request`` through Kafka (see the
    module doc).

    ``members``: read nothing until the group is stable with that many
    members, so the range is split between them from the start. Only
    resumable outputs (``jsonl``, ``logs``, ``topic``): a whole-range output
    is computed in one process.
    """
    group_id(settings.topics.prefix, group)  # a bad name fails before any work
    run = Prologue.of(
        settings,
        decode,
        request,
        target,
        outputs,
        batch_size=batch_size,
        checkpoint_every=checkpoint_every,
    )
    own = run.resolve(timeout)
    feed = (
        None
        if request.archive is None
        else archive_feed(settings, request.archive, own, timeout)  # a gap: before output
    )
    local = run.recorded or ReplayCheckpoint(
        run.fingerprint, run.topic, {}, {}, {}, 0, 0, 0, window=own.window
    )
    output = run.build(own.start, own.end)
    if not output.resumable:
        output.close()
        raise ConfigurationError(
            f"--group: a {target.kind} output is computed over the whole range in one "
            "process; share a range with jsonl, logs or topic outputs"
        )
    member = GroupMember(
        settings,
        group=group,
        own=own,
        output=output,
        local=local,
        checkpoint=target.checkpoint,
        members=members,
        archive=feed,
    )
    with closing(output):
        try:
            output.open(local.output_bytes)
            member.subscribe()
            member.run(
                decode,
                batch_size=batch_size,
                timeout=timeout,
                after_batch=after_batch,
                checkpoint_every=checkpoint_every,
                checkpoint_seconds=checkpoint_seconds,
            )
            member.commit()
            return run.conclude(output, local)
        finally:
            member.closing = True
            member.consumer.close()
