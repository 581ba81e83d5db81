"""One attempt as a pipeline that does not know pytest: decision → agent → graders → record.

`AttemptRunner.run` is the whole life of an attempt. The pytest item only asks for its outcome
and turns it into an error, a failure or a pass; everything that decides what happened lives
here, so other front ends (a concurrent executor, a CLI) get the same behaviour.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import os
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ..core.environment import Environment
from ..core.errors import AgentError, AgentTimeout, AgentUnavailable, GraderError, OverBudget
from ..core.model import AgentResult, Key, Phase, Status, Task, Verdict
from ..core.records import AttemptRecord, Detail, attempt_key, attempt_seed, new_record, usage_json
from ..providers.pricing import priced, with_prices
from ..sources.dataset import TaskDef
from ..store.plan import Decision
from ..store.runs import IndexRow
from .agents import AgentRef, as_result
from .artifacts import Artifacts
from .artifacts import collect as collect_artifacts
from .artifacts import failed as artifacts_failed
from .concurrent import Ahead, NotStarted, Started, Stopped
from .environment import Environments, host_folder
from .executor import AgentCall, Executor, call_with_deadline
from .exits import in_agent_call
from .graders import GradeContext, as_verdict

DEFAULT_GRADER_TIMEOUT = 60.0
PACKAGE_DIR = str(Path(__file__).parent.parent)

AgentSource = Callable[[], AgentRef]
"""Names the attempt's agent (and its label for the record); called only when the agent runs."""


@dataclass(frozen=True, slots=True)
class AttemptJob:
    """One attempt to carry out: the task, the attempt index, the resume decision and the
    variant whose agent runs it."""

    task: TaskDef
    attempt: int
    decision: Decision
    variant: str | None = None
    """None for a dataset without variants, or a task that names its own agent."""

    @property
    def key(self) -> Key:
        return attempt_key(self.task.dataset.name, self.task.id, self.attempt, self.variant)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended: a new record, or the stored verdict reused."""

    decision: Decision
    record: AttemptRecord | None = None
    """The new record (run or regrade); None when the stored verdict is reused."""
    error: BaseException | None = None
    """What made a new record an error, for the report (its traceback is the user's)."""
    environment: Environment | None = None
    """The attempt's environment, when it made one (torn down by whoever shows the outcome)."""
    artifacts: Artifacts | None = None
    """The files the agent changed and the bytes kept of them (for the store), when its task
    keeps artifacts."""

    @property
    def facts(self) -> AttemptRecord | IndexRow:
        """The attempt's status, score, usage and timing, new or stored."""
        facts = self.record or self.decision.stored
        assert facts is not None
        return facts

    @property
    def status(self) -> Status:
        return self.facts.status  # type: ignore[return-value]

    @property
    def reused(self) -> bool:
        return self.record is None

    def detail(self) -> Detail:
        return self.facts.detail()


@dataclass(slots=True)  # not frozen: made once per attempt
class Answer:
    """An agent call's answer, and the verdicts of the graders run right after it (in a pool
    thread, under concurrency)."""

    result: AgentResult
    graded: Graded | None = None


@dataclass(frozen=True)
class AttemptRunner:
    """Runs attempts; what every attempt of a process shares (built once, with its run)."""

    executor: Executor
    environments: Environments
    fingerprint: dict[str, Any]
    passthrough: tuple[type[BaseException], ...] = ()
    """Exceptions that are not the attempt's to record (they stop the session)."""
    note_running: Callable[[Key, bool], None] | None = None
    """Told which attempt's agent call starts (True) and ends (False), where the store can
    keep it (one write each)."""
    stopped: Stopped | None = None
    """Why no new attempt may start now (cancel, spend cap, deadline), or None."""
    limits: Callable[[AttemptJob], AbstractContextManager[None] | None] | None = None
    """Waits for the limits of the attempt's agent (slots, pace) and holds them for its call;
    None when its agent has none."""
    spent: Callable[[float | None, int], None] | None = None
    """Told each answer's cost and tokens as it arrives (the run's caps count them); None
    when the run has no cap."""
    ahead: Ahead[_Attempt, Answer] | None = None
    """Under `--agenteval-concurrency`: the pool that starts agent calls ahead of their turn."""

    def schedule(self, job: AttemptJob, source: AgentSource) -> bool:
        """Start the attempt's agent call ahead of its turn, when it has one to make; False
        when its agent cannot be had now (it is then made at the attempt's turn, and fails
        there as in a serial run)."""
        if self.ahead is None or not _calls_agent(job.decision) or self.ahead.scheduled(job.key):
            return True
        if self.environments.at_turn_only(job.task):
            return True
        try:
            agent = source()
        except Exception:
            return False
        context = _Attempt(job, self.environments, self._used(agent.label))
        self.ahead.schedule(job.key, partial(self._answer, agent, context, ahead=True), context)
        return True

    def run(self, job: AttemptJob, source: AgentSource) -> Outcome:
        """Carry out one attempt. Whatever the agent or a grader raises, SystemExit included,
        ends as an error record; only KeyboardInterrupt and `passthrough` propagate, and then
        nothing is recorded, as the attempt did not finish."""
        decision = job.decision
        if decision.action == "reuse":
            return Outcome(decision)
        calls = _calls_agent(decision)
        early = self.ahead.take(job.key) if self.ahead and calls else None
        if early is not None:
            early.wait()  # raises NotStarted when the run stopped before the call began
            context, started, t0 = early.context, early.started, early.t0
        else:
            if calls:
                self._check_stop()
            used = decision.record.agent if decision.record else {}
            context = _Attempt(job, self.environments, used)
            started, t0 = time.time(), time.perf_counter()
        verdicts: list[Verdict] = []
        result: AgentResult | None = None
        phase: Phase = "agent"
        try:
            answer = self._answer_at_turn(context, early, source)
            result = answer.result
            phase = "budget"
            check_budget(job.task, result)
            phase = "grading"
            verdicts = grade(job.task, context.task, result, answer.graded)
        except BaseException as exc:
            # An agent that cannot be built, or a stop, means the attempt never started.
            if isinstance(
                exc, (KeyboardInterrupt, AgentUnavailable, NotStarted, *self.passthrough)
            ):
                raise
            phase = getattr(exc, "phase", phase)  # a sandbox's image that cannot be had: build
            record = context.record("error", verdicts, result, started, t0, exc, phase)
            self._count_judges(record)
            return Outcome(decision, record, exc, context.environment, context.artifacts)
        status: Status = "pass" if all(v.passed for v in verdicts) else "fail"
        record = context.record(status, verdicts, result, started, t0)
        self._count_judges(record)
        return Outcome(decision, record, None, context.environment, context.artifacts)

    def _answer_at_turn(
        self, context: _Attempt, early: Started[_Attempt, Answer] | None, source: AgentSource
    ) -> Answer:
        """The answer the attempt grades: the stored one (a regrade), the one its call ahead
        gave, or the agent's, called now."""
        stored = context.job.decision.record
        if stored is not None:
            return Answer(stored.result())
        if early is not None:
            return early.result()
        agent = source()
        context.used = self._used(agent.label)
        try:
            return self._answer(agent, context)
        finally:
            self._check_given_up()

    def _used(self, label: str) -> dict[str, Any]:
        """The record's `agent`: the run's fingerprint and the agent this attempt used."""
        return {**self.fingerprint, "used": label}

    def stop_reason(self) -> str | None:
        """Why no new attempt may start now, or None."""
        return self.stopped() if self.stopped is not None else None

    def _check_given_up(self) -> None:
        """A call made at its item's turn that ended after Ctrl-C's grace gave up on the calls
        in flight (and killed what they started) is not the agent's answer: skip it too."""
        if self.ahead is not None and self.ahead.cancelled is not None:
            raise self.ahead.cancelled

    def _check_stop(self) -> None:
        reason = self.stop_reason()
        if reason is not None:
            raise NotStarted(reason)

    def _answer(self, agent: AgentRef, context: _Attempt, ahead: bool = False) -> Answer:
        """The one path of an agent call, at its item's turn or `ahead` of it (in a pool
        thread, where the graders that wait on a program or a server run right after it)."""
        job = context.job
        if job.task.workspace_dir is not None:
            context.task.environment  # noqa: B018 - the template is there before the agent
        held = self.limits(job) if self.limits is not None else None
        if held is None:  # no limits: no context manager on the per-attempt path
            result = self._counted(agent, context)
        else:
            asked = time.perf_counter()
            with held:
                context.wait = time.perf_counter() - asked
                self._check_stop()  # a stop that came while waiting for the limits
                result = self._counted(agent, context)
        waiting = _waiting_graders(job.task) if ahead else None
        if waiting:
            return Answer(result, grade_waiting(job.task, context.task, result, waiting))
        return Answer(result)

    def _counted(self, agent: AgentRef, context: _Attempt) -> AgentResult:
        """The agent's answer, its spend counted the moment it arrives (before the call gives
        up its limit slot); a call abandoned at its deadline is counted when it really ends."""
        job = context.job
        if self.spent is None:
            return self._call_agent(agent, context)
        try:
            result = self._call_agent(agent, context)
        except AgentTimeout as exc:
            running_on = getattr(exc, "running_on", None)
            if running_on is not None:
                running_on(partial(self._count_late, job))
            raise
        self._count(job, result)
        return result

    def _count(self, job: AttemptJob, result: AgentResult) -> None:
        usage = result.usage
        if self.spent is None or usage is None:
            return
        cost = usage.cost
        pricing = job.task.dataset.manifest.pricing
        if cost is None and pricing:
            cost = priced(usage_json(usage), pricing).get("cost")
        self.spent(cost, (usage.input_tokens or 0) + (usage.output_tokens or 0))

    def _count_late(self, job: AttemptJob, value: Any) -> None:
        """An abandoned call ended: its answer (if any) cost money too."""
        if value is not None:
            self._count(job, as_result(value))

    def _count_judges(self, record: AttemptRecord) -> None:
        if self.spent is not None and record.judge_cost:
            self.spent(record.judge_cost, 0)

    def _call_agent(self, agent: AgentRef, context: _Attempt) -> AgentResult:
        """The agent call itself, noted while it runs (a process that dies is blamed on the
        calls it had in flight) and marked as an agent's (its `os._exit` is its error)."""
        job = context.job
        key, note = job.key, self.note_running
        if note is not None:
            note(key, True)
        was = in_agent_call(True)
        try:
            call = AgentCall(key, agent, context.task, job.task.timeout, context)
            result = self.executor.call_agent(call)
        except Exception:
            context.keep_artifacts()  # a failed attempt's files are the ones worth a look
            raise
        finally:
            in_agent_call(was)
            if note is not None:
                note(key, False)
        context.keep_artifacts()
        return result


def _calls_agent(decision: Decision) -> bool:
    """Whether carrying out the decision calls the agent (a regrade and a reuse do not)."""
    return decision.action == "run" and decision.record is None


class _Attempt:
    """The agent-facing Task of one attempt and the environment it may create (its `Place`)."""

    def __init__(self, job: AttemptJob, environments: Environments, used: dict[str, Any]) -> None:
        self.job = job
        self.environments = environments
        self.used = used
        """The record's `agent`: the fingerprint and the agent used (known once it is made)."""
        self.environment: Environment | None = None
        self.wait = 0.0
        """Seconds waited for the agent's limits before the call started."""
        self.artifacts: Artifacts | None = None
        """What the attempt keeps of the files its agent changed (collected after the call)."""
        task = job.task
        self.task = Task(
            id=task.id,
            input=task.spec.input,
            metadata=task.spec.metadata,
            attempt=job.attempt,
            seed=attempt_seed(job.key),
            workspace=self._local_folder,
            environment=self._environment,  # made when first asked for (a template: at once)
            budget=task.budget,
        )

    def _environment(self) -> Environment:
        if self.environment is None:
            self.environment = self.environments.create(self.job.task, self.job.key)
        return self.environment

    def _local_folder(self) -> Path:
        return host_folder(self._environment())

    def keep_artifacts(self) -> None:
        """After the agent call: list the files it changed and keep those that fit, when the
        task keeps artifacts (listing that fails is said in the list, not the attempt's
        error)."""
        spec = self.job.task.artifacts
        if spec is None:
            return
        try:
            self.artifacts = collect_artifacts(self.environment, spec.max_bytes)
        except Exception as exc:
            self.artifacts = artifacts_failed(exc)

    def share(self) -> None:
        self.environments.ready()

    def adopt(self) -> None:
        """Take on the environment the agent made in another process (`--agenteval-isolate`)."""
        if self.environment is None:
            self.environment = self.environments.adopt(self.job.task, self.job.key)

    def record(
        self,
        status: Status,
        verdicts: list[Verdict],
        result: AgentResult | None,
        started: float,
        t0: float,
        exc: BaseException | None = None,
        phase: Phase | None = None,
    ) -> AttemptRecord:
        task = self.job.task
        record = new_record(
            key=self.job.key,
            digest=task.digest,
            run_digest=task.run_digest,
            agent=self.used,
            tags=task.spec.tags,
            status=status,
            verdicts=verdicts,
            result=result,
            started_at=started + self.wait,
            duration=time.perf_counter() - t0 - self.wait,
            error=error_text(exc) if exc is not None else None,
            error_type=getattr(exc, "error_type", type(exc).__name__) if exc else None,
            phase=phase if exc is not None else None,
            regraded=self.job.decision.action == "regrade",
            task_input=task.spec.input,
            expected=task.spec.expected,
            wait=self.wait,
            image=getattr(self.environment, "image_id", None),  # a sandbox's
            environment=getattr(self.environment, "captured", None),
            changed_files=self.artifacts.files if self.artifacts is not None else None,
            part_digests=task.part_digests,
        )
        pricing = task.dataset.manifest.pricing
        return with_prices(record, pricing) if pricing else record


def check_budget(task: TaskDef, result: AgentResult) -> None:
    """Raise OverBudget when the agent's reported usage (its cost priced from `pricing:` when
    it reported none) went over the task's budget; usage not reported is never over."""
    budget, usage = task.budget, result.usage
    if budget is None or usage is None:
        return
    known = [n for n in (usage.input_tokens, usage.output_tokens) if n is not None]
    cost = usage.cost
    pricing = task.dataset.manifest.pricing
    if cost is None and pricing:
        cost = priced(usage_json(usage), pricing).get("cost")
    reason = budget.over(sum(known) if known else None, cost)
    if reason is not None:
        raise OverBudget(
            f"over budget: {reason}",
            detail="Hint: raise the task's `budget:` (or the manifest's `defaults: budget:`); "
            "the stored answer is then judged again without calling the agent",
        )


Graded = dict[int, Any]
"""Verdicts (or what grading raised) by grader index, of graders run ahead in a pool thread."""


def grade(
    task: TaskDef, agent_task: Task, result: AgentResult, graded: Graded | None = None
) -> list[Verdict]:
    """Every grader's verdict, in order (those in `graded` were run already); a grader that
    may run long is stopped at `grader_timeout`."""
    ctx = GradeContext(result.output, task.spec.expected, agent_task, result)
    limit = grader_timeout(task)
    verdicts = []
    for index, (spec, grader) in enumerate(zip(task.grader_specs, task.graders, strict=True)):
        if graded is not None and index in graded:
            value = graded[index]
            if isinstance(value, BaseException):
                raise value
        elif getattr(grader, "needs_deadline", True):
            try:
                value = call_with_deadline(partial(grader.grade, ctx), limit)
            except TimeoutError:
                raise GraderError(
                    f"grader {spec.type!r} took longer than {limit:g}s (grader_timeout)",
                    detail="a backtracking regular expression or a slow python grader; "
                    "fix it, or raise `grader_timeout` on the task or in the manifest defaults",
                ) from None
        else:
            value = grader.grade(ctx)
        verdicts.append(as_verdict(spec.type, value))
    return verdicts


def _waiting_graders(task: TaskDef) -> list[int]:
    """The graders that wait on a program or a server (`command`, `judge`): under concurrency
    they run in the pool thread right after the agent call, beside other attempts."""
    return [i for i, grader in enumerate(task.graders) if getattr(grader, "waits", False)]


def grade_waiting(task: TaskDef, agent_task: Task, result: AgentResult, which: list[int]) -> Graded:
    """Run the waiting graders now (in a pool thread); what one raises is kept for its turn."""
    ctx = GradeContext(result.output, task.spec.expected, agent_task, result)
    graded: Graded = {}
    for index in which:
        try:
            graded[index] = task.graders[index].grade(ctx)
        except Exception as exc:
            graded[index] = exc
    return graded


def grader_timeout(task: TaskDef) -> float:
    defaults = task.dataset.manifest.defaults
    return task.spec.grader_timeout or defaults.grader_timeout or DEFAULT_GRADER_TIMEOUT


def error_text(exc: BaseException) -> str:
    """The record's error: our message, or the user's traceback (internal frames hidden)."""
    if isinstance(exc, AgentError):
        return exc.render()
    shown = traceback.TracebackException.from_exception(exc)
    for part in _chain(shown):
        frames = [f for f in part.stack if not internal_frame(f.filename)]
        part.stack = traceback.StackSummary.from_list(frames or part.stack)
    return "".join(shown.format()).rstrip()


def _chain(exc: traceback.TracebackException) -> list[traceback.TracebackException]:
    found, seen = [], set()
    todo: list[traceback.TracebackException | None] = [exc]
    while todo:
        part = todo.pop()
        if part is not None and id(part) not in seen:
            seen.add(id(part))
            found.append(part)
            todo += [part.__cause__, part.__context__]
    return found


_INTERNAL_DIRS = tuple(
    str(Path(module.__file__).parent) + os.sep
    for module in (asyncio, concurrent.futures, importlib)
    if module.__file__
)
_INTERNAL_FILES = (threading.__file__, PACKAGE_DIR + os.sep)
_INTERNAL_PACKAGES = (f"{os.sep}_pytest{os.sep}", f"{os.sep}pluggy{os.sep}")


def internal_frame(filename: str) -> bool:
    """Whether a traceback frame is machinery around the user's code: the plugin, pytest,
    pluggy, or the asyncio / concurrent.futures / threading code an agent call runs on."""
    return (
        filename.startswith(_INTERNAL_DIRS)
        or filename.startswith(_INTERNAL_FILES)
        or filename.startswith("<frozen importlib")
        or any(part in filename for part in _INTERNAL_PACKAGES)
    )


def interrupted_record(
    task: TaskDef | None, key: Key, agent: dict[str, Any], message: str, error_type: str
) -> AttemptRecord:
    """The error record of an attempt that ended without one: its process died, or the
    plugin failed around it. Phase `crash`: an interruption, so a resume runs it again."""
    return new_record(
        key=key,
        digest=task.digest if task else "",
        run_digest=task.run_digest if task else "",
        agent=agent,
        tags=task.spec.tags if task else (),
        status="error",
        verdicts=[],
        result=None,
        started_at=time.time(),
        duration=0.0,
        error=message,
        error_type=error_type,
        phase="crash",
    )
