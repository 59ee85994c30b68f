"""The OpenTelemetry sink: each turn's verdicts as OTLP log records (``turnaudit sink otel``).

What a record holds is ``turnaudit.consumers.otel_records`` (GenAI
``gen_ai.evaluation.result`` events, one per verdict, parented to the
runtime's span); this module hands them to the OpenTelemetry SDK and the
official OTLP exporter (gRPC or HTTP, ``turnaudit.consumers.runtime.otel_settings``).

At-least-once, as every sink of the runtime: ``take`` maps a turn to its
records and keeps them; ``flush`` emits them through a batch processor and
force-flushes it, and returns only when every export of the flush succeeded.
An export that failed (the collector away, a refusal; the exporter's own
retries spent) makes ``flush`` raise: the records stay pending, the runtime
does not store the batch's offsets and calls ``flush`` again, which emits them
all again (the collector may get some twice, never none). A turn the runtime
knows it handed over before is exported again with ``turnaudit.redelivered``
true.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from opentelemetry import trace as trace_api
from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, Counter

from turnaudit.consumers.otel_records import EVENT_NAME, EvaluationRecord, evaluation_records
from turnaudit.consumers.runtime import ConsumedTurn, Sink
from turnaudit.consumers.runtime.otel_settings import OtlpProtocol, OtlpSettings
from turnaudit.errors import TurnAuditError

SCOPE = "turnaudit.consumers.otel_sink"
SERVICE_NAME = "turnaudit-otel-sink"
RECORDS_TOTAL = "turnaudit_otel_records_total"
EXPORT_FAILURES_TOTAL = "turnaudit_otel_export_failures_total"

# Records per OTLP request, and how many the processor may hold: a flush emits
# at most _CHUNK before it force-flushes, so the queue never drops one.
_EXPORT_BATCH = 512
_CHUNK = 4 * _EXPORT_BATCH
_QUEUE = 2 * _CHUNK
# The processor's own timer: long, so records leave when flush says (or a
# full export batch is queued), not on a clock of their own.
_SCHEDULE_DELAY_MS = 60_000


class OtlpExportError(TurnAuditError):
    """An OTLP export of this flush failed: the batch is retried."""


class CheckedExporter(LogRecordExporter):
    """The exporter with its failures counted: the batch processor only logs them.

    ``failed`` counts records whose export did not succeed, whether the exporter
    said so or raised; ``flush`` compares it before and after.
    """

    def __init__(self, inner: LogRecordExporter) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.failed = 0
        self.exported = 0

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        try:
            result = self._inner.export(batch)
        except Exception:
            result = LogRecordExportResult.FAILURE
        with self._lock:
            if result is LogRecordExportResult.SUCCESS:
                self.exported += len(batch)
            else:
                self.failed += len(batch)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()  # type: ignore[no-untyped-call]  # the SDK's base leaves it untyped

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


def otlp_exporter(settings: OtlpSettings) -> LogRecordExporter:
    """The official OTLP log exporter for the settings' protocol."""
    if settings.protocol is OtlpProtocol.GRPC:
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (  # noqa: PLC0415 - grpc loads only when chosen
            OTLPLogExporter as GrpcExporter,
        )

        return GrpcExporter(
            endpoint=settings.export_url, insecure=settings.insecure, timeout=settings.timeout_s
        )
    from opentelemetry.exporter.otlp.proto.http._log_exporter import (  # noqa: PLC0415 - as above
        OTLPLogExporter as HttpExporter,
    )

    return HttpExporter(endpoint=settings.export_url, timeout=settings.timeout_s)


def parent_context(record: EvaluationRecord) -> Context | None:
    """The runtime's span as the record's context (a non-recording span: it is
    the runtime's, not ours)."""
    parent = record.parent
    if parent is None:
        return None
    span = trace_api.SpanContext(
        parent.trace_id,
        parent.span_id,
        is_remote=True,
        trace_flags=trace_api.TraceFlags(parent.trace_flags),
    )
    return trace_api.set_span_in_context(trace_api.NonRecordingSpan(span))


class OtelSink(Sink):
    """Exports each turn's evaluation records; ``flush`` returns once they are exported."""

    def __init__(
        self,
        settings: OtlpSettings,
        registry: CollectorRegistry,
        *,
        exporter: LogRecordExporter | None = None,
        resource: Mapping[str, str] | None = None,  # more resource attributes
    ) -> None:
        self._settings = settings
        self._exporter = CheckedExporter(exporter or otlp_exporter(settings))
        self._provider = LoggerProvider(
            resource=Resource.create({"service.name": SERVICE_NAME, **(resource or {})}),
            shutdown_on_exit=False,  # close() shuts it down, after the last flush
        )
        self._provider.add_log_record_processor(
            BatchLogRecordProcessor(
                self._exporter,
                schedule_delay_millis=_SCHEDULE_DELAY_MS,
                max_export_batch_size=_EXPORT_BATCH,
                max_queue_size=_QUEUE,
            )
        )
        self._logger: Logger = self._provider.get_logger(SCOPE)
        self._pending: list[EvaluationRecord] = []
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
        self._pending.extend(evaluation_records(turn))

    def flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        failed_before = self._exporter.failed
        timeout_ms = int(self._settings.timeout_s * 1000)
        for start in range(0, len(pending), _CHUNK):
            for record in pending[start : start + _CHUNK]:
                self._emit(record)
            flushed = self._provider.force_flush(timeout_ms)
            if not flushed or self._exporter.failed != failed_before:
                self.failures.inc()
                raise OtlpExportError(
                    f"OTLP export to {self._settings.export_url} "
                    f"({self._settings.protocol.value}) failed: {len(pending)} records kept "
                    "for the retry"
                )
        self.records.inc(len(pending))
        self._pending = []  # exported: a failure above keeps them for the retry

    def _emit(self, record: EvaluationRecord) -> None:
        self._logger.emit(
            timestamp=record.timestamp_ns,
            context=parent_context(record),
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            body=record.body,
            attributes=dict(record.attributes),
            event_name=EVENT_NAME,
        )

    def close(self) -> None:
        self._provider.shutdown()
