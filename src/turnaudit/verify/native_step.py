"""Verify's native step: the ordinary messages of a batch verified in one native call.

An ordinary message (it decodes, it is a new turn at its stream's next position, its
key is the session id, no contract 1-4 breach is found or recorded, it does not open a
stream past position 0) is decoded, placed, checked and tallied by ``VerifyStep``
(native/src/verify/) without Python bytecode. Every other message comes back to the
``Verifier``, in stream order: before anything about it was kept (``FEED``: the
Verifier's own ``feed``), or after its placement (``FINISH``, ``NOT_A_TURN``:
``Verifier.conclude`` and ``Verifier.not_a_turn``). Contracts 1-4 are one rule
(``turnaudit.contracts.CONTRACT_RULE``): on a scanned record it answers "no breach" only
where every value it read settles Python's answer, and any other turn goes back to the
Verifier, whose ``check_event`` is the same rule over the decoded event.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from turnaudit.contracts import CONTRACT_RULE
from turnaudit.identity import TrackResult
from turnaudit.records import Record
from turnaudit.serialization.native import ContractCheck, VerifyStep
from turnaudit.serialization.read_plans import DecodedTurnEvent

DONE, FEED, FINISH, NOT_A_TURN = VerifyStep.kinds


class BatchVerifier(Protocol):
    """What the native step hands the messages it does not settle back to: the
    ``Verifier`` (``turnaudit.verify.verifier``), which calls this module."""

    messages: int

    def feed(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
    ) -> None: ...

    def not_a_turn(self, exc: Exception, partition: int, offset: int) -> None: ...

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
    ) -> None: ...

    def stamped(self, timestamp_ms: int) -> None: ...


def contract_check() -> ContractCheck:
    """Contracts 1-4: the one rule ``check_event`` applies too."""
    return CONTRACT_RULE


def feed_batch(verifier: BatchVerifier, step: VerifyStep, batch: Sequence[Record]) -> None:
    """Every message of ``batch`` into ``verifier``, the ordinary ones by ``step``."""
    if not isinstance(batch, list):
        batch = list(batch)  # the native step walks a list
    index = 0
    while True:
        index, why, decoded, placed, opened = step.run(batch, index)
        if why == DONE:
            break
        msg = batch[index]
        partition, offset = msg.partition() or 0, msg.offset() or 0
        if why == FEED:
            verifier.feed(partition, offset, msg.key(), msg.value(), msg.timestamp()[1])
        elif why == NOT_A_TURN:
            if not isinstance(placed, KeyError | TypeError | ValueError):
                raise placed
            verifier.not_a_turn(placed, partition, offset)
        else:
            verifier.conclude(
                partition,
                offset,
                msg.key(),
                msg.value(),
                decoded=decoded,
                result=placed,
                opened=opened,
            )
        index += 1
    verifier.messages += step.take_messages()
    for stamp in step.take_timestamps():
        if stamp is not None:
            verifier.stamped(stamp)
