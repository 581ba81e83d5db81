"""Exception tree and the `path:line: at field: problem` + `Hint:` message format."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .text import excerpt


class AgentevalError(Exception):
    """Base of every error the plugin raises on purpose."""


class TaskFileError(AgentevalError):
    """A task or manifest file that cannot be loaded; the message points at file, line and field."""

    def __init__(
        self,
        path: Path | str,
        problem: str,
        *,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.problem = problem
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        path = display_path(self.path)
        where = path if self.line is None else f"{path}:{self.line}"
        at = f" at {self.field}:" if self.field else ""
        text = f"{where}:{at} {self.problem}"
        return f"{text}\nHint: {self.hint}" if self.hint else text


class TaskFileErrors(TaskFileError):
    """Every problem of a file that loads whole (the manifest), reported at once."""

    def __init__(self, errors: list[TaskFileError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(
            first.path, first.problem, line=first.line, field=first.field, hint=first.hint
        )

    def render(self) -> str:
        return "\n".join(error.render() for error in self.errors)


class AgentError(AgentevalError):
    """The agent under test crashed, timed out or returned something unusable: an *error* result."""

    def __init__(self, message: str, *, detail: str = "") -> None:
        self.message = message
        self.detail = detail
        super().__init__(message)

    def render(self) -> str:
        return f"{self.message}\n{self.detail}" if self.detail else self.message


class EnvironmentUnavailable(AgentError):
    """An attempt's environment could not be had (`phase="build"`: its image or files cannot
    be made; `phase="start"`: it could not be started or reached) or failed under it (its
    daemon, its machine): infrastructure, not the agent's doing. Raise it from a plugin's
    environment (`pytest_agenteval_make_environment`, or any of its methods): a `build`
    failure errs in phase `build` as `build_failed`, any other in phase `sandbox` as
    `sandbox_error`; both are counted apart, a resume runs the attempt again, and the gate
    never allows it."""

    error_type = "sandbox_error"
    phase = "sandbox"

    def __init__(self, message: str, *, detail: str = "", phase: str | None = None) -> None:
        super().__init__(message, detail=detail)
        if phase == "build":
            self.phase, self.error_type = "build", "build_failed"


class AgentTimeout(AgentError):
    """The agent did not answer within the task's timeout."""

    error_class = "timeout"


class GraderError(AgentError):
    """A grader could not judge the output (it crashed, or its command could not run)."""

    error_class = "grading_error"


class OverBudget(AgentError):
    """The agent's usage went over the task's `budget:`: an error counted apart."""

    error_type = "over_budget"


class AttemptStopped(AgentevalError):
    """Raised by `task.check()` between an agent's turns: stop the loop now. Let it propagate
    (or catch it and return what you have): the attempt runner knows which limit it was."""

    def __init__(self, limit: str, reason: str) -> None:
        self.limit = limit
        """`run` (a run-wide stop), or the attempt's own `budget` or `timeout`."""
        self.reason = reason
        super().__init__(reason)


class RunStopped(AttemptStopped):
    """The run stops (`agenteval cancel`, its deadline, a spend or token cap): the attempt is
    recorded with what it spent as stopped, and a resume (with the limit raised) runs it
    again."""

    error_type = "RunStopped"

    def __init__(self, reason: str) -> None:
        super().__init__("run", reason)


class LimitReached(AttemptStopped):
    """The attempt's own `budget:` or `timeout` is passed by what it reported so far: the
    attempt is graded on what it produced, its record says `stopped`."""


class AgentUnavailable(AgentevalError):
    """The agent a spec names cannot be built: a module, file, function or program that does
    not exist, or a plugin that refused its options. Its attempts never start, so nothing is
    recorded for them and a resume after the fix runs them."""

    def __init__(
        self,
        problem: str,
        *,
        hint: str | None = None,
        where: str = "",
        option: tuple[str | int, ...] = (),
    ) -> None:
        self.problem = problem
        self.hint = hint
        self.where = where
        """`path:line: at field` of the agent spec (or the option naming it), once known."""
        self.option = option
        """The path of the kind's option at fault (`("tools", 1)`), so it is located at its
        own line; empty: the spec as a whole."""
        super().__init__(self.render())

    def located(self, where: str) -> AgentUnavailable:
        return AgentUnavailable(self.problem, hint=self.hint, where=where, option=self.option)

    def render(self) -> str:
        text = f"{self.where}: {self.problem}" if self.where else self.problem
        return f"{text}\nHint: {self.hint}" if self.hint else text


class GraderSpecError(ValueError):
    """A grader spec that cannot be built; `option` names the offending option, if any."""

    def __init__(self, problem: str, *, option: str | None = None, hint: str | None = None):
        super().__init__(problem)
        self.problem = problem
        self.option = option
        self.hint = hint
        self.others: tuple[GraderSpecError, ...] = ()
        """More problems of the same spec, reported with this one."""


class TemplateError(AgentevalError):
    """A workspace template holds something a workspace must not get (a link out, a device)."""

    def __init__(self, problem: str, *, hint: str) -> None:
        self.problem = problem
        self.hint = hint
        super().__init__(f"{problem}\nHint: {hint}")


class StoreError(AgentevalError):
    """The run store cannot be used (unknown run, newer schema, a read or write that failed)."""


class ReportError(AgentevalError):
    """A report file could not be written (read-only folder, full disk...)."""


def os_failure(action: str, path: Path | str, exc: OSError) -> str:
    """`cannot write /x/index.jsonl: [Errno 28] No space left on device`: what, where and why."""
    return f"cannot {action} {path}: [Errno {exc.errno}] {exc.strerror or exc}"


def display_path(path: Path | str) -> str:
    """`path` relative to the working directory when it lies below it (as pytest shows paths)."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A `did you mean 'x'?` hint for a misspelt name, or None when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


M = TypeVar("M", bound=BaseModel)


def agent_options(kind: str, model: type[M], options: Mapping[str, Any]) -> M:
    """An agent kind's validated options; the first problem as an AgentUnavailable naming the
    option (an unknown one with a did-you-mean)."""
    try:
        return model.model_validate(dict(options))
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        loc = tuple(p for p in error["loc"] if isinstance(p, str | int))
        option = ".".join(str(p) for p in loc) or "options"
        if error["type"] == "extra_forbidden":
            fields = model.model_fields
            hint = did_you_mean(option, fields) or "options: " + ", ".join(fields)
            raise AgentUnavailable(
                f"{kind} agent: unknown option {option!r}", hint=hint, option=loc
            ) from None
        given = f" is {excerpt(repr(error['input']), 80)}" if loc else ""
        raise AgentUnavailable(
            f"{kind} agent: option {option!r}{given}: {error['msg']}", option=loc
        ) from None
