"""pytest glue for one attempt: the AttemptItem and the hooks that shape its reports.

The agent runs (and its output is graded) in `setup()`, so an agent crash, timeout or a grader
that cannot judge is a pytest *error*; `runtest()` only reports the verdict, so a wrong answer
is a *failure*. A replayed attempt runs nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from ..core.environment import Environment
from ..core.errors import AgentError, AgentevalError, AgentUnavailable, GraderSpecError
from ..core.identity import AttemptId
from ..core.model import AnyAgentSpec, GraderSpec, TaskSpec
from ..core.payloads import PAYLOADS, NeverStarted, NewRecord, Payload, Replayed, to_wire
from ..core.records import AttemptRecord, Detail
from ..core.text import excerpt, printable
from ..core.values import cached
from ..execution.agents import (
    BUILTIN_AGENT_KINDS,
    Agent,
    AgentRef,
    make_builtin_agent,
    unknown_agent_kind,
)
from ..execution.attempt import AttemptJob, Outcome, from_users_frame
from ..execution.concurrent import NotStarted
from ..execution.environment import MakeEnvironment
from ..execution.graders import BUILTIN_GRADERS, make_builtin_grader, unknown_grader
from ..sources.dataset import TaskDef
from .failures import as_crash_repr, at_phase, encodable, text_repr, user_traceback
from .internals import TerminalRepr, fixture_defs, fixture_value, skip_at_item
from .pluginhooks import answered_by, hook_at
from .runtime import FIXTURE_NAME, RUNTIME, Runtime
from .settings import dry_run

if TYPE_CHECKING:
    from ..execution.tools import Tool

PHASE_WORDS = {
    "agent": "agent call",
    "grading": "grading",
    "budget": "budget",
    "build": "sandbox build",
    "crash": "crash",
}
"""Where an errored attempt stopped (its record's phase), in the words its error's first line,
crash message and JUnit `phase` property use. The report's `when` stays pytest's `setup`."""
NOT_BUILT = "agent build"
SAID_NOT_BUILT = pytest.StashKey[set[str]]()
"""Where an attempt whose agent cannot be built stopped."""


FIXTURE_LABEL = f"fixture:{FIXTURE_NAME}"
"""How records name the `agenteval_agent` fixture's agent."""


class AttemptFailed(Exception):
    """The attempt's output did not pass its graders (a wrong answer: a test failure)."""


class ReplayedError(Exception):
    """A reused record of an attempt that errored; replayed as an error again."""


class AgentevalItem(pytest.Item):
    """An item whose reports carry agenteval data to the controller (`report.agenteval`)."""

    def report_extras(self) -> Payload:
        raise NotImplementedError

    def failed_at(self, exc: BaseException) -> str | None:
        """Where the item's setup that raised `exc` failed (`agent call`, `load`, ...), when
        it is the attempt's error rather than a plain setup error (None)."""
        return None

    def heading(self) -> str | None:
        """What an error's first line calls it, before its crash message (None: its first
        line stays as it is)."""
        return self.name

    def kept_files(self) -> dict[str, bytes] | None:
        """The bytes of the artifacts a new record keeps, by path (`report.agenteval_files`:
        the controller writes them into the run store)."""
        return None


class AttemptItem(AgentevalItem):
    """One attempt of one task: asks the attempt runner for its outcome in `setup()` and turns
    it into an error (setup), a failure (`runtest`) or a pass."""

    def __init__(
        self, *, task: TaskDef, attempt: int, variant: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.attempt = attempt
        self.variant = variant
        """The variant whose agent runs the attempt (None: no variant)."""
        self.key = AttemptId(
            dataset=task.dataset.name, task_id=task.id, variant=variant, attempt=attempt
        )
        self.outcome: Outcome | None = None
        self.not_started: AgentUnavailable | None = None
        """Why the attempt could not start (its agent cannot be built); nothing is recorded."""
        self._job: AttemptJob | None = None
        self.runtime: Runtime = self.config.stash[RUNTIME]
        """Looked up once: an attempt asks for it about ten times."""

    def job(self) -> AttemptJob:
        task = self.task
        return AttemptJob(task, self.attempt, self.runtime.decide(self.key, task), self.variant)

    def schedule(self, at_turn: bool = False) -> bool:
        """Start this attempt's agent call ahead of its turn (`--agenteval-concurrency`);
        False when its agent cannot be had yet (a fixture not made yet). `at_turn`: its turn
        has come (the attempt holds its place among those taking sandbox slots)."""
        self._job = self._job or self.job()  # decided once: setup takes the same job
        return self.runtime.runner.schedule(self._job, self._agent_ahead, at_turn)

    def setup(self) -> None:
        try:
            job, self._job = self._job or self.job(), None
            self.outcome = outcome = self.runtime.runner.run(job, self._agent)
            self._note_cached(outcome.record)
        except AgentUnavailable as exc:  # raised before the attempt began: nothing to record
            self.not_started = exc
            raise
        except NotStarted as stop:
            reason = f"not started: {stop.reason}"
            raise skip_at_item(reason) from None
        if outcome.error is not None:
            # pytest renders a setup error's whole traceback before `repr_failure` replaces
            # it: from the user's first frame on, it reads none of our frames' sources.
            error = outcome.error
            shown = None if isinstance(error, AgentevalError) else error.__traceback__
            raise error.with_traceback(from_users_frame(shown))
        if outcome.reused and outcome.status == "error":
            raise ReplayedError(outcome.detail().error or "errored")

    def runtest(self) -> None:
        if self.outcome is not None and self.outcome.status == "fail":
            raise AttemptFailed

    def teardown(self) -> None:
        outcome = self.outcome
        if outcome is not None and outcome.environment is not None:
            outcome.environment.teardown(keep=outcome.status != "pass")
        # The record has travelled on the report; tens of thousands of items stay in memory.
        self.outcome = self.not_started = None

    def check_agent(self) -> None:
        """Build the agent this attempt declares, starting nothing (the fixture's is only set
        up when an attempt runs); raises AgentUnavailable, located at its spec."""
        if not self.uses_fixture():
            self.runtime.declared_agent(self.task, self.variant)

    def prepare_agent(self, checked: set[tuple[int, bool]]) -> None:
        """Before any attempt runs: build the agent now if this attempt will call it, so a bad
        reference is known once, up front (`checked`: what other attempts built already)."""
        runtime, task = self.runtime, self.task
        fixture = self.uses_fixture()  # cached per folder
        key = (id(runtime.agent_spec(task, self.variant)), fixture)
        if key in checked:
            return
        if runtime.decide(self.key, task).action == "run":
            checked.add(key)
            with contextlib.suppress(AgentUnavailable):
                self.check_agent()

    def _agent(self) -> AgentRef:
        """The agent of this attempt: the `agenteval_agent` fixture when it supplies it."""
        if self.uses_fixture():
            return AgentRef.in_process(fixture_value(self, FIXTURE_NAME), FIXTURE_LABEL)
        return self.runtime.declared_agent(self.task, self.variant)

    def uses_fixture(self) -> bool:
        """Whether the `agenteval_agent` fixture supplies this attempt's agent."""
        declared = self.runtime.settings.agent_override or self.task.spec.agent or self.variant
        return declared is None and self._has_fixture()

    def _agent_ahead(self) -> AgentRef:
        """The agent, when it may be made before the item's turn: a declared agent or a
        session-scoped fixture (a narrower fixture belongs to its item's setup)."""
        if not self.uses_fixture():
            return self._agent()
        defs = fixture_defs(self, FIXTURE_NAME)
        made = defs[-1].cached_result if defs and defs[-1].scope == "session" else None
        if made is None or made[2] is not None:  # (value, cache key, exception info)
            raise LookupError("made at an item's setup: a session fixture's first, or each")
        return AgentRef.in_process(made[0], FIXTURE_LABEL)

    def _has_fixture(self) -> bool:
        folders = self.runtime.fixture_folders
        found = folders.get(self.parent)
        if found is None:
            found = folders[self.parent] = bool(fixture_defs(self, FIXTURE_NAME))
        return found

    def _note_cached(self, record: AttemptRecord | None) -> None:
        """`cached_calls` in --junitxml: the attempt's calls the model cache answered (the
        one property its process adds, as the index carries no usage)."""
        usage = record.usage if record is not None else None
        hits = usage.get("cached_calls") if usage else None
        if hits:
            self.user_properties.append(("cached_calls", hits))

    def report_extras(self) -> Payload:
        """What the report carries to the controller: a new record with its action (typed:
        `TaskHooks.pytest_report_to_serializable` ships it as one string to xdist's
        controller), else the action and the attempt's key. JUnit properties are the
        controller's to add: few values cross the process boundary."""
        outcome = self.outcome
        if self.not_started is not None:
            return NeverStarted(self.key, self.not_started.render())
        if outcome is None:  # setup stopped before the attempt began (a passthrough exception)
            return Replayed("run", self.key)
        record = outcome.record
        if record is None:
            return Replayed(outcome.decision.action, self.key)
        return NewRecord(outcome.decision.action, record)

    def kept_files(self) -> dict[str, bytes] | None:
        outcome = self.outcome
        if outcome is None or outcome.record is None or outcome.artifacts is None:
            return None
        return outcome.artifacts.kept or None

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        exc = excinfo.value
        if isinstance(exc, AttemptFailed | ReplayedError):
            return self._describe()
        if isinstance(exc, AgentUnavailable):
            return self._text(self._not_built(exc), f"not run: {exc.where}: {exc.problem}")
        if isinstance(exc, AgentError):
            text = f"{self._headline()} error: {exc.render()}{self._workspace_line()}"
            return self._text(text, exc.message)
        if isinstance(exc, AgentevalError):
            return f"{self._headline()} error: {exc}"
        if self.outcome is None or self.outcome.error is not exc:
            # Our own bug, not the agent's: keep every frame so it can be reported and fixed.
            return f"internal error in pytest-agenteval, please report it:\n{excinfo.getrepr()}"
        return user_traceback(excinfo)

    def _not_built(self, exc: AgentUnavailable) -> str:
        """Why the attempt did not run: in full the first time this process meets the error,
        then by reference (one broken import would otherwise print once per attempt)."""
        said = self.session.stash.setdefault(SAID_NOT_BUILT, set())
        problem = f"{exc.where}: {exc.problem}"
        if problem in said:
            why = "the first such error above says why"
            return f"{self._headline()} not run: its agent cannot be built ({why})"
        said.add(problem)
        note = "nothing was recorded; the agenteval section at the end says more"
        hint = f"\nHint: {exc.hint}" if exc.hint else ""
        return f"{self._headline()} not run: {problem}{hint}\n({note})"

    def failed_at(self, exc: BaseException) -> str | None:
        """Where the attempt errored (`agent call`, `grading`, `budget`, `sandbox build`, a
        replay's as stored; `agent build` when its agent cannot be built), or None when it
        never began or the plugin failed."""
        if exc is self.not_started:
            return NOT_BUILT
        outcome = self.outcome
        if outcome is None or not (exc is outcome.error or isinstance(exc, ReplayedError)):
            return None
        return PHASE_WORDS.get(outcome.facts.phase or "")

    def heading(self) -> str:
        return f"{self._headline()} error"

    def _headline(self) -> str:
        variant = f"{self.variant} " if self.variant else ""
        return f"{self.task.id} [{variant}attempt {self.attempt}]"

    def _text(self, text: str, message: str) -> TerminalRepr:
        return text_repr(text, message, self.path, self.task.line)

    def _workspace_line(self) -> str:
        environment = self.outcome.environment if self.outcome else None
        where = environment.where if environment else ""
        return f"\nworkspace kept: {where}" if where else ""

    def _describe(self) -> TerminalRepr:
        """A wrong answer (or a replayed error) in a few plain lines; the first says why."""
        assert self.outcome is not None
        outcome, detail = self.outcome, self.outcome.detail()
        verb = "errored" if outcome.status == "error" else "failed"
        replayed = " (replayed from the stored record)" if outcome.reused else ""
        why = _why(detail)
        lines = [f"{self._headline()} {verb}{replayed}: {why}"]
        for v in detail.verdicts:
            lines.append(f"  [{'pass' if v.passed else 'FAIL'}] {v.grader}: {v.reason}")
        if detail.error:
            lines.append(f"error: {detail.error}")
        if self.task.spec.expected is not None:
            lines.append(f"expected: {excerpt(str(self.task.spec.expected), 300)}")
        if detail.output is not None:
            lines.append(f"output: {excerpt(detail.output, 500)!r}")
        return self._text("\n".join(lines) + self._workspace_line(), why)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.task.line - 1, f"agenteval: {self.name}"

    @cached
    def location(self) -> tuple[str, int | None, str]:
        """pytest's own, with the file's path as pytest shows it (relative to the rootdir)
        worked out once for all the attempts of a task file, not per item: for a file below
        the rootdir, that is the file's node id."""
        _, line, name = self.reportinfo()
        file = self.parent
        assert file is not None  # an attempt is always a task file's
        shown = file.stash.get(_SHOWN_PATH, None)
        if shown is None:
            below_root = os.sep == "/" and str(self.path) == f"{self.config.rootpath}/{file.nodeid}"
            shown = file.stash[_SHOWN_PATH] = file.nodeid if below_root else super().location[0]
        return shown, line, name


_SHOWN_PATH = pytest.StashKey[str]()
"""On a task file's node: its path in pytest's locations (relative to the rootdir)."""


def _why(detail: Detail) -> str:
    """One line on why an attempt did not pass: its failing graders' reasons, or its error."""
    failed = [f"{v.grader}: {v.reason}".splitlines()[0] for v in detail.verdicts if not v.passed]
    if failed:
        return excerpt("; ".join(failed), 300)
    error = (detail.error or "error").strip().splitlines() or ["error"]
    return error[-1] if error[0].startswith("Traceback") else error[0]


def _grades(grader: object) -> bool:
    return callable(getattr(grader, "grade", None))


def _is_environment(made: object) -> bool:
    return isinstance(made, Environment)


def tool_maker(config: pytest.Config, root: Path) -> Callable[[str], Tool | None]:
    """A `react` agent's tools from `pytest_agenteval_make_tool` at the dataset's folder: a
    `Tool`, a plain function (its schema from its signature), or None for the built-ins."""

    def make(name: str) -> Tool | None:
        from ..execution.tools import Tool, function_tool  # only for a react agent's tools

        hook = hook_at(config, "pytest_agenteval_make_tool", root)
        asked = {"name": name, "dataset_root": root}
        made = hook(**asked)
        if made is None or isinstance(made, Tool):
            return made
        if callable(made):
            try:
                return function_tool(made, name)
            except TypeError as exc:
                raise AgentUnavailable(f"react agent: tool {name!r}: {exc}") from None
        source = answered_by(config, hook, asked, lambda a: isinstance(a, Tool) or callable(a))
        raise AgentUnavailable(
            f"pytest_agenteval_make_tool returned {type(made).__name__} for {name!r} "
            f"(answered by {source})",
            hint="return a pytest_agenteval.Tool, a function (its docstring and signature "
            "describe it to the model), or None to let others try",
        )

    return make


class TaskHooks:
    """Hooks registered only while a dataset is active, so other runs pay nothing for them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @staticmethod
    def grader_maker(config: pytest.Config) -> Any:
        """A grader factory asking `pytest_agenteval_make_grader` at the dataset's folder:
        plugins and the conftests there or above first, built-ins last."""

        def make(spec: GraderSpec, task: TaskSpec, root: Path) -> Any:
            hook = hook_at(config, "pytest_agenteval_make_grader", root)
            asked = {"spec": spec, "task": task, "dataset_root": root}
            try:
                grader = hook(**asked)
            except GraderSpecError:
                raise
            except ValueError as exc:
                raise GraderSpecError(str(exc)) from None
            if grader is None:
                raise unknown_grader(spec.type, list(BUILTIN_GRADERS))
            if not _grades(grader):
                source = answered_by(config, hook, asked, _grades)
                raise GraderSpecError(
                    f"pytest_agenteval_make_grader returned {type(grader).__name__} for "
                    f"{spec.type!r}, which has no grade(ctx) method (answered by {source})",
                    hint="pytest_agenteval_make_grader returns an object with a grade(ctx) "
                    "method (see pytest_agenteval.Grader), or None to let others try",
                )
            return grader

        return make

    @staticmethod
    def agent_maker(config: pytest.Config) -> Any:
        """An agent factory asking `pytest_agenteval_make_agent` at the spec's folder: plugins
        and the conftests there or above first, built-ins last."""

        def make(spec: AnyAgentSpec, root: Path) -> Agent:
            hook = hook_at(config, "pytest_agenteval_make_agent", root)
            asked = {"spec": spec, "dataset_root": root}
            agent = hook(**asked)
            if agent is None:
                raise unknown_agent_kind(getattr(spec, "type", "?"), list(BUILTIN_AGENT_KINDS))
            if not callable(agent):
                source = answered_by(config, hook, asked, callable)
                raise AgentUnavailable(
                    f"pytest_agenteval_make_agent returned {type(agent).__name__}, which is "
                    f"not callable (answered by {source})",
                    hint="pytest_agenteval_make_agent returns a callable taking the Task "
                    "(sync or async def), or None to let others try",
                )
            return cast(Agent, agent)

        return make

    @staticmethod
    def environment_maker(config: pytest.Config) -> MakeEnvironment:
        """Plugins' environments for attempts (`pytest_agenteval_make_environment`), asked at
        the dataset's folder."""

        def make(task: TaskDef, key: AttemptId) -> Environment | None:
            root = task.dataset.root
            hook = hook_at(config, "pytest_agenteval_make_environment", root)
            asked = {
                "task": task.spec,
                "key": key,
                "template": task.workspace_dir,
                "dataset_root": root,
                "config": config,
            }
            made = hook(**asked)
            if made is None or isinstance(made, Environment):
                return made
            source = answered_by(config, hook, asked, _is_environment)
            raise AgentError(
                f"pytest_agenteval_make_environment returned {type(made).__name__}, "
                f"not an Environment (answered by {source})",
                detail="return an object with what pytest_agenteval.Environment lists "
                "(workdir, python, local_path, where, exec, read_file, write_file, "
                "changed_files, teardown), or None",
            )

        return make

    @pytest.hookimpl(trylast=True)
    def pytest_agenteval_make_agent(self, spec: AnyAgentSpec, dataset_root: Path) -> Any:
        return make_builtin_agent(spec, dataset_root, tool_maker(self.config, dataset_root))

    @pytest.hookimpl(trylast=True)
    def pytest_agenteval_make_grader(
        self, spec: GraderSpec, task: TaskSpec, dataset_root: Path
    ) -> Any:
        return make_builtin_grader(spec, task, dataset_root)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Build the agents of the attempts that will run before the first one starts, once
        each (a replay, `--co` and `--agenteval-plan` build none)."""
        if dry_run(self.config):
            return
        checked: set[tuple[int, bool]] = set()
        for item in session.items:
            if isinstance(item, AttemptItem):
                item.prepare_agent(checked)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if report.sections and isinstance(item, AgentevalItem):  # what the agent printed
            report.sections = [(title, printable(text)) for title, text in report.sections]
        if call.when != "teardown" and isinstance(item, AgentevalItem):
            where = None
            if call.when == "setup" and report.failed and call.excinfo is not None:
                report.longrepr = item.repr_failure(call.excinfo)
                where = item.failed_at(call.excinfo.value)
            if report.failed:
                path, line, _ = item.reportinfo()
                longrepr = as_crash_repr(report.longrepr, Path(path), (line or 0) + 1)
                if where is not None:
                    longrepr = at_phase(longrepr, where, item.heading())
                    item.user_properties.append(("phase", where))  # --junitxml: the teardown's
                report.longrepr = encodable(longrepr, call.excinfo)
            if call.when == "call" or report.failed:
                report.agenteval = item.report_extras()
                files = item.kept_files()
                if files:
                    report.agenteval_files = files
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_report_to_serializable(self, report: pytest.TestReport) -> Any:
        """The payload crosses to xdist's controller in its wire form (a new record as one
        string: execnet ships one value far more cheaply than a dict of them); in this process
        it stays typed."""
        data = yield
        if isinstance(data, dict) and isinstance(data.get("agenteval"), PAYLOADS):
            data["agenteval"] = to_wire(data["agenteval"])
        return data

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        runner = config.stash[RUNTIME].runner
        runner.environments.close()
        runner.executor.close()
