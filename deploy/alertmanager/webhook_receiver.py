"""An example Alertmanager webhook receiver: one JSON line per notification.

Standard library only, so it runs in any Python 3.11 image. Alertmanager POSTs
each notification to ``/<receiver>`` (``/page``, ``/ticket`` in
alertmanager.yml); the line written is ``{"receiver": ..., "notification":
<Alertmanager's webhook payload>}``. The suite's alert delivery test runs this
very file as the receiving end.

    python webhook_receiver.py --port 9095 [--host 0.0.0.0] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TextIO


def serve(host: str, port: int, out: TextIO) -> None:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                notification = json.loads(self.rfile.read(length) or b"null")
            except ValueError:
                self.send_response(400)
                self.end_headers()
                return
            line = json.dumps({"receiver": self.path.strip("/"), "notification": notification})
            with lock:
                out.write(line + "\n")
                out.flush()
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            """Requests are not logged: the notifications are the output."""

    server = ThreadingHTTPServer((host, port), Handler)
    print(f"listening on {host}:{server.server_address[1]}", file=sys.stderr, flush=True)
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9095)
    parser.add_argument("--output", help="append the lines to this file (default: stdout)")
    args = parser.parse_args()
    if args.output:
        with open(args.output, "a", encoding="utf-8") as out:
            serve(args.host, args.port, out)
    else:
        serve(args.host, args.port, sys.stdout)


if __name__ == "__main__":
    main()
