"""A real model API on 127.0.0.1 for tests, speaking both wire formats, scripted and counting.

`POST /v1/chat/completions` (OpenAI) and `POST /v1/messages` (Anthropic), `GET /v1/models`
(the known models) and `GET /v1/models/NAME` (404 for a model not known; 401 for a bad key).
It runs in the test process (a thread), so a test scripts it through `server.script` while
pytest runs in a pytester subprocess (or this process) that talks to it at `server.base_url`
(OpenAI kind) or `server.root` (Anthropic kind).

What a reply says is computed from the request, so graders pass or fail deterministically:
the last `<<...>>` segment of the last message is the reply (`What is 6*7? <<42>>` answers
`42`); without one the last message is echoed. The Anthropic route refuses (400) a message
with empty content, as the real API does. `<<call NAME {json}>>` makes the reply a tool
call of NAME with those arguments instead (a tool result holding `<<done>>` then answers
`done`). `script.replies` are answered first, in order: each `{"text": ..., "tool_calls":
[{"name": ..., "arguments": {...}}]}`.

Counting: `requests` (bodies), `arrivals` (their times), `paths`, `max_concurrent`, `rate_limited` (429s sent).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from local_server import JsonHandler, LocalServer, Scripted, encoded

REPLY = re.compile(r"<<(.*?)>>", re.DOTALL)
CALL = re.compile(r"^call\s+([A-Za-z0-9_.-]+)\s*(.*)$", re.DOTALL)


@dataclass
class Script(Scripted):
    """How the server answers; tests change it between runs (`reset`)."""

    reject_above: int | None = None
    """429 for a request that arrives while this many or more are in flight already."""
    model: str | None = None
    """The model name replies carry (default: the model asked for)."""
    models: list[str] | None = None
    """Models the server knows: `GET /v1/models` lists them, a chat for another is a 404.
    None: every model is known. `GET /v1/models/NAME` answers 404 for a model not known."""
    list_models: bool = True
    """False: no `GET /v1/models` routes (a server the probe must send a request instead)."""
    api_key: str | None = None
    """The only key the server takes (Bearer or `x-api-key`); any other gets 401. None: any."""
    input_tokens: int = 100
    output_tokens: int = 20
    replies: list[dict[str, Any]] = field(default_factory=list)
    """Replies given first, in order (each consumed once)."""


class ModelServer(LocalServer):
    """Both APIs, scripted by `script`, counting what they see."""

    def __init__(self) -> None:
        self.script = Script()
        self.requests: list[dict[str, Any]] = []
        """Bodies of the chat requests seen, in arrival order."""
        self.arrivals: list[float] = []
        """When each chat request arrived (`time.monotonic()`), in arrival order."""
        self.paths: list[str] = []
        """Method and path of every request (`GET /v1/models`...)."""
        self.max_concurrent = 0
        self.rate_limited = 0
        self.connections = 0
        """TCP connections accepted."""
        self._in_flight = 0
        self._lock = threading.Lock()
        super().__init__(_handler(self))

    def reset(self, **script: Any) -> None:
        """A fresh script (keyword arguments set its fields) and zeroed counters."""
        with self._lock:
            self.script = Script(**script)
            self.requests, self.paths, self.arrivals = [], [], []
            self.max_concurrent = self.rate_limited = self.connections = 0

    def _enter(self, body: dict[str, Any]) -> tuple[int, Script]:
        with self._lock:
            self.requests.append(body)
            self.arrivals.append(time.monotonic())
            script = self.script
            above = script.reject_above is not None and self._in_flight >= script.reject_above
            self._in_flight += 1
            self.max_concurrent = max(self.max_concurrent, self._in_flight)
            status = script.next_status()
            if above and status == 200:
                status = 429
            if status == 429:
                self.rate_limited += 1
            known = script.models
            if status == 200 and known is not None and body.get("model") not in known:
                status = 404
        return status, script

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _next_reply(self, body: dict[str, Any], anthropic: bool) -> dict[str, Any]:
        with self._lock:
            scripted = self.script.replies.pop(0) if self.script.replies else None
        if scripted is not None:
            return scripted
        text = _last_text(body.get("messages") or [], anthropic)
        found = REPLY.findall(text)
        said = found[-1] if found else text
        call = CALL.match(said.strip())
        if call:
            arguments = json.loads(call.group(2) or "{}")
            return {"text": "", "tool_calls": [{"name": call.group(1), "arguments": arguments}]}
        return {"text": said}

    def openai_body(self, body: dict[str, Any], script: Script) -> dict[str, Any]:
        reply = self._next_reply(body, anthropic=False)
        n = len(self.requests)
        calls = [
            {
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))},
            }
            for i, c in enumerate(reply.get("tool_calls") or [])
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("text") or None}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": script.model or body.get("model"),
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
            ],
            "usage": {
                "prompt_tokens": script.input_tokens,
                "completion_tokens": script.output_tokens,
                "total_tokens": script.input_tokens + script.output_tokens,
            },
        }

    def anthropic_body(self, body: dict[str, Any], script: Script) -> dict[str, Any]:
        reply = self._next_reply(body, anthropic=True)
        n = len(self.requests)
        blocks: list[dict[str, Any]] = []
        if reply.get("text"):
            blocks.append({"type": "text", "text": reply["text"]})
        for i, c in enumerate(reply.get("tool_calls") or []):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{n}_{i}",
                    "name": c["name"],
                    "input": c.get("arguments", {}),
                }
            )
        calls = any(b["type"] == "tool_use" for b in blocks)
        return {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": script.model or body.get("model"),
            "content": blocks,
            "stop_reason": "tool_use" if calls else "end_turn",
            "usage": {"input_tokens": script.input_tokens, "output_tokens": script.output_tokens},
        }


def _last_text(messages: list[dict[str, Any]], anthropic: bool) -> str:
    if not messages:
        return ""
    content = messages[-1].get("content", "")
    if isinstance(content, list):  # Anthropic blocks: text, or tool results' content
        parts = [b.get("text") or b.get("content") or "" for b in content]
        return "".join(p if isinstance(p, str) else json.dumps(p) for p in parts)
    return str(content or "")


def _anthropic_problem(body: dict[str, Any]) -> dict[str, str] | None:
    """What the real Messages API refuses (400) of a request's messages: empty content but in
    a final assistant turn."""
    messages = body.get("messages") or []
    for i, message in enumerate(messages):
        final = i == len(messages) - 1 and message.get("role") == "assistant"
        if not message.get("content") and not final:
            return {
                "type": "invalid_request_error",
                "message": f"messages.{i}: all messages must have non-empty content except "
                "for the optional final assistant message",
            }
    return None


def _handler(server: ModelServer) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def setup(self) -> None:
            super().setup()
            with server._lock:
                server.connections += 1

        def _refused(self) -> bool:
            """401 for a key other than the script's (its message names no key)."""
            wanted = server.script.api_key
            given = self.headers.get("x-api-key") or self.headers.get("Authorization") or ""
            if wanted is None or given.removeprefix("Bearer ") == wanted:
                return False
            self._send(401, {"error": {"message": "Incorrect API key provided", "type": "auth"}})
            return True

        def do_GET(self) -> None:
            server.paths.append(f"GET {self.path}")
            if self._refused():
                return
            path = self.path.rstrip("/")
            known = server.script.models
            if not server.script.list_models or not path.startswith("/v1/models"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
            elif path.endswith("/models"):
                data = [{"id": m, "object": "model"} for m in known or []]
                self._send(200, {"object": "list", "data": data})
            elif "/models/" in path:
                name = unquote(path.rpartition("/models/")[2])
                if known is None or name in known:
                    self._send(200, {"id": name, "object": "model"})
                else:
                    message = f"The model '{name}' does not exist"
                    self._send(404, {"error": {"message": message, "type": "not_found"}})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            server.paths.append(f"POST {self.path}")
            body = self.read_json()
            if self._refused():
                return
            anthropic = self.path.endswith("/messages")
            if not anthropic and not self.path.endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            status, script = server._enter(body)
            self.entered = True
            try:
                time.sleep(script.latency)
                if status != 200:
                    message = f"scripted status {status} for model {body.get('model')!r}"
                    headers = {"Retry-After": script.retry_after} if script.retry_after else {}
                    self._send(status, {"error": {"message": message, "type": "test"}}, headers)
                elif script.malformed:
                    self._send(200, b"{this is not json")
                elif anthropic and (problem := _anthropic_problem(body)):
                    self._send(400, {"type": "error", "error": problem})
                elif anthropic:
                    self._send(200, server.anthropic_body(body, script))
                else:
                    self._send(200, server.openai_body(body, script))
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                self._left()

        def _left(self) -> None:
            """The request is no longer in flight: said before its reply's first byte is written
            (once the client has the whole reply it may send the next one at once)."""
            if getattr(self, "entered", False):
                self.entered = False
                server._leave()

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = encoded(payload)
            self._left()
            self.send_json_head(status, len(data), headers)
            self.wfile.write(data)

    return Handler
