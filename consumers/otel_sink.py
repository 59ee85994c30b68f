"""The OpenTelemetry sink: each turn's verdicts as OTLP log records (``turnaudit sink otel``).

What a record holds is ``turnaudit.consumers.otel_records`` (GenAI
``gen_ai.evaluation.result`` events, one per verdict, parented to the
runtime's span), written natively (native/src/verify/otlp.rs): an ordinary
turn by the native consumer step's ``otlp`` outlet, any other by ``take``.
No OpenTelemetry SDK: ``flush`` wraps the records in ``ExportLogsServiceRequest``s
(resource ``service.name`` ``SERVICE_NAME``, a ``service.instance.id`` of
its own and the extra attributes given, scope ``SCOPE``; the flush's records
split evenly into ``_IN_FLIGHT`` requests, at most ``_EXPORT_BATCH`` records
and ``_MAX_REQUEST_BYTES`` each) and sends them at once (the last from the
flushing thread itself), over
OTLP/gRPC or OTLP/HTTP (``turnaudit.consumers.runtime.otlp_export``, settings
``turnaudit.consumers.runtime.otel_settings``). A record's observed time is
the clock when it was made (once per call of the native step).

At-least-once, as every sink of the runtime: ``take`` maps a turn to its
records and keeps them; ``flush`` exports them and returns only when every
export of the flush succeeded. An export that failed (the collector away, a
refusal; the transport's own retries spent) makes ``flush`` raise: the records
stay pending, the runtime does not store the batch's offsets and calls
``flush`` again, which exports them all again (the collector may get some
twice, never none). A turn the runtime knows it handed over before is
exported again with ``turnaudit.redelivered`` true.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from turnaudit._native import ConsumeStep, otlp_requests
from turnaudit.consumers.otel_records import encode_records
from turnaudit.consumers.runtime import ConsumedTurn, Sink
from turnaudit.consumers.runtime.heap import keep_large_buffers
from turnaudit.consumers.runtime.otel_settings import OtlpSettings
from turnaudit.consumers.runtime.otlp_export import OtlpExportError, Transport, otlp_transport
from turnaudit.consumers.runtime.sink import StepOutlet, StepRun, StepStop

__all__ = ["EXPORT_FAILURES_TOTAL", "RECORDS_TOTAL", "OtelSink", "OtlpExportError"]

SCOPE = "turnaudit.consumers.otel_sink"
SERVICE_NAME = "turnaudit-otel-sink"
RECORDS_TOTAL = "turnaudit_otel_records_total"
EXPORT_FAILURES_TOTAL = "turnaudit_otel_export_failures_total"

# Requests of one flush in flight at once: the collector takes them in parallel while
# this process waits (each is retried on its own; the flush fails if any fails). A
# flush's records are split evenly into that many, so they go in one round trip.
_IN_FLIGHT = 4
# Bounds on one request: records (a 500-turn batch's ~3,000 records are 4 requests of
# ~750), and bytes whatever the records hold (a record is a few hundred bytes, never
# split), under the 4 MiB a collector's gRPC receiver takes by default.
_EXPORT_BATCH = 2048
_MAX_REQUEST_BYTES = 3 << 20


class OtelSink(Sink):
    """Exports each turn's evaluation records; ``flush`` returns once they are exported."""

    def __init__(
        self,
        settings: OtlpSettings,
        registry: CollectorRegistry,
        *,
        transport: Transport | None = None,
        resource: Mapping[str, str] | None = None,  # more resource attributes
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._settings = settings
        # A flush's records and requests (megabytes) reused, not mapped afresh each flush.
        keep_large_buffers()
        self._transport = transport or otlp_transport(settings)
        # service.instance.id: one per sink (a worker's), as the SDK gave it.
        instance = {"service.name": SERVICE_NAME, "service.instance.id": str(uuid.uuid4())}
        self._resource = list({**instance, **(resource or {})}.items())
        self._clock = clock
        # The flushing thread sends one request itself: a thread fewer to wake per flush.
        self._senders = ThreadPoolExecutor(_IN_FLIGHT - 1, thread_name_prefix="otlp-export")
        # The records taken since the last successful flush, encoded, one after the other.
        self._records = bytearray()
        self.records = Counter(
            RECORDS_TOTAL,
            "Evaluation log records exported over OTLP (again after a failed flush too).",
            registry=registry,
        )
        self.failures = Counter(
            EXPORT_FAILURES_TOTAL,
            "Flushes whose OTLP export failed (the batch is retried, its offsets not stored).",
            registry=registry,
        )

    def take(self, turn: ConsumedTurn) -> None:
        encode_records(turn, self._records, self._clock())

    def step_outlet(self) -> StepOutlet:
        return {"otlp": True}

    def step_runner(self, step: ConsumeStep) -> StepRun | None:
        """The native step's records into the pending buffer (observed at the call's clock)."""
        run_otlp, records, clock = step.run_otlp, self._records, self._clock

        def run(batch: list[Any], index: int, next_offsets: dict[int, int]) -> StepStop:
            return run_otlp(batch, index, records, clock(), next_offsets)

        return run

    def flush(self) -> None:
        if not self._records:
            return
        requests = otlp_requests(
            self._records, self._resource, SCOPE, _EXPORT_BATCH, _MAX_REQUEST_BYTES, _IN_FLIGHT
        )
        total = sum(count for _, count in requests)
        try:
            self._send_all([request for request, _ in requests])
        except Exception as exc:
            self.failures.inc()
            raise OtlpExportError(
                f"OTLP export to {self._settings.export_url} "
                f"({self._settings.protocol.value}) failed: {total} records kept "
                f"for the retry ({exc})"
            ) from exc
        self.records.inc(total)
        self._records.clear()  # exported: a failure above keeps them for the retry

    def _send_all(self, requests: list[bytes]) -> None:
        """Every request sent, the last from this thread, the rest by the senders at once;
        each waited for (none left running), the first failure raised."""
        send = self._transport.send
        sent = [self._senders.submit(send, request) for request in requests[:-1]]
        try:
            send(requests[-1])
        finally:
            failed = [f.exception() for f in sent]
        for exc in failed:
            if exc is not None:
                raise exc

    def close(self) -> None:
        self._senders.shutdown()
        self._transport.close()
