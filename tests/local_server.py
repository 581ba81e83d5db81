"""What the tests' scripted HTTP servers share: a threaded server on 127.0.0.1, the script
fields every one of them takes, and a handler that reads and writes JSON.

`chat_server.py` (OpenAI chat, counting auth and concurrency) and `model_server.py` (both wire
formats, models, keys, tool calls) build on it; each runs in the test process (a thread) while
pytest runs in a pytester subprocess that talks to it over HTTP.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass
class Scripted:
    """How a server answers, the part every server takes; tests change it between runs."""

    latency: float = 0.0
    """Seconds before every reply."""
    statuses: list[int] = field(default_factory=list)
    """Statuses of the next chat requests, in order (each consumed once); then 200."""
    always: int | None = None
    """A status every chat request gets (after `statuses`), e.g. 500 until retries run out."""
    retry_after: str | None = None
    """The `Retry-After` header on 429 and 503 replies."""
    malformed: bool = False
    """200 replies whose body is not JSON."""

    def next_status(self) -> int:
        """The status of the next chat request (call it under the server's lock)."""
        return self.statuses.pop(0) if self.statuses else self.always or 200


class LocalServer:
    """A `ThreadingHTTPServer` on a free port of 127.0.0.1, serving from a daemon thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        """The OpenAI kind's base URL."""
        return self.root + "/v1"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class JsonHandler(BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1 with JSON bodies, silent."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out apart: no 40 ms ACK waits

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
        return body

    def send_json_head(
        self, status: int, length: int, headers: dict[str, str] | None = None
    ) -> None:
        """The status line and headers of a JSON reply of `length` bytes."""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()


def encoded(payload: Any) -> bytes:
    """A reply's body: bytes as they are (a malformed reply), anything else as JSON."""
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode()
