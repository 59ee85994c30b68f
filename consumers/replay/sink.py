"""A replay output that runs the services' runtime: ``TurnEventValidation`` and a ``Sink``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry

from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics
from turnaudit.consumers.runtime.gc_sizing import batch_sized_gc
from turnaudit.consumers.runtime.handover import hand_over
from turnaudit.consumers.runtime.sink import ConsumedTurn, Sink
from turnaudit.consumers.runtime.validation import TurnEventValidation
from turnaudit.records import Record
from turnaudit.replay.outputs import ReplayOutput
from turnaudit.serialization.wire import TurnEventDeserializer


def _count_only(*_args: object) -> None:
    """A replay writes nothing to live topics: what the runtime would dead-letter is
    counted (``hand_over`` returns how many) and set aside."""


class SinkReplayOutput(ReplayOutput):
    """Messages through ``TurnEventValidation`` into a runtime ``Sink``, batch by batch.

    Turns that break a contract reach the sink only if it wants them, as in
    the services; rejected messages are counted, not dead-lettered (a replay
    writes nothing to live topics). A sink's result covers the whole range:
    an interrupted replay into it starts its range again.
    """

    def __init__(
        self,
        sink: Sink,
        decode: TurnEventDeserializer,
        max_sessions: int = 100_000,
        *,
        start_gaps: bool = True,
    ):
        """``start_gaps=False`` for an event-time window: a stream's first turn
        in it is where the stream starts (see ``StreamTracker``)."""
        self.sink = sink
        # The runtime's own figures (consumed, rejected, identity) stay in a
        # registry of their own: the output holds the sink's series only.
        self._validation = TurnEventValidation(
            decode, ConsumerMetrics(CollectorRegistry()), max_sessions, start_gaps=start_gaps
        )

    def _examine(self, messages: Sequence[Record], take: Callable[[ConsumedTurn], None]) -> int:
        """The runtime's hand-over; a rejected message is counted, not dead-lettered."""
        return hand_over(
            messages,
            self._validation.examine,
            take,
            _count_only,
        ).rejected

    def warm(self, messages: Sequence[Record]) -> None:
        """The validation's stream tracker sees the already-written prefix again."""
        self._examine(messages, _count_only)

    def write(self, messages: Sequence[Record]) -> int:
        batch_sized_gc.enter(len(messages))  # as the runtime's loop does, for the same reason
        try:
            # As the runtime does: no decoded record is held until the batch ends.
            rejected = self._examine(messages, self.sink.take)
            self.sink.flush()
        finally:
            batch_sized_gc.exit()
        self.sink.tick()
        return rejected

    def finish(self) -> None:
        self.sink.close()
