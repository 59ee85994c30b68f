"""OTLP log export without the OpenTelemetry SDK: an encoded ``ExportLogsServiceRequest``
sent to the collector as the official exporters send it, and retried as they retry.

HTTP/protobuf: a POST of ``application/x-protobuf`` to the logs URL (``requests``);
retryable: 429, 502, 503, 504 and a lost connection (a stale pooled connection is tried
again at once). gRPC: the unary call ``LogsService/Export`` with the request's bytes as
they are (``grpcio``, no generated stub); retryable: the status codes the official
exporter retries. Between attempts ``2**n`` seconds with +/-20% jitter (a server's
``Retry-After`` where it gives one), at most ``MAX_ATTEMPTS`` attempts and never past the
export's ``timeout_s``; then ``OtlpExportError``.
"""

from __future__ import annotations

import random
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol

import requests

from turnaudit.consumers.runtime.otel_settings import OtlpProtocol, OtlpSettings
from turnaudit.errors import TurnAuditError

EXPORT_METHOD = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
MAX_ATTEMPTS = 6
RETRYABLE_HTTP = frozenset({429, 502, 503, 504})
RETRYABLE_GRPC = frozenset(
    {
        "CANCELLED",
        "DEADLINE_EXCEEDED",
        "RESOURCE_EXHAUSTED",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNAVAILABLE",
        "DATA_LOSS",
    }
)
_JITTER = 0.2


class OtlpExportError(TurnAuditError):
    """An OTLP export of this flush failed: the batch is retried."""


# One attempt, given the time left: None when the collector took the request, else
# (whether to try again, why not, the server's own delay before the next try or None).
Attempt = Callable[[float], "tuple[bool, str, float | None] | None"]


class Transport(Protocol):
    """Sends one encoded ``ExportLogsServiceRequest``; raises ``OtlpExportError``."""

    def send(self, request: bytes) -> None: ...

    def close(self) -> None: ...


def retried(
    attempt: Attempt, timeout_s: float, where: str, sleep: Callable[[float], None] = time.sleep
) -> None:
    """``attempt`` until it succeeds, fails for good, or the next wait would pass the
    deadline (the official exporters' loop)."""
    deadline = time.monotonic() + timeout_s
    for n in range(MAX_ATTEMPTS):
        outcome = attempt(max(deadline - time.monotonic(), 0.0))
        if outcome is None:
            return
        retryable, why, server_delay = outcome
        delay = (
            server_delay
            if server_delay is not None
            else 2**n * random.uniform(1 - _JITTER, 1 + _JITTER)  # noqa: S311 - jitter, not a secret
        )
        if not retryable or n + 1 == MAX_ATTEMPTS or delay > deadline - time.monotonic():
            raise OtlpExportError(f"OTLP export to {where} failed: {why}")
        sleep(delay)


class HttpTransport:
    """OTLP/HTTP with protobuf bodies, one pooled session."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self._url = url
        self._timeout_s = timeout_s
        self._session = requests.Session()
        self._session.headers["Content-Type"] = "application/x-protobuf"

    def send(self, request: bytes) -> None:
        retried(lambda left: self._attempt(request, left), self._timeout_s, self._url)

    def _attempt(self, request: bytes, left: float) -> tuple[bool, str, float | None] | None:
        try:
            response = self._post(request, left)
        except requests.ConnectionError:
            try:  # a stale pooled connection: at once, once
                response = self._post(request, left)
            except requests.RequestException as exc:
                return isinstance(exc, requests.ConnectionError | requests.Timeout), repr(exc), None
        except requests.RequestException as exc:
            return isinstance(exc, requests.Timeout), repr(exc), None
        if 200 <= response.status_code < 400:
            return None
        retry_after = response.headers.get("Retry-After", "")
        delay = float(retry_after) if retry_after.isdigit() else None
        return response.status_code in RETRYABLE_HTTP, f"HTTP {response.status_code}", delay

    def _post(self, request: bytes, left: float) -> requests.Response:
        return self._session.post(self._url, data=request, timeout=max(left, 0.001))

    def close(self) -> None:
        self._session.close()


class GrpcTransport:
    """OTLP/gRPC: ``LogsService/Export`` on one channel, the bytes passed through."""

    def __init__(self, endpoint: str, timeout_s: float, *, insecure: bool) -> None:
        import grpc  # type: ignore[import-untyped]  # noqa: PLC0415 - grpcio ships no stubs; it loads only when chosen

        self._grpc: Any = grpc
        self._where = endpoint
        self._target = urllib.parse.urlsplit(endpoint).netloc
        self._insecure = insecure
        self._timeout_s = timeout_s
        self._connect()

    def _connect(self) -> None:
        grpc = self._grpc
        self._channel = (
            grpc.insecure_channel(self._target)
            if self._insecure
            else grpc.secure_channel(self._target, grpc.ssl_channel_credentials())
        )
        # No serializers: the request goes as the bytes it is, the reply comes as bytes.
        self._export = self._channel.unary_unary(EXPORT_METHOD)

    def send(self, request: bytes) -> None:
        retried(lambda left: self._attempt(request, left), self._timeout_s, self._where)

    def _attempt(self, request: bytes, left: float) -> tuple[bool, str, float | None] | None:
        try:
            self._export(request, timeout=max(left, 0.001))
        except self._grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, self._grpc.Call) else None
            name = code.name if code is not None else "UNKNOWN"
            if name == "UNAVAILABLE":
                # A new channel, as the official exporter makes: the old one may wait out
                # its reconnect backoff long after the collector is back.
                self._channel.close()
                self._connect()
            return name in RETRYABLE_GRPC, f"gRPC {name}", None
        return None

    def close(self) -> None:
        self._channel.close()


def otlp_transport(settings: OtlpSettings) -> Transport:
    """The transport of the settings' protocol."""
    if settings.protocol is OtlpProtocol.GRPC:
        return GrpcTransport(settings.export_url, settings.timeout_s, insecure=settings.insecure)
    return HttpTransport(settings.export_url, settings.timeout_s)
