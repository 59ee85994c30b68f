"""Where ``turnaudit sink otel`` sends its log records: the OTLP endpoint and protocol.

Read from ``TURNAUDIT_OTLP_ENDPOINT`` (the collector's base URL, ``http://host:port``;
``https`` for TLS), ``TURNAUDIT_OTLP_PROTOCOL`` (``grpc``, the default, or ``http``:
OTLP/HTTP with protobuf bodies, posted to ``<endpoint>/v1/logs`` unless the endpoint
names a path of its own) and ``TURNAUDIT_OTLP_TIMEOUT_MS`` (one export's time,
retries included). No OpenTelemetry SDK import here: every service reads its settings.
"""

from __future__ import annotations

import enum
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from turnaudit.errors import ConfigurationError

# _int: the project's one parser of whole-number variables, same messages everywhere.
from turnaudit.settings import ENV_PREFIX, _int

LOGS_PATH = "/v1/logs"  # OTLP/HTTP's logs path under the collector's base URL


class OtlpProtocol(enum.StrEnum):
    GRPC = "grpc"
    HTTP = "http"


# The collector's OTLP ports by convention (gRPC 4317, HTTP 4318).
DEFAULT_ENDPOINTS = {
    OtlpProtocol.GRPC: "http://localhost:4317",
    OtlpProtocol.HTTP: "http://localhost:4318",
}


@dataclass(frozen=True)
class OtlpSettings:
    protocol: OtlpProtocol = OtlpProtocol.GRPC
    endpoint: str = DEFAULT_ENDPOINTS[OtlpProtocol.GRPC]  # the collector's base URL
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        _checked_endpoint(self.endpoint, self.protocol)

    @property
    def insecure(self) -> bool:
        """Plain text (no TLS) to an ``http://`` endpoint."""
        return urllib.parse.urlsplit(self.endpoint).scheme == "http"

    @property
    def export_url(self) -> str:
        """What the exporter is given: the base URL for gRPC; for HTTP the logs URL."""
        if self.protocol is OtlpProtocol.GRPC:
            return self.endpoint
        parts = urllib.parse.urlsplit(self.endpoint)
        if parts.path in ("", "/"):
            return urllib.parse.urlunsplit(parts._replace(path=LOGS_PATH))
        return self.endpoint

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> OtlpSettings:
        raw = (env.get(ENV_PREFIX + "OTLP_PROTOCOL") or OtlpProtocol.GRPC.value).strip()
        try:
            protocol = OtlpProtocol(raw.lower())
        except ValueError:
            choices = "|".join(p.value for p in OtlpProtocol)
            raise ConfigurationError(
                f"{ENV_PREFIX}OTLP_PROTOCOL={raw!r}: choose {choices}"
            ) from None
        endpoint = (env.get(ENV_PREFIX + "OTLP_ENDPOINT") or "").strip()
        return cls(
            protocol=protocol,
            endpoint=endpoint or DEFAULT_ENDPOINTS[protocol],
            timeout_s=_int(env, "OTLP_TIMEOUT_MS", 10_000, minimum=100, maximum=600_000) / 1000,
        )


def _checked_endpoint(endpoint: str, protocol: OtlpProtocol) -> None:
    """One line naming what is wrong with the endpoint, or nothing."""
    name = f"{ENV_PREFIX}OTLP_ENDPOINT={endpoint!r}"
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"{name}: give the collector's URL, http://host:port")
    try:
        port = parts.port
    except ValueError:
        raise ConfigurationError(f"{name}: the port is not a number from 1 to 65535") from None
    if port == 0:
        raise ConfigurationError(f"{name}: the port is not a number from 1 to 65535")
    if protocol is OtlpProtocol.GRPC and parts.path not in ("", "/"):
        raise ConfigurationError(f"{name}: an OTLP/gRPC endpoint has no path")
    if parts.query or parts.fragment:
        raise ConfigurationError(f"{name}: no query or fragment")
