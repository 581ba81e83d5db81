"""The agent under test: the Agent protocol, the built-in kinds (Python callables and
commands), and the registry that turns an agent spec into an agent."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import AgentError, AgentTimeout
from ..core.importing import UnresolvedReference, resolve_callable
from ..core.model import AgentResult, AnyAgentSpec, CallableAgentSpec, CommandAgentSpec, Task
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


BUILTIN_AGENT_KINDS = ("callable", "command")
MakeAgent = Callable[[AnyAgentSpec, Path], Agent]
"""Builds the agent a spec names (plugins first, built-ins last); raises AgentError."""


def make_builtin_agent(spec: AnyAgentSpec, dataset_root: Path) -> Agent | None:
    """The agent a built-in spec names; None for a kind a plugin must provide."""
    if isinstance(spec, CommandAgentSpec):
        return CommandAgent(spec, dataset_root)
    if not isinstance(spec, CallableAgentSpec):
        return None
    try:
        return resolve_callable(spec.callable, dataset_root)
    except UnresolvedReference as exc:
        raise AgentError(f"cannot load agent {spec.callable!r}: {exc}") from None
    except Exception as exc:
        raise AgentError(f"importing agent {spec.callable!r} failed: {exc!r}") from exc


def unknown_agent_kind(kind: str, known: list[str]) -> AgentError:
    """The error for an agent kind no plugin provides."""
    return AgentError(
        f"unknown agent kind {kind!r}",
        detail=f"built-in kinds: {', '.join(sorted(known))}; other kinds come from plugins "
        "implementing pytest_agenteval_make_agent (is the plugin installed?)",
    )


def spec_label(spec: AnyAgentSpec) -> str:
    """How records and summaries name an agent spec."""
    if isinstance(spec, CommandAgentSpec):
        return "command:" + " ".join(spec.command)
    if isinstance(spec, CallableAgentSpec):
        return f"callable:{spec.callable}"
    return f"{spec.type}:{json.dumps(spec.options, sort_keys=True, default=str)}"


class AgentResolver:
    """Builds each declared agent once, on first use (a run that replays everything starts
    none)."""

    def __init__(self, make: MakeAgent) -> None:
        self._make = make
        self._agents: dict[int, tuple[Agent, AnyAgentSpec]] = {}

    def agent(self, spec: AnyAgentSpec, base: Path) -> Agent:
        found = self._agents.get(id(spec))  # specs live as long as the run: ids are stable
        if found is None:
            found = self._agents[id(spec)] = (self._make(spec, base), spec)
        return found[0]


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
