"""The HTIR feeder's producer without a broker: every trace stored at once, its delivery
report served at the next poll (a flush polls)."""

from __future__ import annotations

from typing import cast

from turnaudit.kafka.producer import DeliveredMessage, DeliveryCallback


class AcknowledgingProducer:
    """Stores every trace at once: its delivery report comes with the next poll."""

    def __init__(self) -> None:
        self.reports: list[DeliveryCallback] = []

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        on_delivery: DeliveryCallback | None = None,
        serve_reports: bool = True,
    ) -> None:
        if on_delivery is not None:
            self.reports.append(on_delivery)

    def poll(self, timeout: float = 0.0) -> int:
        reports, self.reports = self.reports, []
        for report in reports:
            report(None, cast(DeliveredMessage, None))  # the feeder reads no message
        return len(reports)

    def flush(self, timeout: float) -> int:
        self.poll()
        return 0
