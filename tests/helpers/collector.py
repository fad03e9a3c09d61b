"""A stand-in OTLP/HTTP collector: accepts every POST and keeps its path and body."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        self.server.bodies.append(self.path.encode() + b" " + self.rfile.read(length))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class _Server(HTTPServer):
    bodies: list[bytes]


@contextmanager
def collector() -> Iterator[tuple[str, list[bytes]]]:
    """Yields the collector's base URL and the list its requests land in ("PATH BODY")."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.bodies
    finally:
        server.shutdown()
