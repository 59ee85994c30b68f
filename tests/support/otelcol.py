"""The OpenTelemetry Collector built from deploy/otelcol/ (``make otelcol``), run for a test.

It listens for OTLP on two free loopback ports (gRPC, HTTP) and writes every
log record it receives to a JSON-lines file (the file exporter: one line per
export request, flushed every second). A missing binary fails the test.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import PROJECT_ROOT
from tests.support.jsonl import complete_json_lines
from tests.support.realparts import process
from turnaudit.local_broker import free_ports

BINARY = PROJECT_ROOT / "deploy/otelcol/bin/otelcol-turnaudit"
CONFIG = PROJECT_ROOT / "deploy/otelcol/config.yaml"


@dataclass(frozen=True)
class LogRecord:
    """One record as the collector wrote it: ids lowercase hex, attributes as plain values."""

    trace_id: str
    span_id: str
    event_name: str
    attributes: dict[str, Any]
    resource: dict[str, Any]


@dataclass(frozen=True)
class Collector:
    grpc_port: int
    http_port: int
    file: Path
    log: Path

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def records(self) -> list[LogRecord]:
        """Every log record written so far (the file exporter flushes every second)."""
        found = []
        for request in complete_json_lines(self.file):
            for resource_logs in request.get("resourceLogs", []):
                resource = attribute_values(resource_logs.get("resource", {}).get("attributes", []))
                for scope_logs in resource_logs.get("scopeLogs", []):
                    for record in scope_logs.get("logRecords", []):
                        found.append(
                            LogRecord(
                                trace_id=record.get("traceId", ""),
                                span_id=record.get("spanId", ""),
                                event_name=record.get("eventName", ""),
                                attributes=attribute_values(record.get("attributes", [])),
                                resource=resource,
                            )
                        )
        return found


def attribute_values(attributes: list[dict[str, Any]]) -> dict[str, Any]:
    """OTLP/JSON key-values as plain values (integers come as strings in OTLP/JSON)."""
    values: dict[str, Any] = {}
    for item in attributes:
        value = item.get("value", {})
        if "stringValue" in value:
            values[item["key"]] = value["stringValue"]
        elif "boolValue" in value:
            values[item["key"]] = value["boolValue"]
        elif "intValue" in value:
            values[item["key"]] = int(value["intValue"])
        elif "doubleValue" in value:
            values[item["key"]] = float(value["doubleValue"])
        else:
            values[item["key"]] = value
    return values


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def running_collector(
    folder: Path,
    *,
    ports: tuple[int, int] | None = None,
    name: str = "evaluations",
    timeout: float = 30,
) -> Iterator[Collector]:
    """The collector on free loopback ports (or ``ports``: gRPC, HTTP), writing
    ``<name>.jsonl`` (truncated at start), stopped (SIGTERM) when the block ends."""
    assert BINARY.exists(), f"{BINARY} not found: run `make otelcol` (needs the Go toolchain)"
    grpc_port, http_port = ports or free_ports(2)
    collector = Collector(
        grpc_port, http_port, folder / f"{name}.jsonl", folder / f"{name}.otelcol.log"
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "OTELCOL_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}",
        "OTELCOL_HTTP_ENDPOINT": f"127.0.0.1:{http_port}",
        "OTELCOL_FILE": str(collector.file),
    }
    with process([str(BINARY), "--config", str(CONFIG)], collector.log, env) as proc:
        deadline = time.monotonic() + timeout
        while not (_listening(grpc_port) and _listening(http_port)):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the collector did not start:\n{collector.log.read_text()[-3000:]}"
                )
            time.sleep(0.05)
        yield collector
