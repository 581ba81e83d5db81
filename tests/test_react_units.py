"""The `react` agent's parts without pytest runs: its tools in a local folder, tool schemas
from signatures, option errors, and the loop against a scripted ChatClient."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

from pytest_agenteval.core.chat import ChatReply, ToolRequest, ToolSpec
from pytest_agenteval.core.errors import AgentUnavailable, RunStopped
from pytest_agenteval.core.model import Task
from pytest_agenteval.core.trace import LimitHit, Message, ToolCall, ToolResult
from pytest_agenteval.execution.react import make_react_agent, react_options
from pytest_agenteval.execution.tools import BUILTIN_TOOLS, TOOL_OUTPUT, cut, function_tool


def _task(tmp_path: Path, input: str = "fix it") -> Task:
    return Task(id="t", input=input, metadata={}, attempt=0, seed=0, workspace=tmp_path)


def _run(tool: str, task: Task, timeout: float | None = 10, **arguments: Any) -> Any:
    return asyncio.run(BUILTIN_TOOLS[tool].run(task, arguments, timeout))


def test_bash_reports_exit_status_and_both_streams(tmp_path: Path) -> None:
    """bash runs `sh -c` in the workspace and says its exit status, stdout and stderr."""
    (tmp_path / "a.txt").write_text("here\n")
    done = _run("bash", _task(tmp_path), command="cat a.txt; echo oops >&2; exit 3")
    assert done.exit_status == 3
    assert done.text == "exit status: 3\nstdout:\nhere\n\nstderr:\noops\n"


def test_bash_output_is_cut_with_the_full_size_noted(tmp_path: Path) -> None:
    """A long output keeps its head and tail and says how much of how much was cut."""
    done = _run("bash", _task(tmp_path), command="head -c 50000 /dev/zero | tr '\\0' x")
    assert f"characters cut of {50000:,}" in done.text
    assert len(done.text) < TOOL_OUTPUT + 200
    assert cut("short") == "short"


def test_bash_timeout_kills_and_says_so(tmp_path: Path) -> None:
    """A command past tool_timeout is killed; the model is told it timed out."""
    done = _run("bash", _task(tmp_path), timeout=0.5, command="sleep 30")
    assert "timed out after 0.5s" in done.text and done.error


def test_python_runs_the_environments_python(tmp_path: Path) -> None:
    """python runs the code with the environment's python, in the workspace."""
    done = _run("python", _task(tmp_path), code="import sys, os; print(sys.version_info[0])")
    assert done.exit_status == 0 and "stdout:\n3" in done.text


def test_read_and_write_files_stay_in_the_workspace(tmp_path: Path) -> None:
    """write_file makes folders; read_file reads back; a path out of the workspace is refused."""
    task = _task(tmp_path)
    assert _run("write_file", task, path="src/x.py", content="x = 1\n").text.startswith("wrote 6")
    assert _run("read_file", task, path="src/x.py").text == "x = 1\n"
    missing = _run("read_file", task, path="nope.txt")
    assert missing.error and missing.text.startswith("cannot read nope.txt")
    assert _run("read_file", task, path="../../etc/passwd").error


def test_links_the_model_made_with_bash_lead_nowhere_out(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A link made with `bash` to a host file is not read into the transcript, and a link to
    a host folder (or a dangling one to a host path) is not written through; links that stay
    inside the workspace still work."""
    workspace, host = tmp_path_factory.mktemp("ws"), tmp_path_factory.mktemp("host")
    (host / "secret.txt").write_text("host-secret")
    task = _task(workspace)
    made = _run(
        "bash",
        task,
        command=f"ln -s {host}/secret.txt secret && ln -s {host} out && ln -s {host}/new new"
        " && echo in > mine.txt && ln -s mine.txt alias",
    )
    assert made.exit_status == 0, made.text
    read = _run("read_file", task, path="secret")
    assert read.error and "leads out of the attempt's workspace" in read.text
    assert "host-secret" not in read.text
    for path in ("out/planted.txt", "new", "out/../out/x"):
        wrote = _run("write_file", task, path=path, content="planted")
        assert wrote.error and "workspace" in wrote.text, (path, wrote.text)
    assert sorted(p.name for p in host.iterdir()) == ["secret.txt"]
    assert (host / "secret.txt").read_text() == "host-secret"
    assert _run("read_file", task, path="alias").text == "in\n"
    assert not _run("write_file", task, path="alias", content="x").error
    assert (workspace / "mine.txt").read_text() == "x"


def add(a: int, b: int = 2, note: str | None = None) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second one.
    """
    return a + b


def test_function_schema_comes_from_signature_and_docstring() -> None:
    """A function's parameters, their types, defaults and docstring lines make its schema."""
    tool = function_tool(add)
    assert tool.spec.description == "Add two numbers."
    assert tool.spec.parameters == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "The first number."},
            "b": {"type": "integer", "description": "The second one."},
            "note": {"type": "string"},
        },
        "required": ["a"],
    }


def test_function_schema_of_lists_literals_and_refused_types() -> None:
    """Lists keep their item type, Literal becomes an enum, an unknown type is refused."""

    def pick(items: list[str], mode: Literal["a", "b"], task: Task) -> str:
        """Pick."""
        return ""

    params = function_tool(pick).spec.parameters
    assert params["properties"] == {
        "items": {"type": "array", "items": {"type": "string"}},
        "mode": {"enum": ["a", "b"]},
    }

    def bad(x: complex) -> None:
        """Bad."""

    with pytest.raises(TypeError, match="'x'"):
        function_tool(bad)


@pytest.mark.parametrize(
    ("options", "said", "hint"),
    [
        ({"tools": ["bash", "shell"]}, "unknown tool 'shell'", "bash"),
        ({"tool": ["bash"]}, "unknown option 'tool'", "tools"),
        ({"max_turns": 0}, "option 'max_turns' is 0", None),
        ({"tools": ["bash", "bash"]}, "tool 'bash' is listed twice", None),
        ({"tools": ["nomodule_xyz:f"]}, "cannot load tool 'nomodule_xyz:f'", None),
    ],
)
def test_bad_options_are_agent_unavailable(
    tmp_path: Path, options: dict[str, Any], said: str, hint: str | None
) -> None:
    """Bad options are refused when the agent is built, naming the option or tool."""
    with pytest.raises(AgentUnavailable) as caught:
        make_react_agent(options, tmp_path)
    assert said in str(caught.value)
    if hint:
        assert hint in str(caught.value.hint)


def test_defaults() -> None:
    """Without options: every built-in tool, 30 turns, 60 s per tool."""
    options = react_options({})
    assert (options.tools, options.max_turns, options.tool_timeout) == (
        list(BUILTIN_TOOLS),
        30,
        60.0,
    )


class Scripted:
    """A ChatClient answering from a list, recording what it was sent."""

    def __init__(self, *replies: ChatReply) -> None:
        self.replies = list(replies)
        self.sent: list[tuple[int, Sequence[ToolSpec]]] = []

    async def achat(self, messages: Sequence[Any], **kw: Any) -> ChatReply:
        self.sent.append((len(messages), kw.get("tools", ())))
        return self.replies.pop(0)

    def chat(self, messages: Sequence[Any], **kw: Any) -> ChatReply:
        raise NotImplementedError


def _call(name: str, **arguments: Any) -> ChatReply:
    return ChatReply("", (ToolRequest(f"c{name}", name, arguments),), "tool_calls")


def test_loop_runs_tools_until_submit(tmp_path: Path) -> None:
    """Each tool call is run and answered; submit's answer is the output; the trace has it all."""
    agent = make_react_agent({"system": "be good"}, tmp_path)
    client = Scripted(
        _call("write_file", path="f.txt", content="hi"),
        ChatReply("thinking", (ToolRequest("c1", "bash", {"command": "cat f.txt"}),)),
        _call("submit", answer="done: hi"),
    )
    task = _task(tmp_path)
    result = asyncio.run(agent.loop(task, client))
    assert result.output == "done: hi"
    assert [n for n, _ in client.sent] == [2, 4, 6]
    assert [t.name for t in client.sent[0][1]] == list(BUILTIN_TOOLS)
    events = task.trace.events
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.tool, c.exit_status) for c in calls] == [
        ("write_file", None),
        ("bash", 0),
        ("submit", None),
    ]
    assert isinstance(events[0], Message) and events[0].role == "system"
    assert sum(isinstance(e, ToolResult) for e in events) == 3


def test_unknown_tools_and_bad_arguments_go_back_to_the_model(tmp_path: Path) -> None:
    """A tool the agent lacks or a missing argument is an error result, not a crash."""
    agent = make_react_agent({"tools": ["bash", "submit"]}, tmp_path)
    client = Scripted(_call("rm_rf"), _call("bash"), _call("submit", answer="x"))
    task = _task(tmp_path)
    assert asyncio.run(agent.loop(task, client)).output == "x"
    results = [e.content for e in task.trace.events if isinstance(e, ToolResult)]
    assert results[0].startswith("error: no tool 'rm_rf' (tools: bash, submit)")
    assert results[1] == "error: bash: missing argument 'command'"


def test_max_turns_ends_the_loop_with_a_limit_hit(tmp_path: Path) -> None:
    """After max_turns model calls the loop ends; the trace says max_turns."""
    agent = make_react_agent({"max_turns": 2}, tmp_path)
    client = Scripted(_call("bash", command="true"), ChatReply("no tools"))
    task = _task(tmp_path)
    assert asyncio.run(agent.loop(task, client)).output == "no tools"
    hit = task.trace.stopped
    assert isinstance(hit, LimitHit) and hit.limit == "max_turns"
    assert len(client.sent) == 2


def test_a_run_stop_ends_the_loop_before_the_next_model_call(tmp_path: Path) -> None:
    """A run-wide stop found between turns raises RunStopped; no further call is made."""
    agent = make_react_agent({}, tmp_path)
    client = Scripted(_call("bash", command="true"), _call("bash", command="true"))
    task = _task(tmp_path)
    stops = iter([None, "the run's cost cap is reached"])
    task.trace.run_stop = lambda: next(stops, "the run's cost cap is reached")
    with pytest.raises(RunStopped):
        asyncio.run(agent.loop(task, client))
    assert len(client.sent) == 1
    assert task.trace.stopped is not None and task.trace.stopped.limit == "run"


def test_without_submit_a_text_reply_is_the_answer(tmp_path: Path) -> None:
    """An agent with no submit tool ends at the first reply without tool calls."""
    agent = make_react_agent({"tools": ["read_file"]}, tmp_path)
    assert asyncio.run(agent.loop(_task(tmp_path), Scripted(ChatReply("42")))).output == "42"


def test_function_tools_get_the_task_and_their_errors_are_told(tmp_path: Path) -> None:
    """A function tool may take the task; what it raises is the model's news."""

    def where(task: Task) -> str:
        """Where am I."""
        return task.id

    def boom() -> None:
        """Boom."""
        raise ValueError("no")

    tools = [function_tool(where), function_tool(boom)]
    task = _task(tmp_path)
    assert asyncio.run(tools[0].run(task, {}, 5)).text == "t"
    agent = make_react_agent({"tools": ["submit"]}, tmp_path)
    agent.tools["boom"] = tools[1]
    client = Scripted(_call("boom"), _call("submit", answer="ok"))
    assert asyncio.run(agent.loop(task, client)).output == "ok"
    said = [e.content for e in task.trace.events if isinstance(e, ToolResult)]
    assert said[0] == "error: boom raised ValueError: no"
    assert sys.executable


def test_the_task_budget_ends_the_loop_graded_with_what_it_said(tmp_path: Path) -> None:
    """Past the task's token budget the check before the next turn ends the loop: the answer
    is the model's last text and the trace says `budget` (the attempt is graded)."""
    from pytest_agenteval.core.model import Budget

    class Counting(Scripted):
        def __init__(self, task: Task, *replies: ChatReply) -> None:
            super().__init__(*replies)
            self.task = task

        async def achat(self, messages: Sequence[Any], **kw: Any) -> ChatReply:
            self.task.trace.model_call(input_tokens=100, output_tokens=10)
            return await super().achat(messages, **kw)

    task = _task(tmp_path)
    task.budget = Budget(max_tokens=150)
    agent = make_react_agent({}, tmp_path)
    reply = ChatReply("looking", (ToolRequest("c", "bash", {"command": "true"}),))
    client = Counting(task, reply, reply, reply)
    assert asyncio.run(agent.loop(task, client)).output == "looking"
    assert len(client.sent) == 2
    assert task.trace.stopped is not None and task.trace.stopped.limit == "budget"
