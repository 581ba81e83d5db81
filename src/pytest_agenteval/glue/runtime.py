"""Per-process state attempt items share: settings, datasets, the plan, the attempt runner."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..core.errors import AgentUnavailable, TaskFileError, display_path
from ..core.model import AgentLimits, AnyAgentSpec, GraderSpec, Key, TaskSpec
from ..core.records import AttemptRecord
from ..core.shards import Shard
from ..execution.agents import AgentResolver, spec_label
from ..execution.attempt import AttemptJob, AttemptRunner
from ..execution.executor import Executor
from ..execution.limits import LimitGate, Limits
from ..sources.dataset import Dataset, TaskDef, load_task_file
from ..sources.speccache import CachedTask, SpecCache
from ..sources.yamlfile import field_path, line_of, parse
from ..store.plan import Plan
from ..store.stops import Budget, Stops
from .settings import Settings

FIXTURE_NAME = "agenteval_agent"


@dataclass
class Runtime:
    """Shared by every item of one process (controller, lone process, or xdist worker)."""

    settings: Settings
    datasets: list[Dataset]
    make_grader: Callable[[GraderSpec, TaskSpec, Path], Any]
    runner: AttemptRunner
    agents: AgentResolver
    agenteval_dir: Path | None
    """<cache_dir>/agenteval, or None without the cache provider."""
    specs: SpecCache
    plan: Plan = field(default_factory=Plan)
    stops: Stops | None = None
    """The run's stops (cancel, caps, deadline), once the run is known."""
    shard: Shard | None = None
    """The shard this process collects (the settings', or what the controller shipped)."""
    alone: set[Key] = field(default_factory=set)
    """Attempts whose agent call was in flight when a worker of the run died: each runs with
    no other call in flight, so a crash is provably its own (shipped to xdist workers)."""
    last_made: tuple[str, AttemptRecord, dict[str, Any], dict[str, Any]] | None = None
    """The JSON text the report of this process's last new record carries, the record, its
    JSON and its index entry: a lone process's recorder commits it without parsing again."""
    fixture_folders: dict[Any, bool] = field(default_factory=dict)
    """Whether the `agenteval_agent` fixture is visible from a task file (by its node)."""
    _roots: list[tuple[str, Dataset]] = field(default_factory=list)
    _declared: dict[int, tuple[Any, str]] = field(default_factory=dict)
    """Declared agents built, and their labels, by spec (specs live as long as the run)."""
    _unavailable: dict[Any, AgentUnavailable] = field(default_factory=dict)
    """Declared agents that cannot be built (by spec), located at their spec."""
    _limits: dict[tuple[int, int], tuple[str, Limits]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Innermost roots first, as "root/" prefixes, so nested datasets match correctly.
        ordered = sorted(self.datasets, key=lambda d: len(d.root.parts), reverse=True)
        self._roots = [(str(d.root) + os.sep, d) for d in ordered]
        self.shard = self.shard or self.settings.shard

    def join_run(self, stops: Stops) -> None:
        """Share the run's folder with its other processes: check `stops` before each attempt
        starts, and hold the agents' limits there."""
        self.stops = stops
        self.runner.stopped = stops.reason
        stops.cap(Budget(self.settings.max_cost, self.settings.max_tokens))
        if stops.budget is not None:
            self.runner.spent = stops.spent
        if stops.run_dir is not None:
            gate = LimitGate(stops.run_dir / "limits")

            def held(job: AttemptJob) -> AbstractContextManager[None] | None:
                agent, limits = self.limits_for(job.task)
                return gate.hold(agent, limits) if limits else None

            self.runner.limits = held

    def limits_for(self, task: TaskDef) -> tuple[str, Limits]:
        """The task's agent (its label) and its limits: the command line's, else those of the
        task's own agent, else the manifest's (worked out once per agent spec)."""
        spec = self.agent_spec(task)
        manifest = task.dataset.manifest
        cache_key = (id(spec), id(manifest))  # both live as long as the run
        found = self._limits.get(cache_key)
        if found is None:
            declared = (spec.limits if spec else None) or manifest.limits or AgentLimits()
            settings = self.settings
            interval = settings.min_interval
            found = self._limits[cache_key] = (
                spec_label(spec) if spec else FIXTURE_NAME,
                Limits(
                    settings.max_in_flight or declared.max_in_flight,
                    interval if interval is not None else declared.min_interval,
                ),
            )
        return found

    def dataset_for(self, path: Path) -> Dataset | None:
        """The dataset whose root contains `path` (the innermost one); called for every file."""
        text = str(path)
        for prefix, dataset in self._roots:
            if text.startswith(prefix) or text == prefix[:-1]:
                return dataset
        return None

    def attempts_for(self, dataset: Dataset) -> int:
        """`--attempts`, else ini `agenteval_attempts`, else the manifest default, else 1."""
        return self.settings.attempts or dataset.manifest.defaults.attempts or 1

    def all_tasks(self) -> Iterator[TaskDef]:
        """Every task the manifests define (their `tasks:` globs) that loads, graders included,
        whatever this session selects: a task with a bad grader is not one a run must cover."""
        for dataset, path in self._task_files():
            make_grader = self.grader_factory(dataset)
            for loaded in load_task_file(path, dataset, make_grader, self.specs):
                if isinstance(loaded, TaskDef):
                    yield loaded

    def _task_files(self) -> Iterator[tuple[Dataset, Path]]:
        for dataset in self.datasets:
            for path in dataset.task_files():
                if self.dataset_for(path) is dataset:  # not a nested dataset's file
                    yield dataset, path

    def _task_ids(self, built: bool) -> Iterator[tuple[Dataset, str]]:
        if built:
            for task in self.all_tasks():
                yield task.dataset, task.id
            return
        for dataset, path in self._task_files():
            for read in dataset.read(path, self.specs).tasks:
                if isinstance(read, CachedTask) and read.spec.id is not None:  # set as read
                    yield dataset, read.spec.id

    def whole_keys(self, *, built: bool = True) -> set[Key]:
        """Every attempt a session must select to be a run of its datasets whole (of its
        shard's part of them, when sharded). `built=False`: of every task whose spec is valid,
        without building its graders: cheap, and a superset (graders only take tasks away)."""
        shard = self.shard
        return {
            (dataset.name, task_id, attempt)
            for dataset, task_id in self._task_ids(built)
            if shard is None or shard.holds(dataset.name, task_id)
            for attempt in range(self.attempts_for(dataset))
        }

    def grader_factory(self, dataset: Dataset) -> Callable[[GraderSpec, TaskSpec], Any]:
        def make(spec: GraderSpec, task: TaskSpec) -> Any:
            return self.make_grader(spec, task, dataset.root)

        return make

    def agent_spec(self, task: TaskDef) -> AnyAgentSpec | None:
        """Which declared agent runs `task`: --agenteval-agent, task `agent:`, manifest `agent:`."""
        return self.settings.agent_override or task.spec.agent or task.dataset.manifest.agent

    def declared_agent(self, task: TaskDef) -> tuple[Any, str]:
        """The agent the task's declared spec names (built once), and its label for records.

        Raises AgentUnavailable, located at the spec's line, when there is no agent or it
        cannot be built; the located problem is made once per spec.
        """
        spec = self.agent_spec(task)
        made = self._declared.get(id(spec))
        if made is not None:
            return made
        key = id(spec) if spec is not None else task.dataset.name
        problem = self._unavailable.get(key)
        if problem is None:
            try:
                if spec is None:
                    raise AgentUnavailable("no agent for the tasks of this dataset", hint=NO_AGENT)
                override = spec is self.settings.agent_override
                base = self.settings.invocation_dir if override else task.dataset.root
                made = self._declared[id(spec)] = (self.agents.agent(spec, base), spec_label(spec))
                return made
            except AgentUnavailable as exc:
                problem = self._unavailable[key] = exc.located(self._spec_location(spec, task))
        raise problem.with_traceback(None)

    def _spec_location(self, spec: AnyAgentSpec | None, task: TaskDef) -> str:
        """Where `spec` is written: `path:line: at field`, or the option that gave it."""
        if spec is not None and spec is self.settings.agent_override:
            return self.settings.agent_override_source
        if spec is not None and spec is task.spec.agent:
            return yaml_location(task.path, (*task.loc, "agent"))
        manifest = task.dataset.manifest_path
        return yaml_location(manifest, ("agent",)) if manifest else display_path(task.dataset.root)


NO_AGENT = (
    "set `agent:` in agenteval.yaml, pass --agenteval-agent module:function, "
    f"or define an `{FIXTURE_NAME}` fixture in conftest.py"
)


def yaml_location(path: Path, loc: tuple[Any, ...]) -> str:
    """`path:line: at field` for the value at `loc` of a YAML file (only read on errors)."""
    try:
        node, _ = parse(path)
    except TaskFileError:
        node = None
    line = line_of(node, loc)
    return f"{display_path(path)}{f':{line}' if line else ''}: at {field_path(loc)}"


def agent_fingerprint(settings: Settings, datasets: list[Dataset]) -> dict[str, Any]:
    """What identifies the agent of a run: the override, each manifest's agent, the version."""
    manifest = {}
    for ds in datasets:
        spec = ds.manifest.agent
        label = spec_label(spec) if spec else None
        manifest[ds.name] = (
            f"{label} (version {ds.manifest.agent_version})" if ds.manifest.agent_version else label
        )
    override = settings.agent_override
    return {
        "override": spec_label(override) if override else None,
        "manifest": manifest,
        "version": settings.agent_version,
    }


def make_executor(config: pytest.Config, isolate: bool, concurrency: int) -> Executor:
    """The executor `pytest_agenteval_make_executor` gives, checked. The hook is called plugin
    by plugin, as pluggy would (first result wins), so a bad one is named by its plugin."""
    hook = config.hook.pytest_agenteval_make_executor
    given = {"config": config, "isolate": isolate, "concurrency": concurrency}
    for impl in reversed(hook.get_hookimpls()):
        if impl.hookwrapper or impl.wrapper:
            continue
        made = impl.function(*(given[name] for name in impl.argnames))
        if made is None:
            continue
        if not isinstance(made, Executor):
            raise pytest.UsageError(
                f"plugin {impl.plugin_name!r}: pytest_agenteval_make_executor returned "
                f"{type(made).__name__}, not an Executor; return an object with "
                "call_agent(call), kill_running() and close() (pytest_agenteval.Executor), "
                "or None"
            )
        return made
    raise AssertionError("the built-in pytest_agenteval_make_executor always answers")


RUNTIME = pytest.StashKey[Runtime]()
