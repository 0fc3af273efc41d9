"""What the loopback API fakes share: a threaded HTTP server on a free port whose requests
are recorded, checked for a bearer token and answered by the fake's ``handle``.

A subclass sets ``token``, implements ``handle(method, path, query, body) -> (code, payload)``
(a str payload goes out as text/plain, anything else as JSON) and ``unauthorized()``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class FakeHTTP:
    token: str

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Authorization)
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        # stop() waits for the loop to see its request: up to one poll interval (0.5 s by
        # default, at every test's teardown)
        serve = {"poll_interval": 0.05}
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs=serve, daemon=True)

    def start(self) -> FakeHTTP:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, method: str, path: str, query: dict, body: Any) -> tuple[int, Any]:
        raise NotImplementedError

    def unauthorized(self) -> tuple[int, Any]:
        raise NotImplementedError


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHTTP

    def log_message(self, *args: Any) -> None:
        pass

    def _serve(self, method: str) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        auth = self.headers.get("Authorization")
        self.fake.requests.append((method, url.path, auth))
        if auth != f"Bearer {self.fake.token}":
            code, payload = self.fake.unauthorized()
        else:
            body = json.loads(raw) if raw else None
            code, payload = self.fake.handle(method, url.path, parse_qs(url.query), body)
        text = isinstance(payload, str)
        data = payload.encode() if text else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if text else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")
