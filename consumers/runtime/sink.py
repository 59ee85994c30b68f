"""What a service's sink is handed, and the ``Sink`` base class with every hook.

The runtime calls exactly these methods, on every sink; a sink overrides the
ones it needs. No hook is looked up by name.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol, TypedDict, cast, runtime_checkable

from turnaudit._native import ConsumeStep
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.dead_letters import DeadLetterReason
from turnaudit.events import TurnEvent
from turnaudit.identity import Placement
from turnaudit.serialization.wire import DecodedTurnEvent

IN_ORDER = SequenceCheck(SequenceOutcome.IN_ORDER)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a message goes to the dead-letter topic."""

    reason: DeadLetterReason
    error: str
    event_id: str | None = None


class ConsumedTurn(NamedTuple):
    """A decoded, checked record and where it was read (a named tuple: one per message)."""

    decoded: DecodedTurnEvent
    sequence: Placement  # new, late or redelivered (turnaudit.identity)
    topic: str
    partition: int
    offset: int
    # Contract breaches ("contract: detail"), found by the consumer's own check
    # or recorded by the producer (the event's ``breaches``): a breaching turn
    # is still a turn, handed to every sink with what it broke.
    breaches: tuple[str, ...] = ()
    # Written back from the dead-letter topic by ``turnaudit dlq redrive`` (its
    # ``turnaudit.redriven-from`` header): counted apart from live traffic.
    redriven: bool = False

    @property
    def event(self) -> TurnEvent:
        """The decoded TurnEvent, typed (validation made sure it is one)."""
        return cast("TurnEvent", self.decoded.event)


class Sink(abc.ABC):
    """Where a service puts the turns it consumed.

    Hooks, in the order the runtime calls them:

    * ``take(turn)``: each turn of the batch in hand as soon as it was checked,
      in order, so the runtime holds no decoded record until the batch ends (a
      sink that counts or renders each turn keeps only what it made of it).
    * ``flush()`` once per batch that handed it turns: returns once what it
      took since the last successful ``flush`` is durable (written to its
      output, or counted). Raising makes the runtime call ``flush`` again; what
      was taken stays pending, and the batch's offsets are stored only after a
      successful flush.
    * ``tick()`` on every poll, even an empty one (a sink that closes work on
      a quiet stream); a failure is counted and logged, the next poll ticks again.
    * ``held_offsets()`` after every flush and tick: per partition, the first
      offset the sink still needs after a restart (stored offsets never pass
      it), or ``None`` for a sink that holds nothing back.
    * ``partitions_revoked(partitions)`` when partitions move to another
      member of the group (revoked, or lost): what the sink keeps for them
      (open work, held offsets) is the new owner's to rebuild, from the
      offsets stored so far.
    * ``close()`` once, after the last flush, when the service stops.

    Every turn that decodes is handed over, a breaching one with its
    ``breaches``; only what cannot be read goes to the dead-letter topic.

    ``marks_redeliveries``: under ``--workers``, a sink of counted turns gets the
    turns another worker already handed over marked redelivered
    (``RedeliveryMarkingSink``); a sink that tracks its own progress says no.

    A sink that writes whole batches derives from ``BatchingSink`` instead.
    """

    marks_redeliveries: ClassVar[bool] = True

    @abc.abstractmethod
    def take(self, turn: ConsumedTurn) -> None: ...

    @abc.abstractmethod
    def flush(self) -> None: ...

    def tick(self) -> None:
        return

    def held_offsets(self) -> Mapping[int, int] | None:
        return None

    def partitions_assigned(self, partitions: set[int]) -> None:
        """Partitions this member now reads (before any of their messages)."""
        return

    def partitions_revoked(self, partitions: set[int]) -> None:
        return

    def close(self) -> None:
        return


class BatchingSink(Sink):
    """A sink that writes the turns of a batch together: ``take`` keeps them,
    ``flush`` hands them to ``write_batch`` and forgets them once it returned."""

    def __init__(self) -> None:
        self._pending: list[ConsumedTurn] = []

    def take(self, turn: ConsumedTurn) -> None:
        self._pending.append(turn)

    def flush(self) -> None:
        if self._pending:
            self.write_batch(self._pending)
            self._pending = []  # written: a failure above keeps them for the retry

    @abc.abstractmethod
    def write_batch(self, turns: Sequence[ConsumedTurn]) -> None:
        """Make these turns durable; raising keeps them pending."""


class NativeTallies(NamedTuple):
    """A sink's tallies since its last flush, which the native batch step adds to
    (``turnaudit.consumers.runtime.native_batch``): turns by (pack, domain, path, writer
    version, refused, hedged), action assessments by (output policy, risk tier,
    action-risk verdict), and each turn's occurred_at in epoch ms."""

    turns: dict[tuple[Any, ...], int]
    actions: dict[tuple[Any, ...], int]
    occurred: list[int]


@runtime_checkable
class TallyingSink(Protocol):
    """A sink whose ordinary turns may be tallied natively instead of taken one by one:
    what ``take`` would add for a new, in-order, unbreached, not redriven turn of a
    scanned schema is the native step's tally; every other turn still comes to ``take``."""

    def take(self, turn: ConsumedTurn) -> None: ...

    def native_tallies(self) -> NativeTallies: ...


# What one call of the native step came to: (index, why, decoded, placed or raised, end
# of the run handed back, messages taken); see ``ConsumeStep.run``.
StepStop = tuple[int, int, Any, Any, int, int]
# One call of the native step from an index of a batch, its next offsets into the dict.
StepRun = Callable[[list[Any], int, dict[int, int]], StepStop]


class StepOutlet(TypedDict, total=False):
    """How the native step gives a sink its ordinary turns (``ConsumeStep``'s outlet):
    ``line``, the log line's keys in order and the fixed texts of some; ``turn``,
    ``(tuple.__new__, ConsumedTurn)`` (turns with a task into the sink's pending list);
    ``traces``, ``(TraceStore, surface policy, Redaction.text)`` (turns with a task made
    into their HTIR steps and added to their traces in the feeder's store);
    ``otlp``, true (each turn's OTLP log records into the OTel sink's buffer)."""

    line: tuple[Sequence[str], Sequence[tuple[str, str]]]
    otlp: bool
    turn: tuple[Any, type[Any]]
    traces: tuple[Any, str, Callable[[str], str | None]]


@runtime_checkable
class SteppingSink(Protocol):
    """A sink whose ordinary turns the native step gives it its own way instead of
    ``take`` (the log sink's rendered lines, the HTIR feeder's traces):
    ``step_outlet`` says how, once, when the step is made; ``step_runner``, per batch,
    runs the step into the sink, or is None when this batch goes record by record (a
    setting of the moment the native output does not cover). Every other turn still
    comes to ``take``."""

    def take(self, turn: ConsumedTurn) -> None: ...

    def step_outlet(self) -> StepOutlet: ...

    def step_runner(self, step: ConsumeStep) -> StepRun | None: ...
