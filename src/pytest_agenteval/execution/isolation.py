"""`--agenteval-isolate`: each Python agent call in a child process of its own.

xdist isolates workers; this isolates attempts. The child is forked, so the agent (also one a
session fixture made) is already loaded there. It runs in its own session, so the deadline
kills it with everything it started, and a child that dies (os._exit, a segfault in a C
extension, the OOM killer) is one errored attempt instead of a dead pytest session.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from typing import Any

from ..core.errors import AgentError, AgentTimeout, AttemptStopped
from ..core.model import AgentResult, Task
from ..core.trace import Trace, read_events
from .agents import Agent, CommandAgent
from .executor import AgentCall, SerialExecutor
from .sandboxes import EnvironmentUnavailable


class IsolatedAgentError(AgentError):
    """The agent raised in its child process; its traceback came back as text."""

    def __init__(
        self, message: str, *, detail: str, error_type: str, phase: str | None = None
    ) -> None:
        super().__init__(message, detail=detail)
        self.error_type = error_type
        if phase is not None:  # where it happened, when the error knew (a sandbox's)
            self.phase = phase

    def render(self) -> str:
        return self.detail


class IsolatingExecutor(SerialExecutor):
    """Runs every callable agent call in a forked child; commands are processes already."""

    def call_agent(self, call: AgentCall) -> AgentResult:
        call.place.share()  # a forked agent must find, not make, what attempts share
        try:
            return self.call(self.agents.resolve(call.agent), call.task, call.timeout)
        finally:
            call.place.adopt()

    def call(self, agent: Agent, task: Task, timeout: float | None) -> AgentResult:
        if isinstance(agent, CommandAgent):
            return agent(task, timeout)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_end)
            _child(SerialExecutor(self.agents), agent, task, write_end)
        os.close(write_end)
        try:
            data, timed_out = _read_until(read_end, timeout)
        except BaseException:
            _kill(pid)
            raise
        finally:
            os.close(read_end)
        if timed_out:
            _kill(pid)
            raise AgentTimeout(
                f"agent timed out after {timeout:g}s (its process and all it started were killed)"
            )
        _, status = os.waitpid(pid, 0)
        return _answer(data, status, task.trace)


def _child(executor: SerialExecutor, agent: Agent, task: Task, out: int) -> None:
    """Call the agent (with a fresh in-process executor), send back its answer or its error
    as JSON, with the events it wrote to its trace, and exit. The parent counts the events'
    spend (a lock another thread held at the fork would hang the child)."""
    code = 0
    task.trace.on_event = task.trace.on_phase = None
    try:
        os.setsid()
        try:
            result = executor.call(agent, task, None)
        except AttemptStopped:  # the loop stopped between turns: the trace says which limit
            result = AgentResult(output="")
        payload: dict[str, Any] = {"result": result.model_dump(mode="json")}
    except BaseException as exc:
        from .attempt import error_text

        payload = {
            "error": error_text(exc),
            "type": type(exc).__name__,
            "error_type": getattr(exc, "error_type", type(exc).__name__),
            "phase": exc.phase if isinstance(exc, EnvironmentUnavailable) else None,
        }
    payload["trace"] = task.trace.to_json()
    try:
        data = json.dumps(payload, ensure_ascii=True).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(out, view) :]
    except BaseException:
        code = 70
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _read_until(fd: int, timeout: float | None) -> tuple[bytes, bool]:
    """Everything written to `fd` until the writer closes it; (data, timed out)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return b"".join(chunks), True
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)


def _kill(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _answer(data: bytes, status: int, trace: Trace) -> AgentResult:
    """The child's answer, or the error that says how it ended; the events it wrote join
    the attempt's trace."""
    if not data:
        raise AgentError(
            f"the attempt's process died without an answer: {_how_it_ended(status)}",
            detail="os._exit, a crash in a C extension, or the OOM killer; the session goes on",
        )
    payload = json.loads(data)
    events = read_events(payload.get("trace"))
    if events:
        trace.extend(events)
    if "error" in payload:
        raise IsolatedAgentError(
            f"agent raised {payload['type']}",
            detail=payload["error"],
            error_type=payload.get("error_type", payload["type"]),
            phase=payload.get("phase"),
        )
    return AgentResult.model_validate(payload["result"])


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return f"killed by signal {number} ({signal.Signals(number).name})"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"
