"""Several replay processes sharing one range through Kafka: a consumer group of their own.

The processes (same arguments and group name, each its own output) join the
consumer group ``turnaudit-replay.NAME``, which no live service uses. Kafka
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
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from turnaudit.errors import BrokerError, ConfigurationError
from turnaudit.replay import (
    GROUP_PREFIX,
    READER_CONFIG,
    BatchHook,
    OutputContext,
    OutputFactory,
    OutputKinds,
    ReplayCheckpoint,
    ReplayOutput,
    ReplayRequest,
    ReplaySummary,
    ReplayTarget,
    in_window,
    new_state,
    output_factory,
)
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

_BOUND_TAG = "turnaudit-replay/1"
_REBALANCING = frozenset({
    KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID, KafkaError._DESTROY,
})


def _bound_metadata(fingerprint: str, start: int, end: int) -> str:
    return f"{_BOUND_TAG} {fingerprint[:16]} {start} {end}"


def _parse_bound(metadata: str | None) -> tuple[str, int, int] | None:
    parts = (metadata or "").split()
    if len(parts) != 4 or parts[0] != _BOUND_TAG:
        return None
    return parts[1], int(parts[2]), int(parts[3])


class _GroupMember:
    """One process of a replay group: Kafka assigns it partitions, the group's committed
    offsets carry each partition's recorded bound (``start end`` in the commit metadata)."""

    def __init__(self, settings: KafkaSettings, *, group: str, own: ReplayCheckpoint,
                 output: ReplayOutput, local: ReplayCheckpoint, checkpoint: Path,
                 members: int = 1) -> None:
        self.topic = own.topic
        self.own = own
        self.output = output
        self.local = local
        self.checkpoint = checkpoint
        self.group = GROUP_PREFIX + group
        self.bounds: dict[int, tuple[int, int]] = {}
        self.next: dict[int, int] = {}
        self.error: str | None = None
        self.closing = False
        # Reading starts once the group is stable with this many members.
        self.members = members
        self.started = members <= 1
        # Assigned before the group is complete: where each partition will start.
        self.waiting: dict[int, int] = {}
        self.admin = AdminClient(settings.client_config({"log_level": 0}))
        self.consumer = Consumer(settings.client_config(READER_CONFIG, **{
            "group.id": self.group, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range",
            # A member joining is noticed by the others at their next heartbeat: the
            # default 3 s would be most of a short replay's time.
            "heartbeat.interval.ms": 250,
        }))

    def subscribe(self) -> None:
        self.consumer.subscribe([self.topic], on_assign=self._assigned,
                                on_revoke=self._revoked, on_lost=self._lost)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.closing:
            return
        fingerprint = self.own.fingerprint
        found = consumer.committed(partitions, timeout=30)
        record = []
        for tp in found:
            p = tp.partition
            bound = _parse_bound(tp.metadata)
            if bound is not None:
                if bound[0] != fingerprint[:16]:
                    self.error = (f"replay group {self.group} is replaying a range with other "
                                  "arguments; use another --group name")
                    continue
                self.bounds[p] = (bound[1], bound[2])
                self.next[p] = max(tp.offset, bound[1])
            elif p in self.own.end:
                self.bounds[p] = (self.own.start[p], self.own.end[p])
                self.next[p] = self.own.start[p]
                record.append(TopicPartition(self.topic, p, self.own.start[p],
                                             metadata=_bound_metadata(fingerprint,
                                                                      *self.bounds[p])))
        if record:  # the first member to hold a partition records its bound for the group
            self._commit(record)
        assigned = [TopicPartition(self.topic, p, self.next[p])
                    for p in sorted(self.next) if self.next[p] < self.bounds[p][1]]
        consumer.assign(assigned)
        if not self.started:
            # Nothing is read before the group is complete: messages fetched meanwhile
            # are dropped (take() skips partitions not in ``next``) and each partition
            # is sought back to its start when reading begins.
            self.waiting.update({tp.partition: tp.offset for tp in assigned})
            self.next.clear()

    def start_when_joined(self) -> None:
        """Begin reading once the group is stable with ``members`` members."""
        found = self.admin.describe_consumer_groups([self.group])[self.group].result(30)
        if found.state is not ConsumerGroupState.STABLE or len(found.members) < self.members:
            return
        try:
            for p, offset in self.waiting.items():
                self.consumer.seek(TopicPartition(self.topic, p, offset))
        except KafkaException:
            return  # a partition not fetching yet cannot be sought: next check
        self.next.update(self.waiting)
        self.waiting.clear()
        self.started = True

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not self.closing:  # a closing member has committed already
            self.commit()
        for tp in partitions:
            self.next.pop(tp.partition, None)
            self.waiting.pop(tp.partition, None)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:  # another member holds them now: committing would be wrong
            self.next.pop(tp.partition, None)
            self.waiting.pop(tp.partition, None)

    def commit(self) -> None:
        """Output durable, then the local position, then the group's offsets: a crash in
        between repeats messages (at-least-once), never loses one."""
        self.local.output_bytes = self.output.sync()
        self.local.save(self.checkpoint)
        held = [TopicPartition(self.topic, p, o, metadata=_bound_metadata(
                    self.own.fingerprint, *self.bounds[p])) for p, o in sorted(self.next.items())]
        if held:
            self._commit(held)

    def _commit(self, offsets: list[TopicPartition]) -> None:
        """Commit now; during a rebalance the broker refuses, and the revocation that
        follows commits the same offsets (or, if the partitions are lost, the next
        owner reads those messages again)."""
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() not in _REBALANCING:
                raise

    def run(self, decode: TurnEventDeserializer, *, batch_size: int, timeout: float,
            after_batch: BatchHook | None, checkpoint_every: int,
            checkpoint_seconds: float) -> None:
        """Read what Kafka assigns until every partition of the range is done."""
        local = self.local
        since_sync, synced_at, checked_at, asked_at = 0, time.monotonic(), 0.0, 0.0
        last_message = time.monotonic()
        while True:
            got = self.consumer.consume(num_messages=batch_size, timeout=0.2)
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
                        self.next[p] < self.bounds[p][1] for p in self.next):
                    raise BrokerError(f"no message of {self.topic} for {timeout:.0f} s in "
                                      f"replay group {self.group}")

    def take(self, got: Sequence[Message]) -> tuple[list[Message], bool]:
        """The messages of the range (and whether one finished a partition)."""
        batch = []
        finished = []
        for msg in got:
            if msg.error() is not None:
                raise BrokerError(f"reading {self.topic}: {msg.error()}")
            p, offset = msg.partition(), msg.offset()
            if p is None or offset is None or p not in self.next:
                continue
            end = self.bounds[p][1]
            if offset < self.next[p] or offset >= end:
                continue
            batch.append(msg)
            self.next[p] = offset + 1
            if self.next[p] >= end:
                finished.append(TopicPartition(self.topic, p))
        if finished:
            self.consumer.pause(finished)
        return batch, bool(finished)

    def range_done(self) -> bool:
        """Every partition of the range committed at its recorded end, by any member."""
        found = self.consumer.committed(
            [TopicPartition(self.topic, p) for p in sorted(self.own.end)], timeout=30)
        for tp in found:
            bound = _parse_bound(tp.metadata)
            if bound is None or tp.offset < bound[2]:
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
    outputs: Mapping[str, OutputFactory] | OutputKinds | None = None,
    checkpoint_every: int = 50_000,
    checkpoint_seconds: float = 5.0,
    members: int = 1,
) -> ReplaySummary:
    """One of several processes sharing the range of ``request`` through Kafka.

    ``members``: read nothing until the group is stable with that many
    members, so the range is split between them from the start.

    The processes (same arguments and ``group``, each its own ``target``) join
    the consumer group ``turnaudit-replay.GROUP``, which no live service uses.
    Kafka assigns the partitions; on assignment a member starts each partition
    at the group's committed offset, or, for a partition no member has held
    yet, at the range's start, and records the partition's bound (start and
    end, resolved by that first member) in the commit's metadata, so every
    member stops at the same bound. Offsets are committed at every checkpoint
    and when a partition is taken away, after the output is durable. A member
    exits once every partition of the range is committed at its end.

    Each member's output holds the messages it read, per partition by offset,
    partitions interleaved as they arrived; merged and ordered by (partition,
    offset) the outputs hold every message of the range once. If a member is
    killed, the messages it wrote after its last commit are read again by the
    member that takes its partitions over (duplicates, never a loss); a
    member restarted on the same output cuts it back to its last checkpoint.
    """
    if not group or any(c.isspace() for c in group):
        raise ConfigurationError(f"--group {group!r}: a name without spaces")
    factory = output_factory(target.kind, decode, outputs)
    topic = request.topic or settings.topics.turn_events
    fingerprint = request.fingerprint(topic, target)
    own = new_state(settings, request, topic, fingerprint, timeout)
    resumed = target.checkpoint.exists()
    local = ReplayCheckpoint.load(target.checkpoint) if resumed else ReplayCheckpoint(
        fingerprint, topic, {}, {}, {}, 0, 0, 0, window=own.window)
    if local.fingerprint != fingerprint:
        raise ConfigurationError(
            f"{target.checkpoint} belongs to a replay with other arguments; "
            "use another output or remove it (and the output) to start over"
        )
    context = OutputContext(settings, decode, topic, target, request, fingerprint[:12],
                            own.start, own.end)
    output = factory(context)
    if not output.resumable:
        output.close()
        raise ConfigurationError(
            f"--group: a {target.kind} output is computed over the whole range in one "
            "process; share a range with jsonl, logs or topic outputs"
        )
    member = _GroupMember(settings, group=group, own=own, output=output, local=local,
                          checkpoint=target.checkpoint, members=members)
    try:
        output.open(local.output_bytes)
        member.subscribe()
        member.run(decode, batch_size=batch_size, timeout=timeout, after_batch=after_batch,
                   checkpoint_every=checkpoint_every, checkpoint_seconds=checkpoint_seconds)
        member.commit()
        output.finish()
        local.complete = True
        local.save(target.checkpoint)
    finally:
        member.closing = True
        try:
            member.consumer.close()
        finally:
            output.close()
    return ReplaySummary(topic, dict(local.start), dict(local.end), local.events,
                         local.undecodable, resumed, target.where, local.outside_window)
