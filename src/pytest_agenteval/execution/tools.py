"""The tools a `react` agent's model may call, run in the attempt's environment.

A `Tool` is a `ToolSpec` (name, description, JSON schema of its arguments) and a function of
the attempt's `Task` and the model's arguments returning the text sent back. The built-ins
(`bash`, `python`, `read_file`, `write_file`, `submit`) go through `task.environment`, so a
sandboxed task's tools run in its container. Any Python function becomes a tool
(`function_tool`): its schema is read from its signature and its docstring.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import types
import typing
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Union

from ..core.chat import ToolSpec
from ..core.environment import Environment, ExecResult
from ..core.model import Task
from .environment import environment_of, read_head

TOOL_OUTPUT = 10_000
"""Characters of a program's stdout (and of its stderr) sent back to the model: the first
and last halves, the middle replaced by a note of how much was cut of the whole."""

Run = Callable[[Task, Mapping[str, Any], float | None], Coroutine[Any, Any, "ToolOutput"]]


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool run gave: the text for the model and, for a program, its exit status."""

    text: str
    exit_status: int | None = None
    error: str | None = None
    """Why the tool could not do what was asked (bad arguments, a timeout, a missing file)."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool of a `react` agent: what the model is told of it, and how it runs."""

    spec: ToolSpec
    run: Run
    ends_loop: bool = False
    """`submit`: calling it ends the loop, its `answer` the attempt's output."""

    @property
    def name(self) -> str:
        return self.spec.name


def cut(text: str, limit: int = TOOL_OUTPUT) -> str:
    """`text`, at most about `limit` characters: head and tail, and what was cut of how much."""
    if len(text) <= limit:
        return text
    half = limit // 2
    dropped = len(text) - 2 * half
    return f"{text[:half]}\n[… {dropped:,} characters cut of {len(text):,} …]\n{text[-half:]}"


def program_output(done: ExecResult, timeout: float | None) -> ToolOutput:
    """A program's run as the model reads it: its exit status, stdout and stderr (each cut)."""
    parts = [f"exit status: {done.returncode}"]
    if done.timed_out:
        parts[0] += f" (timed out after {timeout:g}s, killed)"
    if done.stdout:
        parts.append("stdout:\n" + cut(done.stdout))
    if done.stderr:
        parts.append("stderr:\n" + cut(done.stderr))
    error = f"timed out after {timeout:g}s" if done.timed_out else None
    return ToolOutput("\n".join(parts), done.returncode, error)


def _environment(task: Task) -> Environment:
    return environment_of(task)


def _text(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str):
        raise ToolArgumentError(f"argument {name!r} must be a string")
    return value


class ToolArgumentError(Exception):
    """The model called a tool with arguments it does not take (told back to the model)."""


async def _bash(task: Task, arguments: Mapping[str, Any], timeout: float | None) -> ToolOutput:
    command = _text(arguments, "command")
    environment = _environment(task)
    done = await asyncio.to_thread(environment.exec, ["sh", "-c", command], None, timeout)
    return program_output(done, timeout)


async def _python(task: Task, arguments: Mapping[str, Any], timeout: float | None) -> ToolOutput:
    code = _text(arguments, "code").encode()
    environment = _environment(task)
    argv = [environment.python, "-"]
    done = await asyncio.to_thread(environment.exec, argv, code, timeout)
    return program_output(done, timeout)


async def _read_file(task: Task, arguments: Mapping[str, Any], timeout: float | None) -> ToolOutput:
    path = _text(arguments, "path")
    try:  # no more than the model is sent is read (UTF-8: up to 4 bytes a character)
        data, size = await asyncio.to_thread(read_head, _environment(task), path, 4 * TOOL_OUTPUT)
    except OSError as exc:
        return ToolOutput(f"cannot read {path}: {exc.strerror or exc}", error=str(exc))
    text = data.decode("utf-8", "replace")
    if size <= len(data):
        return ToolOutput(cut(text))
    shown = text[:TOOL_OUTPUT]
    return ToolOutput(f"{shown}\n[… the file holds {size:,} bytes: only its first part is shown …]")


async def _write_file(
    task: Task, arguments: Mapping[str, Any], timeout: float | None
) -> ToolOutput:
    path, content = _text(arguments, "path"), _text(arguments, "content")
    try:
        await asyncio.to_thread(_environment(task).write_file, path, content)
    except OSError as exc:
        return ToolOutput(f"cannot write {path}: {exc.strerror or exc}", error=str(exc))
    return ToolOutput(f"wrote {len(content.encode()):,} bytes to {path}")


async def _submit(task: Task, arguments: Mapping[str, Any], timeout: float | None) -> ToolOutput:
    return ToolOutput(_text(arguments, "answer"))


def _object(properties: dict[str, tuple[str, str]]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            name: {"type": kind, "description": said} for name, (kind, said) in properties.items()
        },
        "required": list(properties),
    }


BUILTIN_TOOLS: dict[str, Tool] = {
    "bash": Tool(
        ToolSpec(
            "bash",
            "Run a shell command (sh -c) in the working directory; returns its exit status, "
            f"stdout and stderr (each cut to {TOOL_OUTPUT:,} characters).",
            _object({"command": ("string", "The command line.")}),
        ),
        _bash,
    ),
    "python": Tool(
        ToolSpec(
            "python",
            "Run a Python program (given on stdin to the environment's python) in the working "
            "directory; returns its exit status, stdout and stderr.",
            _object({"code": ("string", "The program's source.")}),
        ),
        _python,
    ),
    "read_file": Tool(
        ToolSpec(
            "read_file",
            "Read a text file (a path relative to the working directory).",
            _object({"path": ("string", "The file's path.")}),
        ),
        _read_file,
    ),
    "write_file": Tool(
        ToolSpec(
            "write_file",
            "Write a text file (its folders made), replacing what it held.",
            _object(
                {"path": ("string", "The file's path."), "content": ("string", "Its new text.")}
            ),
        ),
        _write_file,
    ),
    "submit": Tool(
        ToolSpec(
            "submit",
            "Submit the final answer; this ends the task.",
            _object({"answer": ("string", "The final answer.")}),
        ),
        _submit,
        ends_loop=True,
    ),
}


# --- any Python function as a tool ------------------------------------------------------------

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


def function_tool(func: Callable[..., Any], name: str | None = None) -> Tool:
    """A tool running `func` (sync or `async def`): its name, its docstring's first paragraph
    as the description, its parameters (typed with str, int, float, bool, list, dict, or
    `X | None`) as the schema, described by the docstring's `name: text` lines (Google-style
    `Args:` or plain). A parameter named `task` gets the attempt's Task and is not shown to
    the model. Raises TypeError for a signature it cannot describe."""
    spec = ToolSpec(name or func.__name__, *_describe(func))
    wants_task = "task" in inspect.signature(func).parameters

    async def run(task: Task, arguments: Mapping[str, Any], timeout: float | None) -> ToolOutput:
        kwargs = dict(arguments)
        if wants_task:
            kwargs["task"] = task
        _check_arguments(spec, kwargs)
        if inspect.iscoroutinefunction(func):
            value = await asyncio.wait_for(func(**kwargs), timeout)
        else:
            value = await asyncio.wait_for(asyncio.to_thread(func, **kwargs), timeout)
        return value if isinstance(value, ToolOutput) else ToolOutput(_as_text(value))

    return Tool(spec, run)


def _describe(func: Callable[..., Any]) -> tuple[str, dict[str, Any]]:
    doc = inspect.getdoc(func) or ""
    summary = doc.split("\n\n")[0].replace("\n", " ").strip() or f"The {func.__name__} tool."
    said = dict(
        re.findall(r"^[ \t]*(\w+)(?:[ \t]*\([^)]*\))?[ \t]*:[ \t]*(.+)$", doc, re.MULTILINE)
    )
    hints = typing.get_type_hints(func)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(func).parameters.values():
        if param.name == "task":
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"parameter {param.name!r}: a tool takes named parameters only")
        schema = _schema_of(hints.get(param.name, str), param.name)
        if param.name in said:
            schema["description"] = said[param.name].strip()
        properties[param.name] = schema
        if param.default is param.empty:
            required.append(param.name)
    return summary, {"type": "object", "properties": properties, "required": required}


def _schema_of(hint: Any, name: str) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(inner) == 1:
            return _schema_of(inner[0], name)
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(hint))}
    base = origin or hint
    if base in _JSON_TYPES:
        schema: dict[str, Any] = {"type": _JSON_TYPES[base]}
        args = typing.get_args(hint)
        if base in (list, tuple) and len(args) == 1:
            schema["items"] = _schema_of(args[0], name)
        return schema
    if base is Any:
        return {}
    raise TypeError(f"parameter {name!r}: type {hint!r} has no JSON schema")


def _check_arguments(spec: ToolSpec, kwargs: Mapping[str, Any]) -> None:
    known = set(spec.parameters.get("properties", {})) | {"task"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ToolArgumentError(f"unknown argument {unknown[0]!r}")
    missing = [n for n in spec.parameters.get("required", []) if n not in kwargs]
    if missing:
        raise ToolArgumentError(f"missing argument {missing[0]!r}")


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return cut(value)
    import json

    try:
        return cut(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return cut(repr(value))


def check_required(tool: Tool, arguments: Mapping[str, Any]) -> None:
    """Raise ToolArgumentError when the model left out an argument a built-in needs."""
    missing = [n for n in tool.spec.parameters.get("required", []) if n not in arguments]
    if missing:
        raise ToolArgumentError(f"missing argument {missing[0]!r}")
