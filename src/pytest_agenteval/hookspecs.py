"""Hooks pytest-agenteval adds; implement them in a conftest.py or a plugin."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .core.identity import AttemptId
    from .core.model import AnyAgentSpec, GraderSpec, TaskSpec
    from .core.records import AttemptRecord
    from .execution.agents import AgentResolver
    from .reporting.summary import Summary


@pytest.hookspec(firstresult=True)
def pytest_agenteval_make_grader(spec: GraderSpec, task: TaskSpec, dataset_root: Path) -> Any:
    """Build the grader `spec.type` names, or return None to let others try.

    Return an object with a `name` and a `grade(ctx)` method (see `pytest_agenteval.Grader`);
    `grade` returns a Verdict, a bool, a score in [0, 1], or (bool or score, reason). Raise
    ValueError for bad `spec.options`: it is reported at the grader's line in the task file.
    The built-in graders answer last, so a plugin can replace them.
    """


@pytest.hookspec(firstresult=True)
def pytest_agenteval_make_agent(spec: AnyAgentSpec, dataset_root: Path) -> Any:
    """Build the agent `spec` declares, or return None to let others try.

    `spec` is a `PluginAgentSpec` (`type` and `options`) for a kind written as `{kind: {...}}`
    in a manifest or task, else a built-in spec. Return a callable taking the `Task` (sync or
    `async def`) that returns a str or an AgentResult; start nothing yet (a run that replays
    everything builds no agent). Raise `pytest_agenteval.AgentError` for bad options: it is
    reported once, at the spec's line, and the attempts of that agent do not run (nothing is
    recorded for them). The built-in kinds (`callable`, `command`) answer last.
    """


@pytest.hookspec(firstresult=True)
def pytest_agenteval_make_environment(
    task: TaskSpec, key: AttemptId, template: Path | None, dataset_root: Path, config: pytest.Config
) -> Any:
    """Make the environment one attempt's files live in and its programs run in, or return
    None to let others try.

    Called when the attempt `key` (dataset, task id, attempt, and its variant in a run with
    variants) first needs one: before its agent when the task has a workspace `template` (a
    folder to copy in), else when something asks.
    Return an object satisfying `pytest_agenteval.Environment` (`exec` returning an
    `ExecResult`, `read_file`, `write_file` taking bytes or a str, `changed_files`,
    `teardown`, ...). Command agents and the `command` grader run in it. The built-in local
    folder (under pytest's basetemp) answers last. An environment that cannot be had raises
    `pytest_agenteval.EnvironmentUnavailable` (`phase="build"` or `"start"`): an
    infrastructure error that a resume runs again, never the agent's.
    """


@pytest.hookspec
def pytest_agenteval_environment_kinds() -> Any:
    """Return the sandbox kinds this plugin or conftest.py provides: a
    `pytest_agenteval.EnvironmentKind`, or a list of them (or None).

    A task names one as `sandbox: {NAME: {options}, ...common options}`; its options are
    validated by the kind's `options` model when the task file loads (errors at their line).
    Called once per process at configure, so only a conftest.py at the rootdir (or a
    plugin) is asked; an installed package may instead name its kinds in the entry point
    group `pytest_agenteval.environment_kinds`. A kind named like an earlier one (even
    `docker`) replaces it. See docs/guides/sandbox-kinds.md.
    """


@pytest.hookspec(firstresult=True)
def pytest_agenteval_make_executor(
    config: pytest.Config, isolate: bool, concurrency: int, agents: AgentResolver
) -> Any:
    """Make the executor that runs this process's agent calls, or return None to let others
    try (as pytest-xdist's `pytest_xdist_make_scheduler`). Called once per process.

    `isolate` is `--agenteval-isolate`; `concurrency` is how many attempts this process keeps
    in flight (`--agenteval-concurrency`); `agents` builds (once per spec) the agent a call
    names: `agents.resolve(call.agent)`. Return an object satisfying
    `pytest_agenteval.Executor` (`call_agent(call)`, `kill_running()`, `close()`); each
    `AgentCall` names its attempt, agent (a serialisable `AgentRef`), agent-facing Task and
    deadline, and pickles (its Task without its model providers, which hold the run's caps:
    a copy answered in this process gets them back with `copy.task.rebind(call.task)`).
    Anything else is a usage error naming your plugin. The built-in
    executors (in-process, or a forked child per call with `isolate`) answer last.
    """


@pytest.hookspec(
    warn_on_impl_args={
        "record": DeprecationWarning(
            "pytest_agenteval_record_committed(record=...) is deprecated: the stored JSON as "
            "a dict goes away in the next release; read the typed `attempt_record` "
            "(a pytest_agenteval.AttemptRecord; `attempt_record.to_json()` is that dict)"
        )
    }
)
def pytest_agenteval_record_committed(
    attempt_record: AttemptRecord, record: dict[str, Any] | None, config: pytest.Config
) -> None:
    """An attempt record was committed to the run store (controller only).

    `attempt_record` is the frozen `pytest_agenteval.AttemptRecord`, read by attribute
    (`attempt_record.key`, `.status`, `.score`). `record` (deprecated, one release): its stored
    JSON as a dict, given only to implementations that name it."""


def pytest_agenteval_summary(summary: Summary, config: pytest.Config) -> None:
    """The run summary is ready (controller only, at session end).

    `summary` is the frozen `pytest_agenteval.Summary` that summary.json is
    written from: read its attributes (`summary.metrics.pass_at_k["1"]`, `summary.tasks`);
    setting one raises a pydantic `ValidationError`. A run of several variants has no pooled
    `summary.metrics` (None): read `summary.variants[NAME].metrics` and `summary.comparison`.
    `summary.model_dump(by_alias=True)` gives summary.json's content as a plain dict: what this
    hook received before (see the changelog)."""


@pytest.hookspec(firstresult=True)
def pytest_agenteval_make_tool(name: str, dataset_root: Path) -> Any:
    """Give the tool a `react` agent lists in `tools:` as `name`, or return None to let others
    try (the built-ins `bash`, `python`, `read_file`, `write_file`, `submit`, and
    `module:function` references, answer last).

    Return a `pytest_agenteval.Tool` (its `ToolSpec` and an `async run(task, arguments,
    timeout)` returning a `ToolOutput`), or a plain function (sync or `async def`): its
    docstring's first paragraph describes it to the model, its typed parameters are the
    arguments' JSON schema, and a parameter named `task` receives the attempt's Task (reach
    its files through `task.environment`). Called at the dataset's folder, when the agent is
    built; anything else is an error naming your plugin.
    """
