"""A scripted model for the agent_loop example: an OpenAI-compatible chat API on 127.0.0.1.

It plays the repair session a capable model would: read add.sh, write the fix, run the
tests, submit. Which step comes next is read from the request (how many tool results the
conversation holds), so it keeps no state and serves any number of attempts at once.
`--steps FILE` plays another session (a JSON list of `[tool, arguments]` before the submit).

    python examples/agent_loop/server.py [--port 8765] [--latency 0.05] [--steps FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FIXED = "#!/bin/sh\n# Prints the sum of its two arguments.\necho $(( $1 + $2 ))\n"
Step = tuple[str, dict[str, Any]]
STEPS: list[Step] = [
    ("read_file", {"path": "add.sh"}),
    ("write_file", {"path": "add.sh", "content": FIXED}),
    ("bash", {"command": "sh test.sh"}),
]


def reply(request: dict[str, Any], steps: Sequence[Step] = STEPS) -> dict[str, Any]:
    """The chat completion answering `request`: the session's next step."""
    messages = request.get("messages") or []
    results = [m for m in messages if m.get("role") == "tool"]
    if len(results) < len(steps):
        name, arguments = steps[len(results)]
        call = {
            "id": f"call_{len(results)}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        if len(results) == 2:
            message["content"] = "Fixed the operator; running the tests."
    else:
        passed = bool(results) and str(results[-1].get("content", "")).startswith("exit status: 0")
        answer = "fixed add.sh: tests pass" if passed else "the tests still fail"
        submit = {"name": "submit", "arguments": json.dumps({"answer": answer})}
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_submit", "type": "function", "function": submit}],
        }
    return {
        "id": f"chatcmpl-{len(messages)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


def handler(latency: float, steps: Sequence[Step]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the agent reuses its connections
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            """The models list pytest-agenteval's probe asks for before the first attempt."""
            if self.path.rstrip("/") in ("/v1/models", "/v1/models/scripted"):
                model = {"id": "scripted", "object": "model"}
                listed = self.path.rstrip("/").endswith("/models")
                self._send(200, {"object": "list", "data": [model]} if listed else model)
            else:
                self._send(404, {"error": {"message": f"no model or route {self.path}"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if not self.path.endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            self.server.requests.append(body)  # type: ignore[attr-defined]
            time.sleep(latency)
            self._send(200, reply(body, steps))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


class Server(ThreadingHTTPServer):
    request_queue_size = 128  # the default 5 drops connects when 16 attempts open theirs at once


def serve(
    port: int = 8765, latency: float = 0.0, steps: Sequence[Step] = STEPS
) -> ThreadingHTTPServer:
    """The server, bound and ready (`serve_forever` it in a thread or here)."""
    server = Server(("127.0.0.1", port), handler(latency, steps))
    server.daemon_threads = True
    server.requests = []  # type: ignore[attr-defined]  # the bodies seen (for tests)
    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per reply")
    parser.add_argument("--steps", help="a JSON file of [tool, arguments] steps to play")
    options = parser.parse_args()
    steps = STEPS
    if options.steps:
        with open(options.steps) as f:
            steps = [(name, arguments) for name, arguments in json.load(f)]
    httpd = serve(options.port, options.latency, steps)
    print(f"scripted model at http://127.0.0.1:{httpd.server_address[1]}/v1", flush=True)
    httpd.serve_forever()
