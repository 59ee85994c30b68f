"""A batch of TurnEvents handed over with its ordinary turns validated and given to the
sink natively, in one call per run of them (``ConsumeStep``, native/src/verify/consume.rs).

An ordinary message (single-object framing of a scanned schema, no headers, a new turn
at its stream's next position, its key the session id, no contract 1-4 breach found or
recorded) is placed by the service's own stream tracker, checked by the one contract
rule (``turnaudit.contracts.CONTRACT_RULE``) and given to the sink without Python
bytecode: tallied into its tallies (``TallyingSink``, the metrics service), or as the
sink's step outlet says (``SteppingSink``: the log sink's lines, the HTIR feeder's
pending turns). Every other message comes back here at once,
in order, before the next is placed: one the step did not place goes through the
record-by-record hand-over (``hand_over``, the validation's ``examine`` and the sink's
``take``); one it placed but did not settle, through the validation's ``conclude`` with
the tracker's result. So the batch, its rejections, the sink's metrics and the tracker
come out as record by record.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from turnaudit._native import ConsumeStep
from turnaudit.consumers.runtime.handover import Examine, HandedBatch, hand_over
from turnaudit.consumers.runtime.sink import (
    ConsumedTurn,
    Rejection,
    StepOutlet,
    SteppingSink,
    StepRun,
    StepStop,
    TallyingSink,
)
from turnaudit.dead_letters import DeadLetterReason
from turnaudit.identity import TrackResult
from turnaudit.records import Record, record_position
from turnaudit.serialization.wire import DecodedTurnEvent

DONE, FEED, FINISH, NOT_A_TURN = ConsumeStep.kinds


class Concluding(Protocol):
    """The validation the step hands messages back to (``TurnEventValidation``)."""

    @property
    def examine(self) -> Examine: ...

    def conclude(
        self,
        decoded: DecodedTurnEvent,
        sequence: TrackResult,
        key: bytes | None,
        *,
        topic: str,
        partition: int,
        offset: int,
    ) -> ConsumedTurn | Rejection: ...


def step_outlet(sink: object) -> tuple[StepOutlet, TallyingSink | SteppingSink] | None:
    """How the native step gives ``sink`` its ordinary turns (the step's construction
    options) and the sink as the step serves it, or None: a sink the step does not serve."""
    if isinstance(sink, TallyingSink):
        return {}, sink
    if isinstance(sink, SteppingSink):
        return sink.step_outlet(), sink
    return None


class NativeBatch:
    """``hand_over`` for a sink the native step serves, the ordinary turns by ``step``
    (made with the sink's ``step_outlet``)."""

    def __init__(
        self,
        step: ConsumeStep,
        validation: Concluding,
        sink: TallyingSink | SteppingSink,
        reject: Callable[[Record, Rejection], None],
    ) -> None:
        self._validation = validation
        self._runner: Callable[[], StepRun | None]
        if isinstance(sink, TallyingSink):
            tallies, run = sink.native_tallies, step.run

            def tally(batch: list[Any], index: int, next_offsets: dict[int, int]) -> StepStop:
                # The sink's tallies as of this call: ``take`` may not replace them,
                # ``flush`` does.
                return run(batch, index, *tallies(), next_offsets)

            self._runner = lambda: tally
        else:
            self._runner = functools.partial(sink.step_runner, step)
        self._take = sink.take
        self._reject = reject
        # A worker's marking sink (``admits_native``) says whether the batch may go to the
        # step: none of it under another worker's delivered offset.
        self._admits: Callable[[Sequence[Record]], bool] | None = getattr(
            sink, "admits_native", None
        )

    def hand_over(self, records: Sequence[Record]) -> HandedBatch:
        batch = HandedBatch()
        next_offsets = batch.next_offsets
        batch_list = records if isinstance(records, list) else list(records)
        take, reject = self._take, self._reject
        run = self._runner()
        if run is None or (self._admits is not None and not self._admits(batch_list)):
            return hand_over(batch_list, self._validation.examine, take, reject)
        index = 0
        while True:
            index, why, decoded, placed, end, tallied = run(batch_list, index, next_offsets)
            batch.handed += tallied
            if why == DONE:
                return batch
            if why == FEED:  # the record-by-record path for the run of them
                part = hand_over(batch_list[index:end], self._validation.examine, take, reject)
                next_offsets.update(part.next_offsets)
                batch.handed += part.handed
                batch.rejected += part.rejected
                batch.redriven += part.redriven
                index = end
                continue
            record = batch_list[index]
            topic, partition, offset = record_position(record)  # the step read all three
            next_offsets[partition] = offset + 1
            if why == NOT_A_TURN:
                turn: ConsumedTurn | Rejection = not_a_turn(placed)
            else:
                try:  # as ``hand_over`` guards ``examine``: a validation bug still moves on
                    turn = self._validation.conclude(
                        decoded,
                        placed,
                        record.key(),
                        topic=topic,
                        partition=partition,
                        offset=offset,
                    )
                except Exception as exc:
                    turn = Rejection(DeadLetterReason.UNDECODABLE, f"validation failed: {exc!r}")
            if type(turn) is ConsumedTurn:  # no headers (the step took it): not redriven
                take(turn)
                batch.handed += 1
            else:
                reject(record, cast(Rejection, turn))
                batch.rejected += 1
            index += 1


def not_a_turn(exc: BaseException) -> Rejection:
    """A message that decodes but is not shaped like a TurnEvent (a foreign schema gone
    wrong): what placing or checking it raised."""
    return Rejection(DeadLetterReason.UNDECODABLE, f"not a TurnEvent: {exc!r}")
