"""pytest glue for one attempt: the AttemptItem and the hooks that shape its reports.

The agent runs (and its output is graded) in `setup()`, so an agent crash, timeout or a grader
that cannot judge is a pytest *error*; `runtest()` only reports the verdict, so a wrong answer
is a *failure*. A replayed attempt runs nothing.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

import pytest
from _pytest._code.code import ExceptionInfo, TerminalRepr

from ..core.errors import AgentError, AgentevalError, GraderSpecError
from ..core.model import AgentResult, GraderSpec, Key, Task, TaskSpec, Verdict
from ..core.records import attempt_seed, build_record, junit_properties, result_from_record
from ..core.text import excerpt
from ..execution import agents
from ..execution.graders import (
    BUILTIN_GRADERS,
    GradeContext,
    as_verdict,
    make_builtin_grader,
    unknown_grader,
)
from ..sources.dataset import TaskDef
from .runtime import FIXTURE_NAME, RUNTIME, Runtime

_PLUGIN_DIR = str(Path(__file__).parent.parent)


class AttemptFailed(Exception):
    """The attempt's output did not pass its graders (a wrong answer: a test failure)."""


class ReplayedError(Exception):
    """A reused record of an attempt that errored; replayed as an error again."""


class AgentevalItem(pytest.Item):
    """An item whose reports carry agenteval data to the controller (`report.agenteval`)."""

    def report_extras(self) -> dict[str, Any]:
        raise NotImplementedError


class AttemptItem(AgentevalItem):
    """One attempt of one task."""

    def __init__(self, *, task: TaskDef, attempt: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.attempt = attempt
        self.key: Key = (task.dataset.name, task.id, attempt)
        self.action = "run"
        self.record: dict[str, Any] | None = None
        self.replay: dict[str, Any] | None = None
        self.workspace: Path | None = None
        self.agent_used = "none"
        self.regraded_agent: dict[str, Any] | None = None
        self.agent_task: Task | None = None

    @property
    def runtime(self) -> Runtime:
        return self.config.stash[RUNTIME]

    def setup(self) -> None:
        task = self.task
        self.action, data = self.runtime.plan.decide(
            self.key, task.digest, task.run_digest, task.regradable
        )
        if self.action == "reuse":
            self.replay = data
            if data["status"] == "error":
                raise ReplayedError(data.get("error") or "errored")
            return
        started, t0 = time.time(), time.perf_counter()
        verdicts: list[Verdict] = []
        result: AgentResult | None = None
        phase = "agent"
        try:
            if self.action == "regrade":
                self.regraded_agent = data.get("agent")
                result = result_from_record(data)
            else:
                result = self._call_agent()
            phase = "grading"
            verdicts = self._grade(result)
        except Exception as exc:
            self.record = self._record("error", verdicts, result, started, t0, exc, phase)
            raise
        status = "pass" if all(v.passed for v in verdicts) else "fail"
        self.record = self._record(status, verdicts, result, started, t0)

    def runtest(self) -> None:
        status = (self.replay or self.record or {}).get("status")
        if status == "fail":
            raise AttemptFailed

    def teardown(self) -> None:
        if self.workspace is not None and self.record and self.record["status"] == "pass":
            self.runtime.workspaces.discard(self.workspace)
        # The record has travelled on the report; tens of thousands of items stay in memory.
        self.record = self.replay = self.agent_task = None

    def _agent_task(self) -> Task:
        task = self.task
        eager = task.workspace_dir is not None
        return Task(
            id=task.id,
            input=task.spec.input,
            metadata=task.spec.metadata,
            attempt=self.attempt,
            seed=attempt_seed(self.key),
            workspace=self._make_workspace() if eager else self._make_workspace,
        )

    def _make_workspace(self) -> Path:
        self.workspace = self.runtime.workspaces.create(*self.key, self.task.workspace_dir)
        return self.workspace

    def _call_agent(self) -> AgentResult:
        self.agent_task = task = self._agent_task()
        runtime = self.runtime
        if runtime.uses_fixture(self, self.task):
            self.agent_used = f"fixture:{FIXTURE_NAME}"
            agent = self._fixture_agent()
        else:
            agent, self.agent_used = runtime.agent_for(self.task)
        return agents.run(agent, task, self.task.timeout)

    def _fixture_agent(self) -> Any:
        from _pytest.fixtures import TopRequest

        if not hasattr(self, "_request"):
            self.funcargs: dict[str, Any] = {}
            self._fixtureinfo = self.session._fixturemanager.getfixtureinfo(
                node=self, func=None, cls=None
            )
            self.fixturenames = self._fixtureinfo.names_closure
            self._request = TopRequest(self, _ispytest=True)  # type: ignore[arg-type]
        return self._request.getfixturevalue(FIXTURE_NAME)

    def _grade(self, result: AgentResult) -> list[Verdict]:
        task = self.agent_task or self._agent_task()
        ctx = GradeContext(result.output, self.task.spec.expected, task, result)
        specs = self.task.grader_specs
        return [
            as_verdict(s.type, g.grade(ctx)) for s, g in zip(specs, self.task.graders, strict=True)
        ]

    def _record(
        self,
        status: str,
        verdicts: list[Verdict],
        result: AgentResult | None,
        started: float,
        t0: float,
        exc: BaseException | None = None,
        phase: str | None = None,
    ) -> dict[str, Any]:
        return build_record(
            key=self.key,
            digest=self.task.digest,
            run_digest=self.task.run_digest,
            agent=self.regraded_agent or {**self.runtime.fingerprint, "used": self.agent_used},
            tags=self.task.spec.tags,
            status=status,
            verdicts=verdicts,
            result=result,
            started_at=started,
            duration=time.perf_counter() - t0,
            error=_error_text(exc) if exc is not None else None,
            error_type=type(exc).__name__ if exc is not None else None,
            phase=phase if exc is not None else None,
        )

    def report_extras(self) -> dict[str, Any]:
        """What the report carries to the controller: action, key, and a new record if any."""
        source = self.record or self.replay
        if source is not None and not any(p[0] == "task_id" for p in self.user_properties):
            props = junit_properties(self.key[1], self.attempt, source, self.replay is not None)
            self.user_properties.extend(props)
        return {
            "action": self.action,
            "key": list(self.key),
            "record": self.record,
            "replay": self.replay,
        }

    def repr_failure(
        self, excinfo: ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        exc = excinfo.value
        if isinstance(exc, AttemptFailed | ReplayedError):
            return self._describe()
        if isinstance(exc, AgentError):
            return f"{self._headline()} error: {exc.render()}{self._workspace_line()}"
        if isinstance(exc, AgentevalError):
            return f"{self._headline()} error: {exc}"
        if str(excinfo.traceback[-1].path).startswith(_PLUGIN_DIR):
            # Our own bug, not the agent's: keep every frame so it can be reported and fixed.
            return f"internal error in pytest-agenteval, please report it:\n{excinfo.getrepr()}"
        return excinfo.getrepr(
            style="long", funcargs=False, tbfilter=_user_frames, truncate_locals=True
        )

    def _headline(self) -> str:
        return f"{self.task.id} [attempt {self.attempt}]"

    def _workspace_line(self) -> str:
        return f"\nworkspace kept: {self.workspace}" if self.workspace else ""

    def _describe(self) -> str:
        data = self.replay or self.record or {}
        lines = [f"{self._headline()} {'errored' if data.get('status') == 'error' else 'failed'}"]
        if self.replay is not None:
            lines[0] += " (replayed from the stored record)"
        for v in data.get("verdicts", []):
            lines.append(f"  [{'pass' if v['passed'] else 'FAIL'}] {v['grader']}: {v['reason']}")
        if data.get("error"):
            lines.append(f"error: {data['error']}")
        if self.task.spec.expected is not None:
            lines.append(f"expected: {excerpt(str(self.task.spec.expected), 300)}")
        output = data.get("output") if "output" in data else data.get("output_excerpt")
        if output is not None:
            lines.append(f"output: {excerpt(output, 500)!r}")
        return "\n".join(lines) + self._workspace_line()

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.task.line - 1, f"agenteval: {self.name}"


def _error_text(exc: BaseException) -> str:
    """The record's error: our message, or the user's traceback without the plugin's frames."""
    if isinstance(exc, AgentError):
        return exc.render()
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PLUGIN_DIR):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


def _user_frames(excinfo: ExceptionInfo[BaseException]) -> Any:
    """Drop pytest, pluggy and plugin frames so the user sees their agent's traceback."""
    return excinfo.traceback.filter(
        lambda e: (
            "_pytest" not in str(e.path)
            and "pluggy" not in str(e.path)
            and not str(e.path).startswith(_PLUGIN_DIR)
        )
    )


class TaskHooks:
    """Hooks registered only while a dataset is active, so other runs pay nothing for them."""

    @staticmethod
    def grader_maker(config: pytest.Config) -> Any:
        """A grader factory asking `pytest_agenteval_make_grader`: plugins first, built-ins last."""

        def make(spec: GraderSpec, task: TaskSpec, root: Path) -> Any:
            try:
                grader = config.hook.pytest_agenteval_make_grader(
                    spec=spec, task=task, dataset_root=root
                )
            except GraderSpecError:
                raise
            except ValueError as exc:
                raise GraderSpecError(str(exc)) from None
            if grader is None:
                raise unknown_grader(spec.type, list(BUILTIN_GRADERS))
            return grader

        return make

    @pytest.hookimpl(trylast=True)
    def pytest_agenteval_make_grader(
        self, spec: GraderSpec, task: TaskSpec, dataset_root: Path
    ) -> Any:
        return make_builtin_grader(spec, task, dataset_root)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if call.when != "teardown" and isinstance(item, AgentevalItem):
            if call.when == "setup" and report.failed and call.excinfo is not None:
                report.longrepr = item.repr_failure(call.excinfo)
            if call.when == "call" or report.failed:
                report.agenteval = item.report_extras()
        return report

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        config.stash[RUNTIME].workspaces.close()
        agents.close()
