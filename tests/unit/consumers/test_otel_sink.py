"""The OpenTelemetry sink against the SDK: records as exported, failed exports as
failed flushes (injected at the exporter, and a real OTLP exporter with no collector),
nothing dropped on a retry or a large batch; the OTLP settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    LogRecordExporter,
    LogRecordExportResult,
)
from prometheus_client import CollectorRegistry

from tests.support.sinks import deliver
from tests.unit.consumers.test_otel_records import consumed, simulated
from turnaudit.consumers.otel_records import EVENT_ID, EVENT_NAME, evaluation_records
from turnaudit.consumers.otel_sink import EXPORT_FAILURES_TOTAL, OtelSink, OtlpExportError
from turnaudit.consumers.runtime.otel_settings import LOGS_PATH, OtlpProtocol, OtlpSettings
from turnaudit.errors import ConfigurationError
from turnaudit.local_broker import free_port


class FlakyExporter(LogRecordExporter):
    """Fails its first ``failures`` exports (by result, or by raising), then stores."""

    def __init__(self, failures: int, *, raises: bool) -> None:
        self.stored = InMemoryLogRecordExporter()
        self.failures_left = failures
        self.raises = raises

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        if self.failures_left > 0:
            self.failures_left -= 1
            if self.raises:
                raise ConnectionError("collector went away")
            return LogRecordExportResult.FAILURE
        return self.stored.export(batch)

    def shutdown(self) -> None:
        self.stored.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def exported_ids(exporter: InMemoryLogRecordExporter) -> list[tuple[str, str]]:
    return [
        (
            str(r.log_record.attributes[EVENT_ID]),  # type: ignore[index]  # the SDK types attributes as optional
            str(r.log_record.attributes["gen_ai.evaluation.name"]),
        )  # type: ignore[index]  # the SDK types attributes as optional
        for r in exporter.get_finished_logs()
    ]


def sample(registry: CollectorRegistry, name: str) -> float:
    value = registry.get_sample_value(name)
    return 0.0 if value is None else value


class TestExport:
    def test_every_record_exported_as_an_evaluation_event_under_the_runtime_span(self) -> None:
        memory = InMemoryLogRecordExporter()
        sink = OtelSink(OtlpSettings(), CollectorRegistry(), exporter=memory)
        turns = [consumed(e) for e in simulated(11, 60)]
        deliver(sink, turns)
        expected = [r for t in turns for r in evaluation_records(t)]
        logs = memory.get_finished_logs()
        assert len(logs) == len(expected)
        by_key = {(str(r.attributes[EVENT_ID]), r.name): r for r in expected}
        for log in logs:
            record = log.log_record
            assert record.event_name == EVENT_NAME
            attributes = dict(record.attributes or {})
            mapped = by_key[(str(attributes[EVENT_ID]), str(attributes["gen_ai.evaluation.name"]))]
            assert attributes == dict(mapped.attributes)
            assert record.timestamp == mapped.timestamp_ns
            if mapped.parent is None:
                assert not record.trace_id
            else:
                assert record.trace_id == mapped.parent.trace_id
                assert record.span_id == mapped.parent.span_id
                assert int(record.trace_flags or 0) == mapped.parent.trace_flags
        assert log.resource.attributes["service.name"] == "turnaudit-otel-sink"
        sink.close()

    def test_a_batch_larger_than_the_processor_queue_loses_nothing(self) -> None:
        memory = InMemoryLogRecordExporter()
        sink = OtelSink(OtlpSettings(), CollectorRegistry(), exporter=memory)
        turns = [consumed(e) for e in simulated(5, 1200)]
        deliver(sink, turns)
        expected = sorted(
            (str(r.attributes[EVENT_ID]), r.name) for t in turns for r in evaluation_records(t)
        )
        assert len(expected) > 4096  # above the queue: emitted in chunks
        assert sorted(exported_ids(memory)) == expected
        sink.close()


class TestFailedExports:
    @settings(max_examples=25, deadline=None)
    @given(failures=st.integers(1, 4), raises=st.booleans(), count=st.integers(1, 150))
    def test_a_failed_export_fails_the_flush_and_the_retry_exports_everything(
        self, failures: int, raises: bool, count: int
    ) -> None:
        flaky = FlakyExporter(failures, raises=raises)
        registry = CollectorRegistry()
        sink = OtelSink(OtlpSettings(), registry, exporter=flaky)
        turns = [consumed(e) for e in simulated(count, count)]
        for turn in turns:
            sink.take(turn)
        attempts = 0
        while True:  # as the runtime does: flush again until it returns
            attempts += 1
            try:
                sink.flush()
                break
            except OtlpExportError:
                assert attempts <= failures
        assert attempts > 1
        assert sample(registry, EXPORT_FAILURES_TOTAL) >= 1
        expected = {
            (str(r.attributes[EVENT_ID]), r.name) for t in turns for r in evaluation_records(t)
        }
        assert set(exported_ids(flaky.stored)) == expected  # every record, at least once
        sink.flush()  # nothing pending: nothing sent again
        assert set(exported_ids(flaky.stored)) == expected
        sink.close()

    @pytest.mark.parametrize("protocol", list(OtlpProtocol))
    def test_no_collector_listening_is_a_failed_flush_with_the_records_kept(
        self, protocol: OtlpProtocol
    ) -> None:
        nowhere = OtlpSettings(protocol, f"http://127.0.0.1:{free_port()}", timeout_s=0.5)
        registry = CollectorRegistry()
        sink = OtelSink(nowhere, registry)
        event = simulated(3, 1, (4,))[0]
        sink.take(consumed(event))
        for _ in range(2):  # the retry fails the same way: the records are still pending
            with pytest.raises(OtlpExportError, match=r"failed: \d+ records kept for the retry"):
                sink.flush()
        assert sample(registry, EXPORT_FAILURES_TOTAL) == 2
        sink.close()


class TestSettings:
    def test_defaults_and_the_http_logs_path(self) -> None:
        assert OtlpSettings.from_env({}) == OtlpSettings(
            OtlpProtocol.GRPC, "http://localhost:4317", 10.0
        )
        http = OtlpSettings.from_env({"TURNAUDIT_OTLP_PROTOCOL": "HTTP"})
        assert http.export_url == "http://localhost:4318" + LOGS_PATH
        own = OtlpSettings.from_env(
            {
                "TURNAUDIT_OTLP_PROTOCOL": "http",
                "TURNAUDIT_OTLP_ENDPOINT": "https://c.example:443/x/logs",
            }
        )
        assert own.export_url == "https://c.example:443/x/logs"
        assert not own.insecure
        assert OtlpSettings.from_env({"TURNAUDIT_OTLP_ENDPOINT": "http://h:1"}).insecure

    @given(
        protocol=st.text(max_size=12), endpoint=st.text(max_size=40), timeout=st.text(max_size=8)
    )
    def test_any_value_is_taken_or_refused_in_one_line_naming_the_variable(
        self, protocol: str, endpoint: str, timeout: str
    ) -> None:
        env: dict[str, Any] = {
            "TURNAUDIT_OTLP_PROTOCOL": protocol,
            "TURNAUDIT_OTLP_ENDPOINT": endpoint,
            "TURNAUDIT_OTLP_TIMEOUT_MS": timeout,
        }
        try:
            taken = OtlpSettings.from_env(env)
        except ConfigurationError as exc:
            message = str(exc)
            assert "\n" not in message
            assert message.startswith("TURNAUDIT_OTLP_")
            return
        assert taken.protocol.value == (protocol.strip().lower() or "grpc")
        assert taken.export_url.startswith(("http://", "https://"))
        assert 0.1 <= taken.timeout_s <= 600
