"""The executor: how an attempt's agent call and its graders run, and how long they may take.

The executor owns all execution state of a process: the event loop async agents share (one
for the session, so clients may live across attempts; `LoopDriver` says which thread runs
it), the threads of timed sync calls, and the children an agent starts. Nothing of it is
module-global. `SerialExecutor` runs one attempt at a time, in pytest's order
(the behaviour every other executor must match).

Timeouts, and how hard they are:
- command agents: the program's process group is killed (hard);
- async agents: cancelled at the deadline; one that blocks the event loop is abandoned;
- sync callables: run in a thread of their own when a timeout is set; at the deadline the
  attempt ends, the thread is abandoned (Python cannot kill a thread; the AgentTimeout's
  `running_on` tells who must wait for its real end: the agent's limit slot stays held and
  its late answer's spend is counted) and the processes it
  started are killed: those whose parent is that thread (Linux keeps a child list per thread,
  so attempts side by side are told apart) and, in a serial run, any new child of the process.
  Under concurrency a process started by another thread the agent made is not known. One stuck
  in C code that holds the GIL stalls the process: run it with `--agenteval-isolate`, where
  each attempt is a child process and the deadline kills it;
- graders: see `call_with_deadline`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..core.errors import AgentTimeout
from ..core.identity import AttemptId
from ..core.model import AgentResult, Task
from .agents import Agent, AgentRef, AgentResolver, CommandAgent, as_result
from .driving import LoopDriver
from .exits import in_agent_call
from .process import child_pids, kill_running, kill_tree, thread_children

T = TypeVar("T")
LOOP_GRACE = 2.0
"""Seconds past an async agent's deadline before a blocked event loop is given up on."""


class Place(Protocol):
    """Where an attempt's environment lives, as an executor that runs the agent in another
    process must handle it."""

    def share(self) -> None:
        """Make what attempts share findable (not made) by another process, before the call."""

    def adopt(self) -> None:
        """Take on the environment the call made elsewhere, after it."""


class _Here:
    """The place of an unpickled call: its environment travelled with its Task."""

    def share(self) -> None:
        pass

    def adopt(self) -> None:
        pass


HERE = _Here()


@dataclass(slots=True)  # not frozen: made once per attempt, and frozen fields cost a setattr each
class AgentCall:
    """One agent call an executor carries out: the attempt it belongs to, the agent (named by
    a serialisable `AgentRef`), the agent-facing Task and the deadline.

    A call pickles (for an executor that runs it in another process) as its key, agent
    reference, Task (its data and its environment) and deadline; its `place` stays behind.
    The `agenteval_agent` fixture's agent does not travel: the copy's reference resolves only
    in the process that made it (declare the agent instead).
    """

    key: AttemptId
    """The attempt (dataset, task id, attempt index)."""
    agent: AgentRef
    """The agent: a declared spec and its folder, or the fixture's live agent (this process
    only); `AgentResolver.resolve` gives the agent itself."""
    task: Task
    """What the agent receives."""
    timeout: float | None
    """Seconds the call may take (None: no limit)."""
    place: Place = HERE
    """The attempt's environment, for an executor that runs the call elsewhere (not pickled)."""

    @property
    def label(self) -> str:
        """The agent as the record names it."""
        return self.agent.label

    def __reduce__(self) -> tuple[Any, ...]:
        return (AgentCall, (self.key, self.agent, self.task, self.timeout))


@runtime_checkable
class Executor(Protocol):
    """How agent calls run (chosen by `pytest_agenteval_make_executor`)."""

    def call_agent(self, call: AgentCall) -> AgentResult:
        """The agent's answer to one call, normalized; what the agent raises propagates (the
        attempt is an error), a timeout raises AgentTimeout."""
        ...

    def kill_running(self) -> int:
        """Kill what the calls in flight started (Ctrl-C's grace is over); how many."""
        ...

    def close(self) -> None:
        """Release what the executor holds (at session end)."""
        ...


@runtime_checkable
class LoopExecutor(Executor, Protocol):
    """An executor with an event loop on which the calls of async agents can be awaited
    (`--agenteval-concurrency` then runs them there, no thread waiting for each)."""

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop those calls run on (started on first use)."""
        ...

    def awaits(self, agent: AgentRef) -> bool:
        """Whether `acall_agent` can carry out a call of `agent` (an async agent)."""
        ...

    async def acall_agent(self, call: AgentCall) -> AgentResult:
        """`call_agent`, awaited on `event_loop()`."""
        ...


class SerialExecutor:
    """Runs agent calls in this process, each within its attempt's timeout: one at a time,
    or side by side in the threads of `--agenteval-concurrency` (`concurrent`)."""

    def __init__(self, agents: AgentResolver, concurrent: bool = False) -> None:
        self.agents = agents
        """Builds the agent a call names (once per spec) from its reference."""
        self.driver = LoopDriver()
        """The event loop async agents share, and who runs it."""
        self.concurrent = concurrent
        """Calls run side by side (`--agenteval-concurrency`): a timed-out sync agent's
        processes are told from its neighbours' only by the thread that started them."""
        self._async: dict[int, tuple[Agent, bool]] = {}

    def call_agent(self, call: AgentCall) -> AgentResult:
        return self.call(self.agents.resolve(call.agent), call.task, call.timeout)

    def call(self, agent: Agent, task: Task, timeout: float | None) -> AgentResult:
        """Call the agent once and normalize its answer; exceptions from the agent propagate
        unchanged (the attempt is an error), a timeout raises AgentTimeout."""
        if isinstance(agent, CommandAgent):
            return agent(task, timeout)
        if self._is_async(agent):
            return as_result(self._await(agent(task), timeout))
        started = time.monotonic()
        if timeout is None:
            value = agent(task)
        else:
            value = _call_in_thread(agent, task, timeout, any_new_child=not self.concurrent)
        if type(value) is not str and inspect.isawaitable(value):  # an ABC check per call
            left = None if timeout is None else max(timeout - (time.monotonic() - started), 0.0)
            value = self._await(value, left)
        return as_result(value)

    def awaits(self, agent: AgentRef) -> bool:
        resolved = self.agents.resolve(agent)
        return not isinstance(resolved, CommandAgent) and self._is_async(resolved)

    def blocks_loop(self, agent: AgentRef) -> bool:
        """Whether the agent's calls may block the event loop: all but those of an agent
        that says `blocks_loop = False` (it only awaits), which the main thread may run
        (`LoopDriver`)."""
        return getattr(self.agents.resolve(agent), "blocks_loop", True) is not False

    async def acall_agent(self, call: AgentCall) -> AgentResult:
        agent = self.agents.resolve(call.agent)
        if call.timeout is None:
            return as_result(await agent(call.task))
        return as_result(await _within(agent(call.task), call.timeout, _Ends()))

    def kill_running(self) -> int:
        """Kill what the calls in flight started (Ctrl-C's grace is over): the programs being
        waited on and the children of agent threads; returns how many."""
        killed = kill_running()
        for thread in threading.enumerate():
            if thread.name.startswith(("agenteval-attempt", "agenteval-call")):
                killed += sum(kill_tree(pid) for pid in thread_children(thread.native_id))
        return killed

    def _is_async(self, agent: Agent) -> bool:
        """Whether the agent is `async def` (inspect is slow; agents live all session)."""
        found = self._async.get(id(agent))
        if found is None or found[0] is not agent:
            found = self._async[id(agent)] = (agent, _is_async(agent))
        return found[1]

    def _await(self, awaitable: Awaitable[Any], timeout: float | None) -> Any:
        ends = _Ends()
        coroutine = _within(awaitable, timeout, ends)
        future = asyncio.run_coroutine_threadsafe(coroutine, self.event_loop())
        try:
            return future.result(None if timeout is None else timeout + LOOP_GRACE)
        except TimeoutError:
            if future.done():
                raise  # the agent's own TimeoutError
            future.cancel()
            timeout_error = AgentTimeout(
                f"agent timed out after {timeout:g}s; it blocks the event loop, so later "
                "async attempts of this process may time out too"
            )
            timeout_error.running_on = ends.running_on  # type: ignore[attr-defined]
            raise timeout_error from None
        except BaseException:
            future.cancel()
            raise

    def event_loop(self) -> asyncio.AbstractEventLoop:
        return self.driver.run_freely()  # the caller may block it, or wait from a thread

    def close(self) -> None:
        """Stop the event loop (at session end), letting async generators finish."""
        self.driver.close()


def _is_async(agent: Any) -> bool:
    return inspect.iscoroutinefunction(agent) or inspect.iscoroutinefunction(
        getattr(agent, "__call__", None)  # noqa: B004 - async callable objects
    )


async def _within(awaitable: Awaitable[Any], timeout: float | None, ends: _Ends) -> Any:
    deadline = asyncio.timeout(timeout)
    value = None
    try:
        async with deadline:
            value = await awaitable
            return value
    except TimeoutError:
        if deadline.expired():
            raise AgentTimeout(f"agent timed out after {timeout:g}s") from None
        raise
    finally:
        ends.end(value)


def _call_in_thread(agent: Agent, task: Task, timeout: float, any_new_child: bool = True) -> Any:
    """Call a sync agent in a thread of its own; at the deadline abandon it and kill the
    processes it started (`any_new_child`: also every new child of this process)."""
    before = child_pids() if any_new_child else set()
    try:
        return _in_thread(lambda: agent(task), timeout)
    except _Abandoned as abandoned:
        found = set(thread_children(abandoned.native_id))
        if any_new_child:
            found |= child_pids() - before
        killed = sum(kill_tree(pid) for pid in found)
        timeout_error = AgentTimeout(
            f"agent timed out after {timeout:g}s (abandoned thread; {killed} child "
            f"process{'' if killed == 1 else 'es'} killed)"
        )
        timeout_error.running_on = abandoned.running_on  # type: ignore[attr-defined]
        raise timeout_error from None


EndCallback = Callable[[Any], None]
RunningOn = Callable[[EndCallback], None]
"""Set on the AgentTimeout of a call abandoned at its deadline (as `running_on`): registers
a callback that gets the call's value (None if it raised) when the call really ends."""


class _Abandoned(TimeoutError):
    """A call in a thread overran its deadline; the thread runs on, abandoned."""

    def __init__(self, message: str, native_id: int | None, running_on: RunningOn) -> None:
        super().__init__(message)
        self.native_id = native_id
        """The abandoned thread's id for the kernel (its children are listed under it)."""
        self.running_on = running_on


class _Ends:
    """When a call ends, and what to do then."""

    def __init__(self) -> None:
        self.value: Any = None
        self._lock = threading.Lock()
        self._then: list[EndCallback] | None = []
        """Callbacks for the end; None once it came."""

    def end(self, value: Any) -> None:
        with self._lock:
            self.value = value
            then, self._then = self._then or [], None
        for callback in then:
            _quietly(callback, value)

    def running_on(self, callback: EndCallback) -> None:
        """Call `callback` with the value when the call ends (now, if it has)."""
        with self._lock:
            if self._then is not None:
                self._then.append(callback)
                return
        _quietly(callback, self.value)


def _quietly(callback: EndCallback, value: Any) -> None:
    with contextlib.suppress(Exception):
        callback(value)


def _in_thread(function: Callable[[], T], seconds: float) -> T:
    box: dict[str, Any] = {}
    ends = _Ends()

    def target() -> None:
        was = in_agent_call(True)  # an abandoned call runs on: its os._exit stays guarded
        try:
            box["value"] = function()
        except BaseException as exc:
            box["error"] = exc
        finally:
            in_agent_call(was)
            ends.end(box.get("value"))

    thread = threading.Thread(target=target, daemon=True, name="agenteval-call")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        message = f"took longer than {seconds:g}s (its thread is abandoned)"
        raise _Abandoned(message, thread.native_id, ends.running_on)
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


class _Deadline(BaseException):
    """Raised by the alarm inside a timed call; a BaseException so `except Exception` in the
    timed code does not swallow it."""


def call_with_deadline(function: Callable[[], T], seconds: float) -> T:
    """`function()`, stopped after `seconds` (raises TimeoutError).

    On the main thread an interval-timer alarm interrupts it even inside a long regular
    expression match (CPython checks signals there, while it keeps the GIL from every other
    thread). The alarm composes with other users of the timer, such as pytest-timeout's signal
    method: a timer that is already due sooner is left alone, and a later one is re-armed with
    its remaining time afterwards. Elsewhere the call runs in a thread that is abandoned at
    the deadline.
    """
    if threading.current_thread() is not threading.main_thread():
        return _in_thread(function, seconds)
    pending, interval = signal.getitimer(signal.ITIMER_REAL)
    if pending and pending <= seconds:
        return function()  # another timer fires first; its owner stops what overruns

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Deadline

    previous = signal.signal(signal.SIGALRM, on_alarm)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return function()
    except _Deadline:
        raise TimeoutError(f"took longer than {seconds:g}s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
        if pending:
            left = max(pending - (time.monotonic() - started), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, left, interval)
