"""A stand-in Ollama server speaking the HTTP API the model tier uses: tags, digests, generate."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TAG = "qwen3.5:2b"
DIGEST = "324d162be6ca5629ae4517c8710434d0bd2d665bc94dbad46e9af8fbf8a2f0df"
OTHER_DIGEST = "e" * 64


class StandInOllama:
    """Answers ALARM when the prompt shows a hedged turn or a failing safety check."""

    def __init__(self) -> None:
        self.digest = DIGEST
        self.switch_digest_after: int | None = None  # generate calls before the tag moves
        self.prompts: list[str] = []
        self.lock = threading.Lock()

    def tags(self) -> dict[str, Any]:
        with self.lock:
            return {"models": [{"name": TAG, "model": TAG, "digest": self.digest, "size": 1}]}

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = str(body["prompt"])
        with self.lock:
            self.prompts.append(prompt)
            if self.switch_digest_after == len(self.prompts):
                self.digest = OTHER_DIGEST
        alarm = '"safety_passed":false' in prompt or '"hedge_injected":true' in prompt
        return {"model": body["model"], "response": "ALARM" if alarm else "OK", "done": True}


@contextmanager
def serving(fake: StandInOllama) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._reply(fake.tags() if self.path == "/api/tags" else None)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self._reply(fake.generate(body) if self.path == "/api/generate" else None)

        def _reply(self, payload: dict[str, Any] | None) -> None:
            data = json.dumps(payload or {"error": "not found"}).encode()
            self.send_response(200 if payload is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
