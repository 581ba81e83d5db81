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
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, cast

from ..core.environment import Environment
from ..core.error_classes import class_of
from ..core.errors import (
    AgentError,
    AgentTimeout,
    AgentUnavailable,
    AttemptStopped,
    GraderError,
    OverBudget,
    RunStopped,
)
from ..core.identity import AttemptId
from ..core.model import AgentResult, Phase, Status, Task, Verdict
from ..core.records import HISTORY_LIMIT, AttemptRecord, Detail, new_record, spend_sum, usage_json
from ..core.trace import ATTEMPT_LIMITS, Trace
from ..core.values import value_class
from ..providers.bound import Spend, attempt_llm
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
from .executor import AgentCall, Executor, LoopExecutor, SerialExecutor, call_with_deadline
from .exits import agent_calls, in_agent_call
from .graders import GradeContext, as_verdict
from .turns import NotePhase, Spent, Watch, grader_phase, summed_usage, with_trace

DEFAULT_GRADER_TIMEOUT = 60.0
PACKAGE_DIR = str(Path(__file__).parent.parent)

AgentSource = Callable[[], AgentRef]
"""Names the attempt's agent (and its label for the record); called only when the agent runs."""


@value_class
class AttemptJob:
    """One attempt to carry out: the task, the attempt index, the resume decision and the
    variant whose agent runs it."""

    task: TaskDef
    attempt: int
    decision: Decision
    variant: str | None = None
    """None for a dataset without variants, or a task that names its own agent."""
    key: AttemptId = field(init=False, compare=False, repr=False)
    """The attempt's identity, made once (an attempt asks for it about ten times)."""

    def __post_init__(self) -> None:
        key = AttemptId(
            dataset=self.task.dataset.name,
            task_id=self.task.id,
            variant=self.variant,
            attempt=self.attempt,
        )
        object.__setattr__(self, "key", key)  # set once, here


@value_class
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
    note_running: Callable[[AttemptId, bool], None] | None = None
    """Told which attempt's agent call starts (True) and ends (False), where the store can
    keep it (one write each)."""
    stopped: Stopped | None = None
    """Why no new attempt may start now (cancel, spend cap, deadline), or None."""
    limits: Callable[[AttemptJob], AbstractContextManager[None] | None] | None = None
    """Waits for the limits of the attempt's agent (slots, pace) and holds them for its call;
    None when its agent has none."""
    spent: Spent | None = None
    """Told each answer's cost, tokens and model calls as it arrives, when no reservation
    counted them (the run's ledger and caps count them); None without a run."""
    reserve: Spend | None = None
    """The run's ledger and caps for model calls through the provider seam: each reserves
    its worst case before it is sent and settles on the answer (None: no run)."""
    ahead: Ahead[_Attempt, Answer] | None = None
    """Under `--agenteval-concurrency`: the pool that starts agent calls ahead of their turn."""
    note_phase: NotePhase | None = None
    """Told each attempt's phase as it changes (None: it ended), for live progress."""
    finished: Callable[[AttemptRecord, Task], None] | None = None
    """Told each new record with its agent-facing Task (OpenTelemetry exports its trace)."""
    traceparent: Callable[[], str] | None = None
    """A W3C `traceparent` for a new attempt's agent span (OpenTelemetry on), or None."""

    def schedule(self, job: AttemptJob, source: AgentSource, at_turn: bool = False) -> bool:
        """Start the attempt's agent call ahead of its turn, when it has one to make; False
        when its agent cannot be had now (it is then made at the attempt's turn, and fails
        there as in a serial run). An attempt made at its turn (a regrade; one whose agent
        cannot be had at its turn, `at_turn`) that needs a sandbox slot holds its place in
        the order slots are taken in (`Ahead`)."""
        if self.ahead is None or self.ahead.scheduled(job.key):
            return True
        admit = self.environments.admission(job.task, job.key)
        if not _calls_agent(job.decision):
            if admit is not None and job.decision.action != "reuse":
                self.ahead.hold(job.key, admit)
            return True
        try:
            agent = source()
        except Exception:
            if at_turn and admit is not None:
                self.ahead.hold(job.key, admit)
                return True
            return False
        context = _Attempt(
            job, self.environments, self._used(agent.label), self.note_phase, self.reserve
        )
        context.phase("waiting")
        call = partial(self._answer, agent, context, ahead=True)
        acall = partial(self._answer_on_loop, agent, context) if self._awaits(job, agent) else None
        blocks = acall is None or self._blocks_loop(agent)
        self.ahead.schedule(job.key, call, context, admit, acall, job.task.timeout, blocks)
        return True

    def _blocks_loop(self, agent: AgentRef) -> bool:
        """Whether the agent's calls may block the event loop (any but the executor's own
        agents that only await)."""
        return not isinstance(self.executor, SerialExecutor) or self.executor.blocks_loop(agent)

    def _awaits(self, job: AttemptJob, agent: AgentRef) -> bool:
        """Whether the call ahead can be awaited on the executor's event loop: an async agent
        with nothing around it that would block the loop (no environment made before it, no
        limit slots to wait for, no grader that waits on a program right after it)."""
        task = job.task
        return (
            self.ahead is not None
            and self.ahead.loop is not None
            and task.workspace_dir is None
            and task.sandbox is None
            and task.artifacts is None
            and (self.limits is None or self.limits(job) is None)
            and not _waiting_graders(task)
            and cast(LoopExecutor, self.executor).awaits(agent)
        )

    def run(self, job: AttemptJob, source: AgentSource) -> Outcome:
        """Carry out one attempt, and again while it ends in an error class its `retry:`
        names (up to `max` more tries, `backoff` apart, never past a stop nor the task's
        `timeout`, which all the tries share): the earlier tries stay in the record's
        `previous`, their cost in its `retry_cost`."""
        outcome = self._run_once(job, source)
        retry = job.task.retry
        tries: list[AttemptRecord] = []
        end = _tries_end(job, outcome)
        while (
            retry is not None
            and len(tries) < retry.max
            and (record := outcome.record) is not None
            and record.status == "error"
            and record.error_class in retry.on
            and not record.regraded
            and self._backed_off(retry.backoff, end)
        ):
            if outcome.environment is not None:
                outcome.environment.teardown(keep=False)
            tries.append(record)
            outcome = self._run_once(job, source, end)
        if not tries or outcome.record is None:
            return outcome
        history = tuple(t.to_json() | {"previous": []} for t in reversed(tries))
        final = outcome.record
        retried = replace(
            final,
            previous=(*history, *final.previous)[:HISTORY_LIMIT],
            retries=len(tries),
            retry_cost=spend_sum(t.spend for t in tries),
        )
        return replace(outcome, record=retried)

    def _backed_off(self, seconds: float, tries_end: float | None = None) -> bool:
        """Wait `seconds` before a retry; False when a stop (cap, deadline, cancel) came
        first or is there already, or the wait would reach `tries_end` (the attempt's
        timeout): no retry is started then, and no wait is made for none."""
        end = time.monotonic() + seconds
        if tries_end is not None and end >= tries_end:
            return False
        while True:
            if self.stop_reason() is not None:
                return False
            left = end - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, 0.05))

    def _run_once(
        self, job: AttemptJob, source: AgentSource, tries_end: float | None = None
    ) -> Outcome:
        """Carry out one try of an attempt (a retry's agent call ends by `tries_end`, what
        is left of the task's timeout). Whatever the agent or a grader raises, SystemExit
        included, ends as an error record; only KeyboardInterrupt and `passthrough`
        propagate, and then nothing is recorded, as the attempt did not finish."""
        decision = job.decision
        if decision.action == "reuse":
            return Outcome(decision)
        calls = _calls_agent(decision)
        early = self.ahead.take(job.key) if self.ahead else None
        context: _Attempt | None = None
        try:
            if early is not None and early.call is None:
                early.wait()  # its place in the order sandbox slots are taken in
                early = None
            if early is not None:
                context = early.context
                assert context is not None  # a call's, never a held place's
                early.wait()  # raises NotStarted when the run stopped before the call began
                started, t0 = early.started, early.t0
            else:
                if calls:
                    self._check_stop()
                used = decision.record.agent if decision.record else {}
                context = _Attempt(job, self.environments, used, self.note_phase, self.reserve)
                context.tries_end = tries_end
                started, t0 = time.time(), time.perf_counter()
            outcome = self._carry_out(job, context, early, source, started, t0)
        finally:
            self.environments.unreserve(job.key)  # a slot taken for it and never used
            if context is not None:
                context.phase(None)
        if self.finished is not None and outcome.record is not None:
            self.finished(outcome.record, context.task)
        context.ended()
        return outcome

    def _carry_out(
        self,
        job: AttemptJob,
        context: _Attempt,
        early: Started[_Attempt, Answer] | None,
        source: AgentSource,
        started: float,
        t0: float,
    ) -> Outcome:
        decision = job.decision
        verdicts: list[Verdict] = []
        result: AgentResult | None = None
        phase: Phase = "agent"
        try:
            answer = self._answer_at_turn(context, early, source)
            result = answer.result
            phase = "budget"
            if context.stopped != "budget":  # a loop that stopped at its budget is graded
                check_budget(job.task, result)
            phase = "grading"
            verdicts = grade(job.task, context.task, result, answer.graded, context)
        except BaseException as exc:
            # An agent that cannot be built, or a stop, means the attempt never started.
            if isinstance(
                exc, (KeyboardInterrupt, AgentUnavailable, NotStarted, *self.passthrough)
            ):
                raise
            if isinstance(exc, RunStopped):
                phase, result = "stopped", getattr(exc, "result", None)
            phase = getattr(exc, "phase", phase)  # a sandbox's image that cannot be had: build
            record = context.record("error", verdicts, result, started, t0, exc, phase)
            self._count_judges(record)
            return Outcome(decision, record, exc, context.live, context.artifacts)
        status: Status = "pass" if all(v.passed for v in verdicts) else "fail"
        record = context.record(status, verdicts, result, started, t0)
        self._count_judges(record)
        return Outcome(decision, record, None, context.live, context.artifacts)

    def _answer_at_turn(
        self, context: _Attempt, early: Started[_Attempt, Answer] | None, source: AgentSource
    ) -> Answer:
        """The answer the attempt grades: the stored one (a regrade), the one its call ahead
        gave, or the agent's, called now."""
        stored = context.job.decision.record
        if stored is not None:
            context.stopped = stored.stopped
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
        if job.task.workspace_dir is not None or job.task.sandbox is not None:
            # the template is there before the agent, and a sandbox's image is had (its build
            # failure never calls the agent, also one that never touches its container)
            context.task.environment  # noqa: B018 - made on first use
        held = self.limits(job) if self.limits is not None else None
        if held is not None:
            context.phase("waiting")
        if held is None:  # no limits: no context manager on the per-attempt path
            result = self._counted(agent, context)
        else:
            asked = time.perf_counter()
            with held:
                context.wait = time.perf_counter() - asked
                self._check_stop()  # a stop that came while waiting for the limits
                result = self._counted(agent, context)
        waiting = _waiting_graders(job.task) if ahead else None
        graded = (
            grade_waiting(job.task, context.task, result, waiting, context) if waiting else None
        )
        if ahead:
            if _done_with_environment(job.task, waiting or []):
                context.release_environment()  # its slot need not wait for the item's turn
            context.phase("waiting")  # for its item's turn
        return Answer(result, graded) if graded is not None else Answer(result)

    async def _answer_on_loop(self, agent: AgentRef, context: _Attempt) -> Answer:
        """`_answer` ahead of the item's turn for a call awaited on the event loop (`_awaits`:
        nothing to make or wait for around it)."""
        try:
            result = await self._acall_agent(agent, context)
        except (AgentTimeout, RunStopped) as exc:
            self._count_unanswered(context, exc)
            raise
        self._count(context, result)
        context.phase("waiting")  # for its item's turn
        return Answer(result)

    def _counted(self, agent: AgentRef, context: _Attempt) -> AgentResult:
        """The agent's answer, its spend counted the moment it arrives (before the call gives
        up its limit slot); a call abandoned at its deadline is counted when it really ends."""
        if self.spent is None:
            return self._call_agent(agent, context)
        try:
            result = self._call_agent(agent, context)
        except (AgentTimeout, RunStopped) as exc:
            self._count_unanswered(context, exc)
            raise
        self._count(context, result)
        return result

    def _count_unanswered(self, context: _Attempt, exc: AgentTimeout | RunStopped) -> None:
        """A call that timed out is counted when it really ends; one a run-wide stop ended,
        for what it answered."""
        if isinstance(exc, RunStopped):
            self._count(context, getattr(exc, "result", None))
            return
        running_on = getattr(exc, "running_on", None)
        if running_on is not None and self.spent is not None:
            running_on(partial(self._count_late, context))

    def _count(self, context: _Attempt, result: AgentResult | None) -> None:
        """Count the answer's spend, but for what its trace's model calls counted already."""
        usage = result.usage if result is not None else None
        if self.spent is None or usage is None:
            return
        cost = usage.cost
        pricing = context.job.task.dataset.manifest.pricing
        if cost is None and pricing:
            cost = priced(usage_json(usage), pricing).get("cost")
        counted_cost, counted_tokens = context.watch.counted if context.watch else (0.0, 0)
        tokens = (usage.input_tokens or 0) + (usage.output_tokens or 0) - counted_tokens
        extra = None if cost is None else cost - counted_cost
        if (extra or 0) > 1e-12 or tokens > 0:
            self.spent(extra if extra is None or extra > 0 else 0.0, max(tokens, 0), 0)

    def _count_late(self, context: _Attempt, value: Any) -> None:
        """An abandoned call ended: its answer (if any) cost money too."""
        if value is not None:
            self._count(context, as_result(value))

    def _count_judges(self, record: AttemptRecord) -> None:
        """Judges' spend, unless their calls reserved and settled it already (the seam)."""
        if self.reserve is None and self.spent is not None and record.judge_cost:
            self.spent(record.judge_cost, 0, 0)

    def _call_agent(self, agent: AgentRef, context: _Attempt) -> AgentResult:
        """The agent call itself, noted while it runs (a process that dies is blamed on the
        calls it had in flight) and marked as an agent's (its `os._exit` is its error)."""
        call = self._call_starts(agent, context)
        was = in_agent_call(True)
        t0 = time.perf_counter()
        try:
            result = self.executor.call_agent(call)
        except AttemptStopped:  # the loop stopped between turns: what it did is the answer
            result = AgentResult(output="")
        finally:
            in_agent_call(was)
            self._call_ends(context, t0)
        return self._answered(context, result, call.task.trace)

    async def _acall_agent(self, agent: AgentRef, context: _Attempt) -> AgentResult:
        """`_call_agent` awaited on the executor's event loop (an agent thread by its name:
        only the count of agent calls is kept, which guards `os._exit`)."""
        call = self._call_starts(agent, context)
        agent_calls(1)
        t0 = time.perf_counter()
        try:
            result = await cast(LoopExecutor, self.executor).acall_agent(call)
        except AttemptStopped:
            result = AgentResult(output="")
        finally:
            agent_calls(-1)
            self._call_ends(context, t0)
        return self._answered(context, result, call.task.trace)

    def _call_starts(self, agent: AgentRef, context: _Attempt) -> AgentCall:
        """The call about to be made, with the watch on its trace; it is noted as running."""
        job = context.job
        key, note, timeout = job.key, self.note_running, context.timeout()
        context.watch = Watch(
            context.task.trace,
            job.task,
            self.spent,
            self.stopped,
            context.phase,
            self.traceparent() if self.traceparent is not None else None,
            timeout=timeout,
        )
        if note is not None:
            note(key, True)
        context.phase("agent")
        return AgentCall(key, agent, context.task, timeout, context)

    def _call_ends(self, context: _Attempt, t0: float) -> None:
        """The call ended, answered or not: its time, and the files it changed (a failed
        attempt's are the ones worth a look)."""
        if self.note_running is not None:
            self.note_running(context.job.key, False)
        context.timings["agent"] = time.perf_counter() - t0
        context.keep_artifacts()

    def _answered(self, context: _Attempt, result: AgentResult, trace: Trace) -> AgentResult:
        """The call's answer with its trace; a run-wide stop the trace met is raised. The trace
        comes with the call: one that ends after its item gave up on it finds the attempt
        ended."""
        result = with_trace(result, trace)
        hit = trace.stopped
        if hit is not None and hit.limit == "run":
            stop = RunStopped(hit.reason)
            stop.result = result  # type: ignore[attr-defined]
            raise stop
        context.stopped = hit.limit if hit is not None and hit.limit in ATTEMPT_LIMITS else None
        return result


def _no_phase(name: str) -> None:
    """An ended attempt's phases: none are noted."""


def _tries_end(job: AttemptJob, first: Outcome) -> float | None:
    """When the task's timeout runs out for all an attempt's tries (`time.monotonic()`),
    counted from its first try's start; None without a timeout."""
    timeout, record = job.task.timeout, first.record
    if timeout is None or record is None:
        return None
    return time.monotonic() + (record.started_at + timeout - time.time())


def _calls_agent(decision: Decision) -> bool:
    """Whether carrying out the decision calls the agent (a regrade and a reuse do not)."""
    return decision.action == "run" and decision.record is None


class _Attempt:
    """The agent-facing Task of one attempt and the environment it may create (its `Place`)."""

    def __init__(
        self,
        job: AttemptJob,
        environments: Environments,
        used: dict[str, Any],
        note_phase: NotePhase | None = None,
        spend: Spend | None = None,
    ) -> None:
        self.job = job
        self.environments = environments
        self.used = used
        self.note_phase = note_phase
        self.watch: Watch | None = None
        """How the runner watches the agent's trace (made when the call starts)."""
        self.stopped: str | None = None
        """The attempt's own limit that ended its agent's loop (max_turns, budget, timeout)."""
        self.timings: dict[str, Any] = {}
        """Seconds per phase, for the record (`timings`)."""
        self._identity: AttemptId | None = None
        self._noted: tuple[str | None, int] = ("", -1)
        """The record's `agent`: the fingerprint and the agent used (known once it is made)."""
        self.environment: Environment | None = None
        self.released = False
        """Its sandbox was torn down once the agent call and the graders that need it were
        done (`release_environment`), before the item's turn."""
        self.wait = 0.0
        """Seconds waited for the agent's limits before the call started."""
        self.artifacts: Artifacts | None = None
        """What the attempt keeps of the files its agent changed (collected after the call)."""
        self.tries_end: float | None = None
        """A retry's: when the task's timeout, shared by all its tries, runs out
        (`time.monotonic()`)."""
        task = job.task
        self.task = Task(
            id=task.id,
            input=task.spec.input,
            metadata=task.spec.metadata,
            attempt=job.attempt,
            seed=job.key.seed,
            workspace=self._local_folder,
            environment=self._environment,  # made when first asked for (a template: at once)
            budget=task.budget,
            llm=partial(
                attempt_llm,
                task.dataset.manifest.providers,
                spend=spend,
                pricing=task.dataset.manifest.pricing,
                attempt=job.attempt,
                task_id=task.id,
                variant=job.variant,
            ),
        )

    def _environment(self) -> Environment:
        if self.environment is None:
            self.phase("environment")
            t0 = time.perf_counter()
            self.environment = self.environments.create(self.job.task, self.job.key)
            self.timings["environment"] = time.perf_counter() - t0
        return self.environment

    def timeout(self) -> float | None:
        """Seconds the agent call may take: the task's timeout, or for a retry what is left
        of it (a moment at least: a call is never made without a limit)."""
        if self.tries_end is None:
            return self.job.task.timeout
        return max(self.tries_end - time.monotonic(), 0.001)

    def phase(self, name: str | None) -> None:
        """The attempt's phase changes (None: it ended), for live progress."""
        note = self.note_phase
        if note is None:
            return
        watch = self.watch
        turn = watch.turns if watch is not None else 0
        if (name, turn) == self._noted:  # a second grader of the same kind: nothing new
            return
        self._noted = (name, turn)
        identity = self._identity
        if identity is None:
            identity = self._identity = self.job.key
        note(identity, name, turn)

    def ended(self) -> None:
        """The attempt is over: drop the links back here (the Task's and the watch's), so
        refcounting frees the attempt at once rather than the cyclic GC, which found ~20
        objects of every attempt in a cycle (bench/RESULTS.md). A call given up on may still
        hold the Task and its trace: its late events note no phase, and its late answer is
        counted less what the watch counted of its model calls, as before."""
        self.note_phase = None
        if self.watch is not None:
            self.watch.phase = _no_phase
        del self.task

    def _local_folder(self) -> Path:
        return host_folder(self._environment())

    @property
    def live(self) -> Environment | None:
        """The environment whoever shows the outcome tears down (None: none, or gone)."""
        return None if self.released else self.environment

    def release_environment(self) -> None:
        """Tear the sandbox down now, when nothing of the attempt needs it any more and the
        run keeps no sandbox (its slot is free for the next attempt at once)."""
        if self.environment is not None and not self.released:
            self.released = self.environments.release(self.environment)

    def keep_artifacts(self) -> None:
        """After the agent call: list the files it changed and keep those that fit, when the
        task keeps artifacts (listing that fails is said in the list, not the attempt's
        error)."""
        spec = self.job.task.artifacts
        if spec is None:
            return
        self.phase("artifacts")
        t0 = time.perf_counter()
        try:
            self.artifacts = collect_artifacts(self.environment, spec.max_bytes)
        except Exception as exc:
            self.artifacts = artifacts_failed(exc)
        self.timings["artifacts"] = time.perf_counter() - t0

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
        trace = self.task.trace
        error_type = getattr(exc, "error_type", type(exc).__name__) if exc else None
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
            error_type=error_type,
            phase=phase if exc is not None else None,
            error_class=class_of(exc, phase, error_type) if exc is not None else None,
            regraded=self.job.decision.action == "regrade",
            task_input=task.spec.input,
            expected=task.spec.expected,
            wait=self.wait,
            sandbox=self.environments.describe(task, self.environment),
            environment=getattr(self.environment, "captured", None),
            changed_files=self.artifacts.files if self.artifacts is not None else None,
            part_digests=task.part_digests,
            transcript=trace.to_json() if result is None and len(trace) else None,
            usage=summed_usage(trace) if result is None and len(trace) else None,
            stopped=self.stopped,
            timings=self.timings_json(),
        )
        pricing = task.dataset.manifest.pricing
        return with_prices(record, pricing) if pricing else record

    def timings_json(self) -> dict[str, Any]:
        """The record's `timings`: seconds per phase, in the order they happen (the wait for
        the agent's limits only when there was one)."""
        found: dict[str, Any] = {"wait": round(self.wait, 6)} if self.wait else {}
        for name, value in self.timings.items():
            if name == "graders":  # by grader index: a list in the graders' order
                found[name] = [_rounded(value.get(i)) for i in range(len(self.job.task.graders))]
            else:
                found[name] = _rounded(value)
        return found


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


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
    task: TaskDef,
    agent_task: Task,
    result: AgentResult,
    graded: Graded | None = None,
    attempt: _Attempt | None = None,
) -> list[Verdict]:
    """Every grader's verdict, in order (those in `graded` were run already); a grader that
    may run long is stopped at `grader_timeout`. `attempt` is told each grader's phase and
    keeps its seconds."""
    ctx = GradeContext(result.output, task.spec.expected, agent_task, result)
    limit = grader_timeout(task)
    verdicts = []
    seconds = attempt.timings.setdefault("graders", {}) if attempt is not None else {}
    for index, (spec, grader) in enumerate(zip(task.grader_specs, task.graders, strict=True)):
        if attempt is not None and not (graded is not None and index in graded):
            attempt.phase(grader_phase(spec.type))
        t0 = time.perf_counter()
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
        seconds.setdefault(index, time.perf_counter() - t0)
        verdicts.append(as_verdict(spec.type, value))
    return verdicts


def _done_with_environment(task: TaskDef, graded: list[int]) -> bool:
    """Whether no grader left for the item's turn may reach the attempt's environment (those
    in `graded` ran already)."""
    return all(
        i in graded or not getattr(grader, "uses_environment", True)
        for i, grader in enumerate(task.graders)
    )


def _waiting_graders(task: TaskDef) -> list[int]:
    """The graders that wait on a program or a server (`command`, `judge`): under concurrency
    they run in the pool thread right after the agent call, beside other attempts."""
    return [i for i, grader in enumerate(task.graders) if getattr(grader, "waits", False)]


def grade_waiting(
    task: TaskDef,
    agent_task: Task,
    result: AgentResult,
    which: list[int],
    attempt: _Attempt | None = None,
) -> Graded:
    """Run the waiting graders now (in a pool thread); what one raises is kept for its turn."""
    ctx = GradeContext(result.output, task.spec.expected, agent_task, result)
    graded: Graded = {}
    seconds = attempt.timings.setdefault("graders", {}) if attempt is not None else {}
    for index in which:
        if attempt is not None:
            attempt.phase(grader_phase(task.grader_specs[index].type))
        t0 = time.perf_counter()
        try:
            graded[index] = task.graders[index].grade(ctx)
        except Exception as exc:
            graded[index] = exc
        seconds[index] = time.perf_counter() - t0
    return graded


def grader_timeout(task: TaskDef) -> float:
    defaults = task.dataset.manifest.defaults
    return task.spec.grader_timeout or defaults.grader_timeout or DEFAULT_GRADER_TIMEOUT


def error_text(exc: BaseException) -> str:
    """The record's error: our message, or the user's traceback (internal frames hidden)."""
    if isinstance(exc, AgentError):
        return exc.render()
    if isinstance(exc, AttemptStopped):
        return (
            f"stopped between turns: {exc.reason}\nHint: a resume runs this attempt again "
            "(raise the limit that stopped the run first)"
        )
    shown = traceback.TracebackException.from_exception(exc)
    for part in _chain(shown):
        frames = own_frames(list(part.stack), lambda frame: frame.filename)
        part.stack = traceback.StackSummary.from_list(frames)
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


def from_users_frame(tb: TracebackType | None) -> TracebackType | None:
    """A traceback from its first frame that is not machinery (`internal_frame`); all of it
    when none is the user's. What an error shows starts there, so rendering it need not read
    the plugin's own frames."""
    first = tb
    while first is not None and internal_frame(first.tb_frame.f_code.co_filename):
        first = first.tb_next
    return first or tb


T = TypeVar("T")
_LIBRARY_DIRS = tuple(
    {
        sysconfig.get_paths()[name] + os.sep
        for name in ("stdlib", "platstdlib", "purelib", "platlib")
    }
)


def own_frames(frames: list[T], filename: Callable[[T], str]) -> list[T]:
    """The frames of a traceback that are the user's: machinery around their code hidden
    (`internal_frame`), and the library frames past their last one (pydantic refusing to
    change a frozen `AgentResult`, a client raising for a request: the error's message says
    what the library found). All frames when none is the user's."""
    shown = [frame for frame in frames if not internal_frame(filename(frame))]
    mine = [i for i, frame in enumerate(shown) if not filename(frame).startswith(_LIBRARY_DIRS)]
    if not mine:
        return shown or frames
    return shown[: mine[-1] + 1]


def interrupted_record(
    task: TaskDef | None, key: AttemptId, agent: dict[str, Any], message: str, error_type: str
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
