"""A loopback TCP forwarder: a broker address that can be made to appear."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpForwarder:
    """Forwards ``127.0.0.1:port`` to ``upstream`` once ``start()`` is called."""

    def __init__(self, port: int, upstream: tuple[str, int]) -> None:
        self.port = port
        self._upstream = upstream
        self._server: socket.socket | None = None
        self._closing = threading.Event()

    def start(self) -> None:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(16)
        self._server = server
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.close()

    def _accept(self) -> None:
        assert self._server is not None
        while not self._closing.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
