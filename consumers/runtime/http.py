"""The HTTP side of a service: ``/metrics``, ``/livez``, ``/readyz``, ``/healthz``.

``/healthz`` answers like ``/readyz`` (the one a load balancer or compose
health check wants); ``/livez`` only says whether the loop turns, for a
restart policy. Both give JSON with the reasons of a "no" and answer 503 then.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from turnaudit.consumers.runtime.health import HealthSource, Verdict


class ServiceHttp:
    def __init__(
        self, host: str, port: int, registry: CollectorRegistry, health: HealthSource
    ) -> None:
        routes: dict[str, Callable[[], Verdict]] = {
            "/livez": health.liveness,
            "/readyz": health.readiness,
            "/healthz": health.readiness,
        }
        self._server = ThreadingHTTPServer((host, port), _handler(registry, routes))
        self._server.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        threading.Thread(
            target=self._server.serve_forever, name="turnaudit-http", daemon=True
        ).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(
    registry: CollectorRegistry, routes: dict[str, Callable[[], Verdict]]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, CONTENT_TYPE_LATEST, generate_latest(registry))
            elif path in routes:
                verdict = routes[path]()
                body = json.dumps(verdict.body).encode()
                self._reply(200 if verdict.ok else 503, "application/json", body)
            else:
                self._reply(
                    404, "text/plain", b"not found: try /metrics, /healthz, /livez or /readyz\n"
                )

        def _reply(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes every few seconds would drown the service's own log

    return Handler
