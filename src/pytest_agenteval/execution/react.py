"""The `react` agent kind: a model calling tools in the attempt's environment until it submits.

`agent: {react: {provider, model, system, tools: [bash, python, read_file, write_file, submit],
max_turns, tool_timeout}}`. Each turn is one model call through `task.llm(provider)` (the
provider's limits, the run's caps, usage and cost counted as the call returns), then the tool
calls it asked for, one after another, each a `tool_call` and a `tool_result` event of the
trace. Before every model call the loop asks `task.check()`: a run-wide stop (a cap,
`agenteval cancel`, the deadline) ends it there and a resume runs the attempt again; the
task's budget or timeout, or `max_turns`, end it graded on what it produced.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from ..core.chat import ChatClient, ChatMessage, ToolRequest
from ..core.errors import AgentUnavailable, LimitReached, agent_options, did_you_mean
from ..core.importing import UnresolvedReference, resolve_callable
from ..core.llm import Seconds
from ..core.model import AgentResult, Task
from .tools import BUILTIN_TOOLS, Tool, ToolArgumentError, ToolOutput, check_required, cut

DEFAULT_MAX_TURNS = 30
MAX_TURNS = 10_000
"""`max_turns`, at most: each turn is a paid model call."""
DEFAULT_TOOL_TIMEOUT = 60.0
NUDGE = "No tool was called. Continue with the tools, and call submit(answer) when done."

MakeTool = Callable[[str], Tool | None]
"""A plugin's tool of this name (`pytest_agenteval_make_tool`), or None."""


class ReactOptions(BaseModel):
    """Options of the `react` agent kind (`agent: {react: {...}}`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str | None = None
    """The manifest's provider (`providers:`) every model call goes through (default: the
    only one)."""
    model: str | None = None
    """The model asked for (default: the provider's `model:`)."""
    system: str | None = None
    """The system prompt; the task's input is the first user message."""
    tools: list[str] = ["bash", "python", "read_file", "write_file", "submit"]
    """The tools the model may call: built-ins (`bash`, `python`, `read_file`, `write_file`,
    `submit`), a plugin's (`pytest_agenteval_make_tool`), or a Python function as
    `module:function` / `file.py:function`."""
    max_turns: int = Field(DEFAULT_MAX_TURNS, ge=1, le=MAX_TURNS)
    """Most model calls (up to 10,000); reaching it ends the loop, graded, with `stopped:
    max_turns`. The task's `timeout` bounds them all together."""
    tool_timeout: Seconds = DEFAULT_TOOL_TIMEOUT
    """Seconds one tool call may run, at most a week (a program is then killed with what it
    started)."""
    temperature: float | None = None
    """Sampling temperature, when set."""
    max_tokens: PositiveInt | None = None
    """Most tokens per reply, when set."""


class ReactAgent:
    """The loop; built once per spec, called once per attempt (`async`, so attempts in flight
    share the executor's event loop and the provider's connections)."""

    def __init__(self, options: ReactOptions, tools: Sequence[Tool]) -> None:
        self.options = options
        self.tools = {tool.name: tool for tool in tools}
        self.specs = tuple(tool.spec for tool in tools)
        params: dict[str, Any] = {}
        if options.temperature is not None:
            params["temperature"] = options.temperature
        if options.max_tokens is not None:
            params["max_tokens"] = options.max_tokens
        self.params = params

    async def __call__(self, task: Task) -> AgentResult:
        return await self.loop(task, task.llm(self.options.provider))

    async def loop(self, task: Task, client: ChatClient) -> AgentResult:
        """Turns until `submit`, `max_turns` or a limit; the answer is the submitted one (else
        the model's last text)."""
        messages = self.opening(task)
        last = ""
        for _ in range(self.options.max_turns):
            try:
                task.check()  # RunStopped propagates: the attempt is run again on resume
            except LimitReached:
                return AgentResult(output=last)
            reply = await client.achat(
                messages, model=self.options.model, tools=self.specs, **self.params
            )
            last = reply.text or last
            if reply.text:  # the calls it asks for are the tool_call events that follow
                task.trace.message("assistant", reply.text)
            messages.append(reply.message())
            if not reply.tool_calls:
                if "submit" not in self.tools:
                    return AgentResult(output=reply.text)
                messages.append(ChatMessage("user", NUDGE))
                continue
            for call in reply.tool_calls:
                result = await self.run_tool(task, call)
                failed = result.error is not None
                messages.append(
                    ChatMessage("tool", result.text, tool_call_id=call.id, is_error=failed)
                )
                tool = self.tools.get(call.name)
                if tool is not None and tool.ends_loop and result.error is None:
                    return AgentResult(output=result.text)
                try:
                    task.trace.check()  # a run-wide stop ends the loop after this tool call
                except LimitReached:  # the timeout passed: graded on what it did
                    return AgentResult(output=last)
        task.trace.limit_hit("max_turns", f"{self.options.max_turns} model turns")
        return AgentResult(output=last)

    def opening(self, task: Task) -> list[ChatMessage]:
        """The system prompt and the task's input as the first messages (also in the trace)."""
        text = task.input if isinstance(task.input, str) else json.dumps(task.input)
        messages = [ChatMessage("system", self.options.system)] if self.options.system else []
        messages.append(ChatMessage("user", text))
        for message in messages:
            task.trace.message(message.role, message.content)
        return messages

    async def run_tool(self, task: Task, call: ToolRequest) -> ToolOutput:
        """One tool call, timed as a `tool_call` event; what goes back is a `tool_result`."""
        arguments = dict(call.arguments)
        with task.trace.tool(call.name, arguments, call.id) as run:
            result = await self._outcome(task, call.name, arguments)
            run.done(result.exit_status, result.text, result.error)
        task.trace.tool_result(result.text, tool=call.name, id=call.id)
        return result

    async def _outcome(self, task: Task, name: str, arguments: Mapping[str, Any]) -> ToolOutput:
        tool = self.tools.get(name)
        if tool is None:
            known = ", ".join(self.tools)
            return ToolOutput(f"error: no tool {name!r} (tools: {known})", error="unknown tool")
        try:
            check_required(tool, arguments)
            return await tool.run(task, arguments, self.options.tool_timeout)
        except ToolArgumentError as exc:
            return ToolOutput(f"error: {name}: {exc}", error=str(exc))
        except TimeoutError:
            said = f"timed out after {self.options.tool_timeout:g}s"
            return ToolOutput(f"error: {name} {said}", error=said)
        except Exception as exc:  # a function tool's own failure is news for the model
            said = f"{type(exc).__name__}: {exc}"
            return ToolOutput(f"error: {name} raised {cut(said, 2000)}", error=said)


def make_react_agent(
    options: Mapping[str, Any], dataset_root: Path, make_tool: MakeTool | None = None
) -> ReactAgent:
    """The agent a `{react: {...}}` spec names; raises AgentUnavailable (reported at the
    spec's line) for a bad option or a tool that cannot be found."""
    settings = react_options(options)
    tools = []
    for index, name in enumerate(settings.tools):
        try:
            tools.append(tool_named(name, dataset_root, make_tool))
        except AgentUnavailable as exc:  # located at the tool's own line
            raise AgentUnavailable(exc.problem, hint=exc.hint, option=("tools", index)) from None
    names = [tool.name for tool in tools]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise AgentUnavailable(f"react agent: tool {doubled[0]!r} is listed twice")
    return ReactAgent(settings, tools)


def react_options(options: Mapping[str, Any]) -> ReactOptions:
    """The validated options; the first problem as an AgentUnavailable naming the option."""
    return agent_options("react", ReactOptions, options)


def tool_named(name: str, dataset_root: Path, make_tool: MakeTool | None) -> Tool:
    """A tool by its name in `tools:`: a plugin's first, then a built-in, then a Python
    function (`module:function`, `file.py:function`)."""
    from .tools import function_tool

    made = make_tool(name) if make_tool is not None else None
    if made is not None:
        return made
    if name in BUILTIN_TOOLS:
        return BUILTIN_TOOLS[name]
    if ":" not in name:
        hint = did_you_mean(name, BUILTIN_TOOLS) or (
            f"built-in tools: {', '.join(BUILTIN_TOOLS)}; a Python function is named "
            "`module:function`; plugins add tools through pytest_agenteval_make_tool"
        )
        raise AgentUnavailable(f"react agent: unknown tool {name!r}", hint=hint)
    try:
        func = resolve_callable(name, dataset_root)
    except UnresolvedReference as exc:
        raise AgentUnavailable(
            f"react agent: cannot load tool {name!r}: {exc}", hint=exc.hint
        ) from None
    try:
        return function_tool(func)
    except TypeError as exc:
        raise AgentUnavailable(f"react agent: tool {name!r}: {exc}") from None
