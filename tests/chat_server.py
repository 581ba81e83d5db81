"""A real OpenAI-compatible chat server on 127.0.0.1 for tests: scripted, and counting.

It runs in the test process (a thread), so a test scripts it through `server.script` while
pytest runs in a pytester subprocess that talks to it over HTTP at `server.base_url`.

What a reply says is computed from the request, so graders pass or fail deterministically:
the last `<<...>>` segment of the last message is the reply (`What is 6*7? <<42>>` answers
`42`); without one the last message is echoed. A judge's prompt ends with the rubric, so a
rubric `... <<{"score": 0.9, "reason": "ok"}>>` makes the judge's verdict (a judge that obeys
the last instruction it reads). With `echo_key`, `{KEY}` in anything the server sends becomes
the API key of the request, as a careless server or proxy might quote it.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from local_server import JsonHandler, LocalServer, Scripted, encoded

REPLY = re.compile(r"<<(.*?)>>", re.DOTALL)


@dataclass
class Script(Scripted):
    """How the server answers; tests change it between runs."""

    model: str = "served-model-1"
    """The model name replies carry (what the server says it ran)."""
    usage: dict[str, Any] = field(
        default_factory=lambda: {"prompt_tokens": 100, "completion_tokens": 20}
    )
    """The usage object of every reply (and what the server bills)."""
    send_usage: bool = True
    """False: replies carry no `usage` (the server bills the call all the same)."""
    bill_worst: bool = False
    """Use (and bill) the request's bytes as its prompt tokens and its `max_tokens` as its
    completion tokens: what a client reserves for the call, so its bill is that reservation."""
    price: tuple[float, float] = (0.0, 0.0)
    """Dollars per million prompt and completion tokens the server bills."""
    echo_auth_in_errors: bool = False
    """Error bodies quote the Authorization header, as a careless proxy might."""
    error_message: str = "scripted status {status}"
    """The message of error replies (`{status}` is the status)."""
    echo_key: bool = False
    """`{KEY}` in a reply or an error body is replaced by the request's API key."""
    dribble: float = 0.0
    """Seconds between the bytes of a 200 reply's body (a server that trickles its answer:
    every read gets a byte in time, so only a wall-clock deadline ends the call)."""

    def billed(self, body: dict[str, Any], size: int) -> float:
        """Dollars a request of `size` bytes costs (a usage that is no count bills nothing)."""
        usage = self.used(body, size)
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not isinstance(prompt, int) or not isinstance(completion, int):
            return 0.0
        return (prompt * self.price[0] + completion * self.price[1]) / 1e6

    def used(self, body: dict[str, Any], size: int) -> dict[str, Any]:
        """The usage of a request of `size` bytes (what the server bills)."""
        if not self.bill_worst:
            return self.usage
        limit = body.get("max_tokens", body.get("max_completion_tokens")) or 0
        return {"prompt_tokens": size, "completion_tokens": limit}


class ChatServer(LocalServer):
    """`POST /v1/chat/completions`, scripted by `script`, counting what it sees."""

    def __init__(self) -> None:
        self.script = Script()
        self.requests: list[dict[str, Any]] = []
        """Bodies of the requests seen, in arrival order."""
        self.auth: list[str] = []
        """Authorization headers seen."""
        self.max_concurrent = 0
        self.paid: list[float] = []
        """What each chat request the server took was billed (at its arrival: a client
        that then goes away is billed too)."""
        self._in_flight = 0
        self._lock = threading.Lock()
        super().__init__(_handler(self))

    @property
    def in_flight(self) -> int:
        """Chat requests being answered now."""
        with self._lock:
            return self._in_flight

    def bill(self) -> float:
        """Everything the server was paid so far."""
        with self._lock:
            return sum(self.paid)

    def reset(self, **script: Any) -> None:
        """A fresh script (keyword arguments set its fields) and zeroed counters."""
        with self._lock:
            self.script = Script(**script)
            self.requests, self.auth, self.max_concurrent, self.paid = [], [], 0, []

    def _enter(self, body: dict[str, Any], auth: str, size: int) -> tuple[int, Script]:
        with self._lock:
            self.requests.append(body)
            self.auth.append(auth)
            self._in_flight += 1
            self.max_concurrent = max(self.max_concurrent, self._in_flight)
            script = self.script
            status = script.next_status()
            if status == 200:
                self.paid.append(script.billed(body, size))
        return status, script

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def reply_body(self, body: dict[str, Any], script: Script, size: int = 0) -> dict[str, Any]:
        messages = body.get("messages") or [{"content": ""}]
        text = str(messages[-1].get("content", ""))
        found = REPLY.findall(text)
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": script.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": found[-1] if found else text},
                    "finish_reason": "stop",
                }
            ],
            **({"usage": _with_total(script.used(body, size))} if script.send_usage else {}),
        }


def _with_total(usage: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if isinstance(prompt, int) and isinstance(completion, int):
        return {**usage, "total_tokens": prompt + completion}
    return {**usage, "total_tokens": None}


def _handler(server: ChatServer) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            """The models list the probe asks for: every model is known (the model server,
            `model_server.py`, scripts unknown ones)."""
            name = self.path.rstrip("/").rpartition("/models/")[2]
            self._send(200, {"id": name, "object": "model"} if name else {"data": []})

        def do_POST(self) -> None:
            body = self.read_json()
            size = int(self.headers.get("Content-Length") or 0)
            status, script = server._enter(body, self.headers.get("Authorization", ""), size)
            try:
                time.sleep(script.latency)
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                elif status != 200:
                    self._error(status, script)
                elif script.malformed:
                    self._send(200, b"{this is not json")
                else:
                    reply = server.reply_body(body, script, size)
                    self._send(200, reply, dribble=script.dribble)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout): nothing to answer
            finally:
                server._leave()

        def _error(self, status: int, script: Script) -> None:
            message = script.error_message.replace("{status}", str(status))
            if script.echo_auth_in_errors:
                message += f" for {self.headers.get('Authorization')}"
            headers = {"Retry-After": script.retry_after} if script.retry_after else {}
            self._send(status, {"error": {"message": message, "type": "test"}}, headers)

        def _send(
            self,
            status: int,
            payload: Any,
            headers: dict[str, str] | None = None,
            dribble: float = 0.0,
        ) -> None:
            data = encoded(payload)
            if server.script.echo_key:
                key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                data = data.replace(b"{KEY}", key.encode())
            self.send_json_head(status, len(data), headers)
            if not dribble:
                self.wfile.write(data)
            for byte in range(len(data) if dribble else 0):
                self.wfile.write(data[byte : byte + 1])
                self.wfile.flush()
                time.sleep(dribble)

    return Handler
