"""The attempt pipeline without pytest or a subprocess: a fake executor and a fake environment
stand in for the agent call and the attempt's files."""

from __future__ import annotations

import pickle
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from chat_server import ChatServer
from helpers import DatasetMaker, aid, summary_of
from pytest_agenteval import AgentCall, Executor
from pytest_agenteval.core.environment import ChangedFile, ExecResult
from pytest_agenteval.core.errors import AgentUnavailable
from pytest_agenteval.core.identity import AttemptId
from pytest_agenteval.core.model import (
    AgentResult,
    AnyAgentSpec,
    CallableAgentSpec,
    GraderSpec,
    Manifest,
    Task,
    TaskSpec,
    Usage,
)
from pytest_agenteval.execution.agents import (
    Agent,
    AgentRef,
    AgentResolver,
    make_builtin_agent,
    spec_label,
)
from pytest_agenteval.execution.attempt import AttemptJob, AttemptRunner
from pytest_agenteval.execution.concurrent import Ahead, NotStarted
from pytest_agenteval.execution.environment import Environments, LocalEnvironment
from pytest_agenteval.execution.executor import SerialExecutor
from pytest_agenteval.execution.graders import make_builtin_grader
from pytest_agenteval.execution.workspaces import Workspaces
from pytest_agenteval.sources.dataset import Dataset, TaskDef
from pytest_agenteval.store.plan import RUN, Decision
from test_providers import KEY, KEY_ENV, openai_agent


class FakeExecutor:
    """Answers each call with what `answers` holds for its task (an exception is raised)."""

    def __init__(self, answers: dict[str, str | BaseException]) -> None:
        self.answers = answers
        self.calls: list[AgentCall] = []
        self.threads: list[str] = []

    def call_agent(self, call: AgentCall) -> AgentResult:
        self.calls.append(call)
        self.threads.append(threading.current_thread().name)
        environment = call.task.environment
        assert environment is not None
        environment.write_file("answer.txt", b"written")
        answer = self.answers[call.task.id]
        if isinstance(answer, BaseException):
            raise answer
        return AgentResult(output=answer)

    def kill_running(self) -> int:
        return 0

    def close(self) -> None:
        pass


class FakeEnvironment:
    """An attempt's files in memory; programs cannot run."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.kept: bool | None = None

    workdir = "/fake"
    python = "python"
    local_path = None
    where = "memory"

    def exec(
        self,
        argv: Sequence[str],
        input: bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        raise OSError("no programs in a fake environment")

    def read_file(self, path: str) -> bytes:
        return self.files[path]

    def write_file(self, path: str, data: bytes | str) -> None:
        self.files[path] = data.encode() if isinstance(data, str) else data

    def changed_files(self) -> list[ChangedFile]:
        return [ChangedFile(p, "added", len(d)) for p, d in sorted(self.files.items())]

    def teardown(self, keep: bool) -> None:
        self.kept = keep


def make_task(tmp_path: Path, task_id: str, expected: str = "4") -> TaskDef:
    dataset = Dataset(tmp_path, Manifest(name="ds"), None)
    grader_spec = GraderSpec(type="equals")
    spec = TaskSpec(id=task_id, input="2+2?", expected=expected, graders=[grader_spec])
    grader = make_builtin_grader(grader_spec, spec, tmp_path)
    return TaskDef(
        spec, dataset, tmp_path / "t.yaml", 1, graders=(grader,), grader_specs=(grader_spec,)
    )


def make_runner(
    tmp_path: Path, executor: FakeExecutor, concurrency: int = 1, stop: str | None = None
) -> tuple[AttemptRunner, list[FakeEnvironment]]:
    made: list[FakeEnvironment] = []

    def environment(task: TaskDef, key: AttemptId) -> FakeEnvironment:
        made.append(FakeEnvironment())
        return made[-1]

    environments = Environments(Workspaces(tmp_path / "work"), environment)

    def stopped() -> str | None:
        return stop

    ahead: Ahead[Any, Any] | None = Ahead(concurrency, stopped) if concurrency > 1 else None
    runner = AttemptRunner(executor, environments, {"v": 1}, stopped=stopped, ahead=ahead)
    return runner, made


def unused(task: Task) -> str:
    raise AssertionError("the fake executor answers for the agent")


def agent() -> AgentRef:
    return AgentRef.in_process(unused, "fake:agent")


def test_fake_executor_satisfies_the_protocol() -> None:
    """A plain class with the three methods is an Executor; an object without them is not."""
    assert isinstance(FakeExecutor({}), Executor)
    assert not isinstance(object(), Executor)


def test_pass_fail_and_error_records_come_from_the_executor(tmp_path: Path) -> None:
    """Each answer the executor gives becomes the right record, in the fake environment."""
    executor = FakeExecutor({"good": "4", "bad": "5", "raises": ValueError("boom")})
    runner, made = make_runner(tmp_path, executor)
    outcomes = {
        name: runner.run(AttemptJob(make_task(tmp_path, name), 0, RUN), agent)
        for name in ("good", "bad", "raises")
    }
    statuses = {name: outcome.status for name, outcome in outcomes.items()}
    assert statuses == {"good": "pass", "bad": "fail", "raises": "error"}
    error = outcomes["raises"]
    assert error.record is not None and error.record.phase == "agent"
    assert isinstance(error.error, ValueError)
    assert [call.key for call in executor.calls] == [
        aid("ds", n, 0) for n in ("good", "bad", "raises")
    ]
    assert {call.label for call in executor.calls} == {"fake:agent"}
    good = outcomes["good"].record
    assert good is not None and good.agent == {"v": 1, "used": "fake:agent"}
    assert [e.files for e in made] == [{"answer.txt": b"written"}] * 3
    assert outcomes["good"].environment is made[0]


def test_reuse_and_regrade_never_call_the_executor(tmp_path: Path) -> None:
    """A reused attempt makes no record and a regrade judges the stored answer again."""
    executor = FakeExecutor({"t": "4"})
    runner, _ = make_runner(tmp_path, executor)
    task = make_task(tmp_path, "t")
    first = runner.run(AttemptJob(task, 0, RUN), agent).record
    assert first is not None
    changed = make_task(tmp_path, "t", expected="5")
    regraded = runner.run(AttemptJob(changed, 0, Decision("regrade", record=first)), agent)
    assert regraded.status == "fail" and regraded.record is not None
    assert regraded.record.regraded
    assert runner.run(AttemptJob(task, 0, Decision("reuse", stored=None)), agent).reused
    assert len(executor.calls) == 1


def test_a_stop_starts_no_call(tmp_path: Path) -> None:
    """Once the run stops, an attempt that would call its agent is not started at all."""
    executor = FakeExecutor({"t": "4"})
    runner, _ = make_runner(tmp_path, executor, stop="the spend cap")
    with pytest.raises(NotStarted, match="the spend cap"):
        runner.run(AttemptJob(make_task(tmp_path, "t"), 0, RUN), agent)
    assert executor.calls == []


def test_calls_ahead_go_through_the_same_executor_path(tmp_path: Path) -> None:
    """Under concurrency a call scheduled ahead runs in a pool thread through the executor and
    its item gets the same record a serial run gives."""
    answers: dict[str, str | BaseException] = {"a": "4", "b": "5"}
    serial, _ = make_runner(tmp_path / "s", FakeExecutor(answers))
    ahead_executor = FakeExecutor(answers)
    ahead, made = make_runner(tmp_path / "c", ahead_executor, concurrency=2)
    jobs = [AttemptJob(make_task(tmp_path, name), 0, RUN) for name in ("a", "b")]
    for job in jobs:
        assert ahead.schedule(job, agent)
    together = [ahead.run(job, agent) for job in jobs]
    alone = [serial.run(job, agent) for job in jobs]
    assert [o.status for o in together] == [o.status for o in alone] == ["pass", "fail"]
    assert [o.record.agent for o in together if o.record] == [
        o.record.agent for o in alone if o.record
    ]
    assert all(name.startswith("agenteval-attempt") for name in ahead_executor.threads)
    assert [e.files for e in made] == [{"answer.txt": b"written"}] * 2


def built_in(spec: AnyAgentSpec, base: Path) -> Agent:
    made = make_builtin_agent(spec, base)
    assert made is not None
    return made


WRITES_AND_ANSWERS = "open('seen', 'w').write('x'); print(4)"
AGENT_SPECS: dict[str, Any] = {
    "callable": "agent.py:run",
    "command": {"command": ["{python}", "-c", WRITES_AND_ANSWERS], "stdin": "none"},
    "openai": {"openai": {"model": "m", "api_key_env": "AGENTEVAL_TEST_KEY", "backoff": 0.01}},
}


@pytest.mark.parametrize("kind", list(AGENT_SPECS))
def test_an_agent_call_pickles_and_its_copy_runs_the_agent(
    kind: str, tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent call crosses a process boundary as data: its pickled copy names the same agent
    (spec, folder, label), carries the Task and its environment, and the built-in executor
    builds and runs the agent from the copy in the attempt's files."""
    monkeypatch.setenv("AGENTEVAL_TEST_KEY", "sk-test")
    (tmp_path / "agent.py").write_text(
        "def run(task):\n    open(task.workspace / 'seen', 'w').write('x')\n    return '4'\n"
    )
    raw = AGENT_SPECS[kind]
    if kind == "openai":
        raw = {"openai": {**raw["openai"], "base_url": chat_server.base_url}}
    spec = Manifest.model_validate({"name": "ds", "agent": raw}).agent
    assert spec is not None
    ref = AgentRef.declared(spec, tmp_path)
    environment = LocalEnvironment.create(tmp_path / "work", None)
    task = Task(
        id="t",
        input="2+2? <<4>>",
        metadata={"m": 1},
        attempt=1,
        seed=7,
        workspace=lambda: environment.root,
        environment=lambda: environment,
    )
    call = AgentCall(aid("ds", "t", 1), ref, task, 30.0)
    copy = pickle.loads(pickle.dumps(call))
    assert (copy.key, copy.agent, copy.timeout) == (call.key, ref, 30.0)
    assert copy.label == spec_label(spec) and copy.agent.spec == spec
    shown = (copy.task.id, copy.task.input, copy.task.metadata, copy.task.attempt, copy.task.seed)
    assert shown == ("t", "2+2? <<4>>", {"m": 1}, 1, 7)
    assert copy.task.workspace == environment.root
    executor = SerialExecutor(AgentResolver(built_in))
    try:
        assert executor.call_agent(copy).output.strip() == "4"
    finally:
        executor.close()
    assert (environment.root / "seen").exists() == (kind != "openai")


def test_one_agent_is_built_per_spec_and_the_fixture_agent_stays_home(tmp_path: Path) -> None:
    """The resolver builds an agent once per spec (equal specs, and the unpickled copy of a
    reference, find the one built); the fixture's live agent resolves in its own process
    only: its reference pickles without it and then says so."""
    (tmp_path / "agent.py").write_text("def run(task):\n    return '4'\n")
    built: list[AnyAgentSpec] = []

    def counting(spec: AnyAgentSpec, base: Path) -> Agent:
        built.append(spec)
        return built_in(spec, base)

    resolver = AgentResolver(counting)
    first, second = (
        AgentRef.declared(CallableAgentSpec(callable="agent.py:run"), tmp_path) for _ in "12"
    )
    copy = pickle.loads(pickle.dumps(second))
    assert resolver.resolve(first) is resolver.resolve(second) is resolver.resolve(copy)
    assert len(built) == 1
    live = AgentRef.in_process(unused, "fixture:agenteval_agent")
    assert resolver.resolve(live) is unused
    with pytest.raises(AgentUnavailable, match="live object of the pytest process"):
        resolver.resolve(pickle.loads(pickle.dumps(live)))


EXAMPLE_SUITE = Path(__file__).parent.parent / "example_suite"

PICKLING_EXECUTOR = """
import pickle
from pathlib import Path

from pytest_agenteval.execution.executor import SerialExecutor


class PicklingExecutor:
    '''Runs a pickled copy of each call with the built-in executor (which builds the agent
    from the copy's reference) and notes its attempt.'''

    def __init__(self, agents):
        self.inner = SerialExecutor(agents)

    def call_agent(self, call):
        copy = pickle.loads(pickle.dumps(call))
        with Path("calls.log").open("a") as log:
            log.write(f"{copy.key} {copy.label}\\n")
        return self.inner.call_agent(copy)

    def kill_running(self):
        return self.inner.kill_running()

    def close(self):
        self.inner.close()


def pytest_agenteval_make_executor(config, isolate, concurrency, agents):
    return PicklingExecutor(agents)
"""


@pytest.mark.slow
def test_a_plugin_executor_gives_the_example_suite_the_same_summary(
    pytester: pytest.Pytester,
) -> None:
    """An executor a conftest returns from `pytest_agenteval_make_executor` runs every agent
    call from its pickled copy, and the example suite's summary counts and metrics equal the
    built-in executor's."""
    shutil.copytree(EXAMPLE_SUITE, pytester.path / "example_suite")
    pytester.runpytest_subprocess("--agenteval", "example_suite", "--agenteval-run-id", "builtin")
    builtin = summary_of(pytester, "builtin")
    pytester.makeconftest(PICKLING_EXECUTOR)
    pytester.runpytest_subprocess("--agenteval", "example_suite", "--agenteval-run-id", "plugin")
    plugin = summary_of(pytester, "plugin")
    assert plugin["counts"] == builtin["counts"]
    assert plugin["metrics"] == builtin["metrics"]
    calls = (pytester.path / "calls.log").read_text().splitlines()
    assert len(calls) == builtin["n_attempts"] - builtin["counts"].get("agent_error", 0) > 20
    assert all(line.endswith("demo_agent:solve") for line in calls)


REBINDING_EXECUTOR = PICKLING_EXECUTOR.replace(
    "        return self.inner.call_agent(copy)",
    "        if REBIND:\n            copy.task.rebind(call.task)\n        return self.inner.call_agent(copy)",
)


@pytest.mark.parametrize("rebind", [True, False], ids=["rebound", "left-behind"])
def test_a_call_pickles_under_a_spend_cap_and_its_copy_spends_only_rebound(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
    rebind: bool,
) -> None:
    """Under `--agenteval-max-cost` an agent call pickles (its Task without the model
    providers that hold the cap's locks); the copy's model calls are made, capped and counted
    only once an executor rebinds it to `call.task`, else the attempt is an error saying so
    and nothing is sent uncapped."""
    monkeypatch.setenv(KEY_ENV, KEY)
    price = {"input_per_mtok": 1.0, "output_per_mtok": 1.0}
    prices = {"test-model": price, "served-model-1": price}
    manifest = {"agent": openai_agent(chat_server), "pricing": prices}
    dataset({"t.yaml": {"input": "q <<ok>>", "expected": "ok"}}, manifest=manifest)
    pytester.makeconftest(f"REBIND = {rebind}\n" + REBINDING_EXECUTOR)
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-max-cost", "1")
    if rebind:
        result.assert_outcomes(passed=1)
        assert len(chat_server.requests) == 1
        assert summary_of(pytester)["totals"]["cost"] == pytest.approx(120 / 1e6)
    else:
        result.assert_outcomes(errors=1)
        assert chat_server.requests == []
        result.stdout.fnmatch_lines(["*its model providers stayed in the pytest process*"])
    assert "cannot pickle" not in result.stdout.str()


def test_a_plugin_executor_that_is_not_one_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """An object without the Executor methods returned by the hook stops the session with an
    error naming the plugin, before any attempt runs."""
    shutil.copytree(EXAMPLE_SUITE, pytester.path / "example_suite")
    pytester.makeconftest(
        "def pytest_agenteval_make_executor(config, isolate, concurrency):\n    return 42\n"
    )
    result = pytester.runpytest_subprocess("--agenteval", "example_suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*conftest *conftest.py: pytest_agenteval_make_executor returned int, not an Executor*"]
    )


def test_an_errors_traceback_is_shown_from_the_users_first_frame() -> None:
    """An agent's exception raised on a pool thread: its traceback starts in
    concurrent.futures (machinery), and what is rendered starts at the agent's own frame; a
    traceback with no frame of the user's is kept whole."""
    import concurrent.futures

    from pytest_agenteval.execution.attempt import from_users_frame

    def agent() -> None:
        raise RuntimeError("the model said no")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        error = pool.submit(agent).exception()
    assert error is not None and error.__traceback__ is not None
    assert "concurrent" in error.__traceback__.tb_frame.f_code.co_filename
    shown = from_users_frame(error.__traceback__)
    assert shown is not None and shown.tb_frame.f_code is agent.__code__
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        internal = pool.submit(int, "x").exception()  # raised in C: no frame of the user's
    assert internal is not None
    assert from_users_frame(internal.__traceback__) is internal.__traceback__
    assert from_users_frame(None) is None


def timed_task(tmp_path: Path, timeout: float) -> TaskDef:
    dataset = Dataset(tmp_path, Manifest(name="ds"), None)
    grader_spec = GraderSpec(type="equals")
    spec = TaskSpec(id="t", input="q", expected="4", graders=[grader_spec], timeout=timeout)
    grader = make_builtin_grader(grader_spec, spec, tmp_path)
    return TaskDef(
        spec, dataset, tmp_path / "t.yaml", 1, graders=(grader,), grader_specs=(grader_spec,)
    )


def test_an_abandoned_calls_late_answer_counts_only_what_its_trace_did_not(
    tmp_path: Path,
) -> None:
    """A sync agent past its timeout: its model call counted when it was traced, and its late
    answer (the same usage) adds nothing once the attempt has ended."""
    done = threading.Event()

    def slow(task: Task) -> AgentResult:
        task.trace.model_call(model="m", input_tokens=100, output_tokens=10, cost=1.0)
        time.sleep(0.4)
        done.set()
        return AgentResult(output="4", usage=Usage(input_tokens=100, output_tokens=10, cost=1.0))

    spent: list[tuple[float | None, int]] = []
    environments = Environments(Workspaces(tmp_path / "work"), lambda task, key: None)
    runner = AttemptRunner(
        SerialExecutor(AgentResolver(built_in)),
        environments,
        {"v": 1},
        spent=lambda cost, tokens, calls: spent.append((cost, tokens)),
    )
    ref = AgentRef.in_process(slow, "slow")
    outcome = runner.run(AttemptJob(timed_task(tmp_path, 0.1), 0, RUN), lambda: ref)
    assert outcome.record is not None and outcome.record.error_class == "timeout"
    assert done.wait(5)
    time.sleep(0.2)  # the late answer is counted right after the agent returns
    assert spent == [(1.0, 110)]


def test_a_call_that_blocked_the_loop_counts_its_late_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An async agent that blocks the event loop is given up on by its item (an error record,
    the attempt ended); when the loop gets it back, its answer's usage still counts, once."""
    from pytest_agenteval.execution import concurrent

    monkeypatch.setattr(concurrent, "LOOP_GRACE", 0.2)
    done = threading.Event()

    async def blocks(task: Task) -> AgentResult:
        time.sleep(0.6)  # the whole loop waits
        done.set()
        return AgentResult(output="4", usage=Usage(input_tokens=100, output_tokens=10, cost=1.0))

    spent: list[tuple[float | None, int]] = []
    executor = SerialExecutor(AgentResolver(built_in), concurrent=True)
    environments = Environments(Workspaces(tmp_path / "work"), lambda task, key: None)
    ahead: Ahead[Any, Any] = Ahead(2, lambda: None, executor.event_loop)
    runner = AttemptRunner(
        executor,
        environments,
        {"v": 1},
        spent=lambda cost, tokens, calls: spent.append((cost, tokens)),
        ahead=ahead,
        stopped=lambda: None,
    )
    ref = AgentRef.in_process(blocks, "blocks")
    job = AttemptJob(timed_task(tmp_path, 0.1), 0, RUN)
    assert runner.schedule(job, lambda: ref)
    outcome = runner.run(job, lambda: ref)
    assert outcome.record is not None and "blocks the event loop" in (outcome.record.error or "")
    assert done.wait(5)
    time.sleep(0.2)
    assert spent == [(1.0, 110)]
    ahead.close()
    executor.close()
