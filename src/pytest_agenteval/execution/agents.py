"""The agent under test: the Agent protocol, the built-in kinds (Python callables and
commands), and the registry that turns an agent spec into an agent."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..core.environment import Environment
from ..core.errors import AgentError, AgentTimeout, AgentUnavailable, did_you_mean
from ..core.importing import UnresolvedReference, resolve_callable
from ..core.model import (
    AgentResult,
    AnyAgentSpec,
    CallableAgentSpec,
    CommandAgentSpec,
    PluginAgentSpec,
    Task,
)
from ..core.text import excerpt
from .environment import environment_of
from .process import MAX_OUTPUT, was_cut

if TYPE_CHECKING:
    from .react import MakeTool


class Agent(Protocol):
    """The system under test: called once per attempt, sync or `async def`.

    Returns the output as a string, or an AgentResult (output, usage, transcript, artifacts).
    """

    def __call__(self, task: Task) -> Any: ...


class CommandAgent:
    """Runs a program per attempt in the attempt's environment; stdout is the output."""

    def __init__(self, spec: CommandAgentSpec, dataset_root: Path) -> None:
        self.spec = spec
        self.dataset_root = dataset_root

    def __call__(self, task: Task, timeout: float | None = None) -> AgentResult:
        environment = environment_of(task)
        argv = [self._fill(arg, task, environment) for arg in self.spec.command]
        stdin = json.dumps(task.as_json()).encode() if self.spec.stdin == "json" else None
        env = {
            **self.spec.env,
            "AGENTEVAL_TASK_ID": task.id,
            "AGENTEVAL_ATTEMPT": str(task.attempt),
            "AGENTEVAL_SEED": str(task.seed),
        }
        if task.trace.traceparent is not None:  # its own spans join the attempt's trace
            env["TRACEPARENT"] = task.trace.traceparent
        try:
            done = environment.exec(argv, input=stdin, timeout=timeout, env=env)
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
                cut = was_cut(done.stdout)
                said = f" (its stdout was cut to {MAX_OUTPUT:,} bytes)" if cut else ""
                raise AgentError(
                    f"agent command printed no valid AgentResult JSON{said}", detail=str(exc)
                ) from None
        return AgentResult.model_construct(output=done.stdout)

    def _fill(self, arg: str, task: Task, environment: Environment) -> str:
        """`arg` with its placeholders filled in one pass (a value that holds `{workspace}` is
        not filled again); `{name!q}` is the value quoted for a shell (`sh -c`)."""
        if "{" not in arg:
            return arg

        def value(match: re.Match[str]) -> str:
            name, quoted = match.group(1), match.group(2)
            text = self._value(name, task, environment)
            return shlex.quote(text) if quoted else text

        return PLACEHOLDER.sub(value, arg)

    def _value(self, name: str, task: Task, environment: Environment) -> str:
        if name == "input":
            return task.input if isinstance(task.input, str) else json.dumps(task.input)
        if name == "workspace":
            return environment.workdir
        if name == "dataset":
            return str(self.dataset_root)
        if name == "python":
            return environment.python
        return {"task_id": task.id, "attempt": str(task.attempt), "seed": str(task.seed)}[name]


PLACEHOLDER = re.compile(r"\{(input|task_id|attempt|seed|workspace|dataset|python)(!q)?\}")
"""A command's placeholders; `!q` quotes the value for a shell (`shlex.quote`)."""


BUILTIN_AGENT_KINDS = ("callable", "command", "openai", "react")
MakeAgent = Callable[[AnyAgentSpec, Path], Agent]
"""Builds the agent a spec names (plugins first, built-ins last); raises AgentError."""


def make_builtin_agent(
    spec: AnyAgentSpec, dataset_root: Path, make_tool: MakeTool | None = None
) -> Agent | None:
    """The agent a built-in spec names, resolved without starting anything: a callable's
    module is imported. None for a kind a plugin provides. A command's program is looked up
    by `AgentResolver` (on this machine, or in the container it will run in). `make_tool`
    asks plugins for a `react` agent's tools (`pytest_agenteval_make_tool`)."""
    if isinstance(spec, CommandAgentSpec):
        return CommandAgent(spec, dataset_root)
    if isinstance(spec, PluginAgentSpec):
        if spec.type == "react":
            from .react import make_react_agent  # the loop and its tools only when used

            return make_react_agent(spec.options, dataset_root, make_tool)
        if spec.type != "openai":
            return None
        from ..providers.openai import make_openai_agent  # the SDK only when used

        return make_openai_agent(spec.options, dataset_root)
    try:
        return resolve_callable(spec.callable, dataset_root)
    except UnresolvedReference as exc:
        raise AgentUnavailable(
            f"cannot load agent {spec.callable!r}: {exc}", hint=exc.hint
        ) from None


def check_program(spec: CommandAgentSpec, dataset_root: Path) -> None:
    """Raise AgentUnavailable when a command's program does not exist: a bare name must be on
    PATH (the command's own `env: PATH` if it sets one); an absolute path, after `{dataset}`
    and `{python}` are filled in, must be a file, and so must the `{dataset}/...` script that
    `{python}` runs. Paths relative to the attempt's workspace are only known when it runs."""
    argv = spec.command
    program = _filled(argv[0], dataset_root)
    if argv[0] == "{python}" and len(argv) > 1 and argv[1].startswith("{dataset}"):
        _check_file(argv[1], _filled(argv[1], dataset_root), "script")
    if "{" in program:
        return
    if os.sep in program or (os.altsep and os.altsep in program):
        if os.path.isabs(program):
            _check_file(argv[0], program, "program")
        return
    search = spec.env.get("PATH")
    if shutil.which(program, path=search) is None:
        hint = (
            did_you_mean(program, _programs_on(search)) or "give the full path, or add it to PATH"
        )
        raise AgentUnavailable(f"agent command {program!r} not found on PATH", hint=hint)


def _filled(arg: str, dataset_root: Path) -> str:
    return arg.replace("{python}", sys.executable).replace("{dataset}", str(dataset_root))


def _check_file(written: str, path: str, what: str) -> None:
    if "{" not in path and not os.path.isfile(path):
        folder = Path(path).parent
        near = (
            did_you_mean(Path(path).name, (p.name for p in folder.glob("*")))
            if folder.is_dir()
            else None
        )
        raise AgentUnavailable(f"agent command {what} {written!r} not found ({path})", hint=near)


def _programs_on(search: str | None) -> set[str]:
    names: set[str] = set()
    for folder in (search or os.environ.get("PATH", "")).split(os.pathsep):
        with contextlib.suppress(OSError):
            names.update(entry.name for entry in os.scandir(folder or "."))
    return names


def unknown_agent_kind(kind: str, known: list[str]) -> AgentUnavailable:
    """The error for an agent kind no plugin provides."""
    hint = did_you_mean(kind, known) or (
        f"built-in kinds: {', '.join(sorted(known))}; other kinds come from plugins "
        "implementing pytest_agenteval_make_agent (is the plugin installed?)"
    )
    return AgentUnavailable(f"unknown agent kind {kind!r}", hint=hint)


def spec_label(spec: AnyAgentSpec) -> str:
    """How records and summaries name an agent spec."""
    if isinstance(spec, CommandAgentSpec):
        return "command:" + " ".join(spec.command)
    if isinstance(spec, CallableAgentSpec):
        return f"callable:{spec.callable}"
    return f"{spec.type}:{json.dumps(spec.options, sort_keys=True, default=str)}"


@dataclass(frozen=True, slots=True)
class AgentRef:
    """An attempt's agent as an agent call names it: serialisable, so the call can be run by
    an executor in another process, which builds the agent from it (`AgentResolver.resolve`).

    A declared agent is named by its spec (validated data) and the folder its references are
    resolved from. The `agenteval_agent` fixture's agent is a live object of the pytest process
    that set it up and cannot travel: its reference holds it (`live`), pickles without it, and
    resolves only in that process.
    """

    label: str
    """The agent as the record names it (its spec's label, or the fixture's name)."""
    spec: AnyAgentSpec | None = None
    """The declared spec; None for the fixture's agent."""
    base: Path | None = None
    """The folder the spec's references are resolved from (the dataset's, or the invocation
    folder for `--agenteval-agent`)."""
    key: str = ""
    """What the resolver's cache knows the agent by (made from spec and base, once)."""
    on_host: bool = True
    """Whether the agent's programs run on this machine (a command agent's program is then
    looked up on its PATH when the agent is built; in a sandbox, on the container's)."""
    live: Agent | None = field(default=None, compare=False)
    """The fixture's agent, in the process that made it (never pickled)."""

    @classmethod
    def declared(cls, spec: AnyAgentSpec, base: Path, on_host: bool = True) -> AgentRef:
        """The reference of a declared agent (made once per spec: see the runtime)."""
        return cls(spec_label(spec), spec, base, f"{base}\0{spec!r}\0{on_host}", on_host)

    @classmethod
    def in_process(cls, agent: Agent, label: str) -> AgentRef:
        """The reference of a live agent (the fixture's): resolvable only in this process."""
        return cls(label, live=agent)

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.label, self.spec, self.base, self.key, self.on_host)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        names = ("label", "spec", "base", "key", "on_host", "live")
        for name, value in zip(names, (*state, None), strict=True):
            object.__setattr__(self, name, value)


class AgentResolver:
    """Builds agents, turning every way that fails into AgentUnavailable; the one cache of
    built agents of a process: each spec is built once (when an attempt first needs it)."""

    def __init__(self, make: MakeAgent) -> None:
        self._make = make
        self._built: dict[str, Agent] = {}

    def resolve(self, ref: AgentRef) -> Agent:
        """The agent `ref` names, built on first use; raises AgentUnavailable when it cannot be
        built, or names a live agent of another process."""
        agent = self._built.get(ref.key) if ref.live is None else ref.live
        if agent is not None:
            return agent
        if ref.spec is None or ref.base is None:
            raise AgentUnavailable(
                f"the {ref.label} agent is a live object of the pytest process that made it "
                "and cannot be used by an executor in another process",
                hint="declare the agent (`agent:` in agenteval.yaml or --agenteval-agent) for "
                "executors that run agent calls elsewhere",
            )
        agent = self._built[ref.key] = self.agent(ref.spec, ref.base, ref.on_host)
        return agent

    def agent(self, spec: AnyAgentSpec, base: Path, on_host: bool = True) -> Agent:
        """The agent `spec` names; raises AgentUnavailable when it cannot be built. A command
        agent's program is looked up on this machine's PATH only when it runs `on_host`: in
        a sandbox `docker exec` looks it up on the container's PATH (and says when it is not
        there, as the attempt's error)."""
        built = self._build(spec, base, on_host)
        if isinstance(built, AgentUnavailable):
            raise built
        return built

    def _build(self, spec: AnyAgentSpec, base: Path, on_host: bool) -> Agent | AgentUnavailable:
        try:
            made = self._make(spec, base)
            if on_host and isinstance(made, CommandAgent):
                check_program(made.spec, made.dataset_root)
            return made
        except AgentUnavailable as exc:
            return exc
        except AgentError as exc:  # what plugins raise for bad options
            return AgentUnavailable(exc.message, hint=exc.detail or None)
        except Exception as exc:
            return AgentUnavailable(f"building the agent failed: {type(exc).__name__}: {exc}")


def as_result(value: Any) -> AgentResult:
    """An agent's return value as an AgentResult; anything else is an AgentError."""
    if isinstance(value, str):
        return AgentResult(output=value)  # validating is faster than model_construct
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
