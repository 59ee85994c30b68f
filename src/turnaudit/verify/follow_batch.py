"""``verify --follow``'s batches through the native step one-shot verify uses: a batch's
ordinary messages (decoded, a new turn at its stream's next position, no breach found or
recorded) are placed, checked and tallied by ``VerifyStep`` with no Python per message;
every other message comes back (``BatchVerifier``, ``turnaudit.verify.native_step``) and
is judged as ``FollowState.observe`` judges it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnaudit.errors import SerializationError
from turnaudit.identity import TrackResult
from turnaudit.records import Record
from turnaudit.serialization.read_plans import DecodedTurnEvent
from turnaudit.verify.follow import FollowState
from turnaudit.verify.follow_records import Outcome
from turnaudit.verify.native_step import feed_batch


@dataclass(frozen=True, slots=True)
class FollowedBatch:
    """What a batch came to: new turns the native step settled, messages already proved
    (read again), and what each message it handed back is, with its breaches."""

    settled: int
    reread: int
    outcomes: list[tuple[Outcome, list[str]]]


def follow_batch(state: FollowState, records: Sequence[Record], now: float) -> FollowedBatch:
    """A batch of messages in order into ``state`` (each partition loaded already)."""
    step = state.step
    assert step is not None, "a follower built without a decoder has no native step"
    # Natively, one pass: a message below its partition's proved offset is read again;
    # the others move their partition's offset and event time and go on to the step.
    next_offsets = {p: proof.next_offset for p, proof in state.partitions.items()}
    # The step keeps what admitting read of each message it let through: its run over
    # ``live`` (``feed_batch``) asks those messages only their key and value.
    batch = records if isinstance(records, list) else list(records)
    live, met = step.admit_for_run(batch, next_offsets)
    taken: dict[int, int] = {}
    reread = 0
    for partition, (next_offset, stamp, admitted, again) in met.items():
        proof = state.partitions[partition]
        proof.next_offset = next_offset
        if stamp is not None:
            proof.event_time_ms = max(proof.event_time_ms, stamp)
        proof.counts.reread += again
        reread += again
        if admitted:
            taken[partition] = admitted
    state.touched(taken)
    back = HandedBack(state, now)
    feed_batch(back, step, live)
    step.take_messages()
    # Every message the step kept is a new turn; the others counted themselves.
    for partition, n in taken.items():
        state.partitions[partition].counts.proved += n - back.returned.get(partition, 0)
    return FollowedBatch(len(live) - sum(back.returned.values()), reread, back.outcomes)


class HandedBack:
    """The messages the native step hands back to the follower (``BatchVerifier``), each
    judged as ``FollowState.observe`` judges it (the partitions' bookkeeping done by
    ``feed_batch``), and how many per partition."""

    def __init__(self, state: FollowState, now: float) -> None:
        self._state = state
        self._now = now
        self.messages = 0
        self.returned: dict[int, int] = {}
        self.outcomes: list[tuple[Outcome, list[str]]] = []

    def feed(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
    ) -> None:
        self.returned[partition] = self.returned.get(partition, 0) + 1
        decode = self._state.decode
        assert decode is not None
        try:
            decoded = decode(value)
            judged = self._state.judge(
                partition,
                offset,
                key,
                value or b"",
                decoded.event,
                now=self._now,
                fingerprint=decode.writer_fingerprint(decoded),
            )
        except (SerializationError, KeyError, TypeError, ValueError) as exc:
            self.not_a_turn(exc, partition, offset, returned=False)
            return
        self.outcomes.append(judged)

    def not_a_turn(
        self, exc: Exception, partition: int, offset: int, *, returned: bool = True
    ) -> None:
        if returned:
            self.returned[partition] = self.returned.get(partition, 0) + 1
        self._state.partitions[partition].counts.undecodable += 1
        self.outcomes.append(("undecodable", []))

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
        self.returned[partition] = self.returned.get(partition, 0) + 1
        judged = self._state.placed(
            partition, key, decoded.event, result, opened=opened, now=self._now
        )
        self.outcomes.append(judged)

    def stamped(self, timestamp_ms: int) -> None:
        return  # the partitions' times are their messages' (feed_batch)
