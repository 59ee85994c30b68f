"""The OpenTelemetry sink: records as exported (to a real OTLP/HTTP endpoint in process,
and to a transport), failed exports as failed flushes (injected at the transport, by
refusing status codes, and no collector at all), retried within the export's time as
the official exporter retries, nothing dropped on a retry or a large batch; the OTLP
settings."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from prometheus_client import CollectorRegistry

from tests.support.otel_reference import comparable, sdk_request
from tests.support.sinks import deliver
from tests.unit.consumers.test_otel_records import consumed, simulated
from turnaudit.consumers.otel_records import EVALUATION_NAME, EVENT_ID
from turnaudit.consumers.otel_sink import (
    _EXPORT_BATCH,
    _IN_FLIGHT,
    EXPORT_FAILURES_TOTAL,
    RECORDS_TOTAL,
    OtelSink,
    OtlpExportError,
)
from turnaudit.consumers.runtime.otel_settings import LOGS_PATH, OtlpProtocol, OtlpSettings
from turnaudit.consumers.runtime.otlp_export import HttpTransport, retried
from turnaudit.errors import ConfigurationError
from turnaudit.local_broker import free_port


class FlakyTransport:
    """Fails its first ``failures`` sends, then keeps what it is sent."""

    def __init__(self, failures: int, *, raises: type[Exception] = OtlpExportError) -> None:
        self.sent: list[bytes] = []
        self.failures_left = failures
        self.raises = raises
        self._lock = threading.Lock()  # the sink sends a flush's requests in parallel

    def send(self, request: bytes) -> None:
        with self._lock:
            if self.failures_left > 0:
                self.failures_left -= 1
                raise self.raises("collector went away")
            self.sent.append(request)

    def close(self) -> None:
        return


def exported_ids(sent: list[bytes]) -> list[tuple[str, str]]:
    ids = []
    for body in sent:
        for resource_logs in ExportLogsServiceRequest.FromString(body).resource_logs:
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    attributes = {a.key: a.value.string_value for a in record.attributes}
                    ids.append((attributes[EVENT_ID], attributes[EVALUATION_NAME]))
    return ids


def sample(registry: CollectorRegistry, name: str) -> float:
    value = registry.get_sample_value(name)
    return 0.0 if value is None else value


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP logs endpoint: answers each POST with the next status of ``script``
    (200 once it is spent) and keeps the bodies it answered 200."""

    script: list[int]
    bodies: list[bytes]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.headers["Content-Type"] == "application/x-protobuf"
        assert self.path == LOGS_PATH
        status = self.script.pop(0) if self.script else 200
        if status == 200:
            self.bodies.append(body)
        self.send_response(status)
        if status == 429:
            self.send_header("Retry-After", "0")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def collector(script: list[int]) -> Iterator[tuple[OtlpSettings, list[bytes]]]:
    bodies: list[bytes] = []
    handler = type("Handler", (Collector,), {"script": list(script), "bodies": bodies})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        yield OtlpSettings(OtlpProtocol.HTTP, f"http://127.0.0.1:{port}", timeout_s=5), bodies
    finally:
        server.shutdown()
        server.server_close()


class TestExport:
    def test_every_record_reaches_an_otlp_http_endpoint_as_the_sdk_would_send_it(self) -> None:
        turns = [consumed(e) for e in simulated(11, 60)]
        with collector([]) as (endpoint, bodies):
            registry = CollectorRegistry()
            sink = OtelSink(endpoint, registry, resource={"deployment.environment": "test"})
            deliver(sink, turns)
            sink.close()
        expected = sdk_request(turns, {"deployment.environment": "test"})
        assert comparable(bodies, in_order=False) == comparable([expected], in_order=False)
        count = len(expected.resource_logs[0].scope_logs[0].log_records)
        assert sample(registry, RECORDS_TOTAL) == count

    @pytest.mark.parametrize("count", [1, 40, 1200, 2500])
    def test_a_batch_goes_in_one_round_of_bounded_requests_and_loses_nothing(
        self, count: int
    ) -> None:
        transport = FlakyTransport(0)
        sink = OtelSink(OtlpSettings(), CollectorRegistry(), transport=transport)
        turns = [consumed(e) for e in simulated(5, count)]
        deliver(sink, turns)
        records = [len(exported_ids([request])) for request in transport.sent]
        assert max(records) <= _EXPORT_BATCH
        # As few requests as the bound allows, and at most one each for those in flight.
        assert len(records) == max(min(_IN_FLIGHT, sum(records)), -(-sum(records) // _EXPORT_BATCH))
        largest_first = sorted(records, reverse=True)  # sent in parallel: in any order
        assert len(set(largest_first[:-1])) <= 1  # even, but for the last one
        unordered = comparable([sdk_request(turns)], in_order=False)
        assert comparable(transport.sent, in_order=False) == unordered
        sink.close()


class TestFailedExports:
    @settings(max_examples=25, deadline=None)
    @given(
        failures=st.integers(1, 4),
        raises=st.sampled_from([OtlpExportError, ConnectionError]),
        count=st.integers(1, 150),
    )
    def test_a_failed_export_fails_the_flush_and_the_retry_exports_everything(
        self, failures: int, raises: type[Exception], count: int
    ) -> None:
        flaky = FlakyTransport(failures, raises=raises)
        registry = CollectorRegistry()
        sink = OtelSink(OtlpSettings(), registry, transport=flaky)
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
        # A flush's requests go in parallel: one failed flush may spend several failures.
        assert 1 <= sample(registry, EXPORT_FAILURES_TOTAL) <= failures
        expected = set(exported_ids([sdk_request(turns).SerializeToString()]))
        assert set(exported_ids(flaky.sent)) == expected  # every record, at least once
        sent = len(flaky.sent)
        sink.flush()  # nothing pending: nothing sent again
        assert len(flaky.sent) == sent
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

    @pytest.mark.parametrize(
        ("script", "exported"),
        [([503, 429, 502, 504], True), ([400], False), ([500], False), ([503] * 6, False)],
    )
    def test_http_retries_what_the_official_exporter_retries(
        self, script: list[int], exported: bool
    ) -> None:
        with collector(script) as (endpoint, bodies):
            transport = HttpTransport(endpoint.export_url, timeout_s=60)
            waits: list[float] = []
            request = b""  # an empty request is a valid one
            try:
                retried(lambda left: transport._attempt(request, left), 60, "c", waits.append)
            except OtlpExportError:
                assert not exported
            else:
                assert exported
            assert len(bodies) == int(exported)
            # 429 says Retry-After: 0; the others wait 2**n seconds, +/-20%.
            for n, (status, wait) in enumerate(zip(script, waits, strict=False)):
                assert wait == 0 if status == 429 else 0.8 * 2**n <= wait <= 1.2 * 2**n

    def test_a_wait_past_the_export_time_fails_at_once(self) -> None:
        waits: list[float] = []
        with pytest.raises(OtlpExportError, match="gone"):
            retried(lambda left: (True, "gone", None), 0.5, "c", waits.append)
        assert waits == []


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
