"""`os._exit` in the pytest process while it runs agent calls: never a silent success.

An in-process Python agent that calls `os._exit(0)` would end the session at once with status
0 and no summary, and CI would read the unfinished run as green. In a process that guards its
exits (`guard_exits()`: a lone pytest process; an xdist worker's death is a crash its
controller records), `os._exit` is replaced while at least one agent call runs in it (a call
abandoned at its deadline runs on in its thread, and counts until it ends), and is the real
one again when none does:

- called by an agent (in the thread of its call, a thread that only runs agent calls, or
  the asyncio task of a call awaited on the event loop), it raises `AgentExited` there
  instead: that attempt is an error, and the session goes on;
- called by anything else in this process with status 0, the process still exits, but with
  status 3 (pytest's internal error) and a line on the terminal saying why;
- called in another process (a forked child: multiprocessing ends its children with
  `os._exit`), it is the real one.

Its limit: only calls through `os._exit` while a call runs are seen. A reference taken before
(`from os import _exit`), `posix._exit`, C code calling `exit()`, and a thread the agent
started itself (it is not an agent call's thread: status 0 becomes 3; after the last call
ended it exits as it asks) are not turned into the attempt's error; an agent whose bare
`except:` catches `AgentExited` goes on running.
`--agenteval-isolate` or `-n N` run agents in processes whose death is always an error of the
attempt.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from contextvars import ContextVar

AGENT_THREADS = ("agenteval-attempt", "agenteval-call", "agenteval-event-loop")
"""Threads that only run agent calls (a pool's, a timed call's, the async agents' loop)."""
UNFINISHED_STATUS = 3

_real_exit = os._exit
_local = threading.local()
_awaited = ContextVar("agenteval_agent_call", default=False)
"""Set in the asyncio task of an agent call awaited on the event loop (whichever thread
runs the loop: the main thread may)."""


class AgentExited(BaseException):
    """An agent called `os._exit` in the pytest process. A BaseException, so an agent's own
    `except Exception` does not swallow it."""


def in_agent_call(running: bool) -> bool:
    """Mark this thread as running an agent call (or not any more); returns what it was
    (a plain call, not a context manager: it is on every attempt's path). In a process that
    guards its exits, the first call to start replaces `os._exit` and the last to end puts
    the real one back."""
    before: bool = getattr(_local, "agent", False)
    _local.agent = running
    if running != before:
        _state.calls(1 if running else -1)
    return before


def agent_calls(change: int) -> None:
    """One more (1) or one fewer (-1) agent call runs, awaited on the event loop: calls
    interleave there, so the mark is the call's own task's (a context variable), not the
    thread's."""
    _awaited.set(change > 0)
    _state.calls(change)


class _Guard:
    """The process's guard: the replacement, and how many agent calls run now."""

    def __init__(self) -> None:
        self.guarded: Callable[[int], None] | None = None
        self.running = 0
        self.lock = threading.Lock()

    def calls(self, change: int) -> None:
        with self.lock:
            self.running += change
            if self.guarded is not None and self.running == (1 if change > 0 else 0):
                os._exit = self.guarded if change > 0 else _real_exit  # type: ignore[assignment]


_state = _Guard()


def guard_exits(say: Callable[[str], None]) -> None:
    """From now on, replace `os._exit` in this process while an agent call runs (see the
    module's docstring); `say` prints a line on the terminal, also while output is captured.
    `unguard_exits` ends it."""
    session = os.getpid()

    def guarded_exit(status: int) -> None:
        if os.getpid() != session:
            _real_exit(status)
        if _in_agent():
            raise AgentExited(
                f"the agent called os._exit({status}) in the pytest process; an agent that "
                "must end its process runs as a command, or with --agenteval-isolate"
            )
        if status == 0:
            with contextlib.suppress(Exception):  # the exit must happen whatever
                say(
                    "agenteval: os._exit(0) was called in the pytest process while the run "
                    f"was unfinished; exiting with status {UNFINISHED_STATUS}, not success"
                )
            status = UNFINISHED_STATUS
        _real_exit(status)

    with _state.lock:
        _state.guarded = guarded_exit
        if _state.running:
            os._exit = guarded_exit  # type: ignore[assignment]


def unguard_exits() -> None:
    """The session is over: `os._exit` is the real one, and stays so."""
    with _state.lock:
        _state.guarded = None
        os._exit = _real_exit


def _in_agent() -> bool:
    if getattr(_local, "agent", False) or _awaited.get():
        return True
    return threading.current_thread().name.startswith(AGENT_THREADS)
