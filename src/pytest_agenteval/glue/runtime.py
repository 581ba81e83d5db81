"""Per-process state that attempt items share: settings, the plan, agents and workspaces."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..core.errors import AgentError
from ..core.model import CallableAgentSpec, CommandAgentSpec, GraderSpec, TaskSpec
from ..execution import agents
from ..execution.workspaces import Workspaces
from ..sources.dataset import Dataset, TaskDef
from ..sources.speccache import SpecCache
from ..store.plan import Plan

FIXTURE_NAME = "agenteval_agent"
AgentSpecT = CallableAgentSpec | CommandAgentSpec


@dataclass
class Settings:
    """What the command line and ini say; the same in every process."""

    dataset_paths: list[Path]
    attempts: int | None
    agent_override: AgentSpecT | None
    agent_version: str | None
    strict: bool
    resume: bool
    rerun_errors: bool
    rerun_all: bool
    allow_drift: bool
    run_id: str | None
    report_dir: Path | None
    pass_k: list[int] | None
    task_rule: str
    min_pass_rate: float | None
    allow_errors: bool
    show_plan: bool
    invocation_dir: Path


@dataclass
class Runtime:
    """Shared by every item of one process (controller, lone process, or xdist worker)."""

    settings: Settings
    datasets: list[Dataset]
    make_grader: Callable[[GraderSpec, TaskSpec, Path], Any]
    workspaces: Workspaces
    agenteval_dir: Path | None
    """<cache_dir>/agenteval, or None without the cache provider."""
    specs: SpecCache
    plan: Plan = field(default_factory=Plan)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    seen_ids: dict[tuple[str, str], Path] = field(default_factory=dict)
    registered_tags: set[str] = field(default_factory=set)
    whole_roots: set[Path] = field(default_factory=set)
    """Dataset roots collected in one pass (no argument names anything below them)."""
    _agents: dict[int, tuple[Any, str, AgentSpecT]] = field(default_factory=dict)
    _has_fixture: dict[pytest.Collector, bool] = field(default_factory=dict)
    _roots: list[tuple[str, Dataset]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Innermost roots first, as "root/" prefixes, so nested datasets match correctly.
        ordered = sorted(self.datasets, key=lambda d: len(d.root.parts), reverse=True)
        self._roots = [(str(d.root) + os.sep, d) for d in ordered]

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

    def grader_factory(self, dataset: Dataset) -> Callable[[GraderSpec, TaskSpec], Any]:
        def make(spec: GraderSpec, task: TaskSpec) -> Any:
            return self.make_grader(spec, task, dataset.root)

        return make

    def agent_spec(self, task: TaskDef) -> AgentSpecT | None:
        """Which declared agent runs `task`: --agenteval-agent, task `agent:`, manifest `agent:`."""
        return self.settings.agent_override or task.spec.agent or task.dataset.manifest.agent

    def uses_fixture(self, item: pytest.Item, task: TaskDef) -> bool:
        """Whether the `agenteval_agent` fixture supplies this task's agent."""
        if self.settings.agent_override is not None or task.spec.agent is not None:
            return False
        folder = item.parent
        assert folder is not None
        found = self._has_fixture.get(folder)
        if found is None:
            fm = item.session._fixturemanager
            found = self._has_fixture[folder] = bool(fm.getfixturedefs(FIXTURE_NAME, item))
        return found

    def agent_for(self, task: TaskDef) -> tuple[Any, str]:
        """The (cached) agent the task's declared spec names, and its label for records."""
        spec = self.agent_spec(task)
        if spec is None:
            raise AgentError(
                f"no agent for task {task.id!r}",
                detail="set `agent:` in agenteval.yaml, pass --agenteval-agent module:function, "
                f"or define an `{FIXTURE_NAME}` fixture in conftest.py",
            )
        override = spec is self.settings.agent_override
        base = self.settings.invocation_dir if override else task.dataset.root
        found = self._agents.get(id(spec))  # specs live as long as the run: ids are stable
        if found is None:
            found = self._agents[id(spec)] = (agents.make_agent(spec, base), spec_label(spec), spec)
        return found[0], found[1]


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


def spec_label(spec: AgentSpecT) -> str:
    if isinstance(spec, CommandAgentSpec):
        return "command:" + " ".join(spec.command)
    return f"callable:{spec.callable}"


RUNTIME = pytest.StashKey[Runtime]()
