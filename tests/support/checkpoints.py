"""A producer that records what the checkpointer sends and reports deliveries on
``poll``/``flush``, failing the ones it is told to (no broker)."""

from __future__ import annotations

from dataclasses import dataclass, field

from turnaudit.kafka.producer import DeliveryCallback, OnFull, QueueFullError


@dataclass
class _Err:
    """A delivery error as librdkafka reports it (the parts the checkpointer reads)."""

    def code(self) -> int:
        return -192

    def name(self) -> str:
        return "_MSG_TIMED_OUT"

    def str(self) -> str:
        return "timed out"

    def fatal(self) -> bool:
        return False

    def retriable(self) -> bool:
        return True


@dataclass
class RecordingProducer:
    stored: list[tuple[str, bytes, bytes]] = field(default_factory=list)  # topic, value, key
    queued: list[tuple[str, bytes, bytes, DeliveryCallback | None]] = field(default_factory=list)
    fail_next: int = 0  # deliveries to report as failed
    full_next: int = 0  # produce calls to refuse with a full queue

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        on_delivery: DeliveryCallback | None = None,
        on_full: OnFull | None = None,
    ) -> None:
        if self.full_next:
            self.full_next -= 1
            raise QueueFullError("full")
        self.queued.append((topic, value or b"", key or b"", on_delivery))

    def poll(self, timeout: float = 0.0) -> int:
        return self._report()

    def flush(self, timeout: float) -> int:
        self._report()
        return 0

    def _report(self) -> int:
        queued, self.queued = self.queued, []
        for topic, value, key, callback in queued:
            failed = self.fail_next > 0
            if failed:
                self.fail_next -= 1
            else:
                self.stored.append((topic, value, key))
            if callback is not None:
                callback(_Err() if failed else None, None)  # type: ignore[arg-type]  # a stand-in error
        return len(queued)
