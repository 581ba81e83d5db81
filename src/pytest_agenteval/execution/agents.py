"""The agent under test: resolving specs to callables, and `run`, the one execution seam."""

from __future__ import annotations

import asyncio
import inspect
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import AgentError, AgentTimeout
from ..core.importing import UnresolvedReference, resolve_callable
from ..core.model import AgentResult, CallableAgentSpec, CommandAgentSpec, Task
from ..core.text import excerpt
from .process import run_program


class Agent(Protocol):
    """The system under test: called once per attempt, sync or `async def`.

    Returns the output as a string, or an AgentResult (output, usage, transcript, artifacts).
    """

    def __call__(self, task: Task) -> Any: ...


class CommandAgent:
    """Runs a program per attempt in the attempt's workspace; stdout is the output."""

    def __init__(self, spec: CommandAgentSpec, dataset_root: Path) -> None:
        self.spec = spec
        self.dataset_root = dataset_root

    def __call__(self, task: Task, timeout: float | None = None) -> AgentResult:
        argv = [self._fill(arg, task) for arg in self.spec.command]
        stdin = json.dumps(task.as_json()).encode() if self.spec.stdin == "json" else None
        env = {
            **self.spec.env,
            "AGENTEVAL_TASK_ID": task.id,
            "AGENTEVAL_ATTEMPT": str(task.attempt),
            "AGENTEVAL_SEED": str(task.seed),
        }
        try:
            done = run_program(argv, cwd=task.workspace, stdin=stdin, env=env, timeout=timeout)
        except OSError as exc:
            raise AgentError(f"agent command {argv[0]!r} could not start: {exc}") from None
        if done.timed_out:
            raise AgentTimeout(
                f"agent command timed out after {timeout:g}s (process group killed)",
                detail=excerpt(done.tail(), 2000),
            )
        if done.returncode != 0:
            raise AgentError(
                f"agent command exited with status {done.returncode}",
                detail=excerpt(done.tail(), 2000),
            )
        if self.spec.output == "json":
            try:
                return AgentResult.model_validate_json(done.stdout)
            except ValueError as exc:
                raise AgentError(
                    "agent command printed no valid AgentResult JSON", detail=str(exc)
                ) from None
        return AgentResult.model_construct(output=done.stdout)

    def _fill(self, arg: str, task: Task) -> str:
        if "{" not in arg:
            return arg
        text = task.input if isinstance(task.input, str) else json.dumps(task.input)
        for key, value in (
            ("{input}", text),
            ("{task_id}", task.id),
            ("{attempt}", str(task.attempt)),
            ("{seed}", str(task.seed)),
            ("{dataset}", str(self.dataset_root)),
            ("{python}", sys.executable),
        ):
            arg = arg.replace(key, value)
        return arg.replace("{workspace}", str(task.workspace)) if "{workspace}" in arg else arg


def make_agent(spec: CallableAgentSpec | CommandAgentSpec, dataset_root: Path) -> Agent:
    """The agent a spec names; raises AgentError when it cannot be found."""
    if isinstance(spec, CommandAgentSpec):
        return CommandAgent(spec, dataset_root)
    try:
        return resolve_callable(spec.callable, dataset_root)
    except UnresolvedReference as exc:
        raise AgentError(f"cannot load agent {spec.callable!r}: {exc}") from None
    except Exception as exc:
        raise AgentError(f"importing agent {spec.callable!r} failed: {exc!r}") from exc


def run(agent: Agent, task: Task, timeout: float | None) -> AgentResult:
    """Call the agent for one attempt and normalize its answer.

    Exceptions from the agent propagate unchanged (the attempt is an error); a timeout raises
    AgentTimeout. This is the seam a later concurrent executor replaces.
    """
    if isinstance(agent, CommandAgent):
        value = agent(task, timeout)
    elif timeout is None:
        value = agent(task)
    else:
        value = _run_sync_with_timeout(agent, task, timeout)
    if inspect.isawaitable(value):
        value = _event_loop().run_until_complete(_with_timeout(value, timeout))
    return as_result(value)


def as_result(value: Any) -> AgentResult:
    """An agent's return value as an AgentResult; anything else is an AgentError."""
    if isinstance(value, str):
        return AgentResult.model_construct(
            output=value, usage=None, transcript=None, artifacts=None
        )
    if isinstance(value, AgentResult):
        return value
    if isinstance(value, dict) and "output" in value:
        try:
            return AgentResult.model_validate(value)
        except ValueError as exc:
            raise AgentError(
                "agent returned an invalid AgentResult mapping", detail=str(exc)
            ) from None
    raise AgentError(
        f"agent returned {type(value).__name__} {excerpt(repr(value), 80)}",
        detail="return the output as a str, or an AgentResult",
    )


class _Alarm(BaseException):
    """Raised by SIGALRM inside the agent; a BaseException so `except Exception` won't eat it."""


def _run_sync_with_timeout(agent: Agent, task: Task, timeout: float) -> Any:
    if threading.current_thread() is not threading.main_thread():
        return _run_in_thread(agent, task, timeout)

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Alarm

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return agent(task)
    except _Alarm:
        raise AgentTimeout(f"agent timed out after {timeout:g}s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run_in_thread(agent: Agent, task: Task, timeout: float) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = agent(task)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name=f"agenteval-{task.id}")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AgentTimeout(f"agent timed out after {timeout:g}s (its thread is abandoned)")
    if "error" in box:
        raise box["error"]
    return box["value"]


_loop: asyncio.AbstractEventLoop | None = None


def _event_loop() -> asyncio.AbstractEventLoop:
    """One event loop per process, so async agents may keep clients across attempts."""
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
    return _loop


async def _with_timeout(awaitable: Any, timeout: float | None) -> Any:
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            return await awaitable
    except TimeoutError:
        if deadline.expired():
            raise AgentTimeout(f"agent timed out after {timeout:g}s") from None
        raise


def close() -> None:
    """Close the async agents' event loop (at session end)."""
    global _loop
    if _loop is not None and not _loop.is_closed():
        _loop.run_until_complete(_loop.shutdown_asyncgens())
        _loop.close()
    _loop = None
