"""A Schema Registry stand-in on a loopback port: GET /schemas/ids/<id> fails
``failures`` times (503), then answers with the schema (or 404 when not ``known``)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FlakyRegistry:
    def __init__(self, failures: int, schema_json: str, *, known: bool = True) -> None:
        self.failures = failures
        self.requests = 0
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.requests += 1
                if registry.requests <= registry.failures:
                    status, reply = 503, {"error_code": 50301, "message": "unavailable"}
                elif not known:
                    status, reply = 404, {"error_code": 40403, "message": "Schema not found"}
                else:
                    status, reply = 200, {"schema": schema_json}
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: object) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
