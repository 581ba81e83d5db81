"""Per-process state attempt items share: settings, datasets, the plan, the attempt runner."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..core.errors import AgentError
from ..core.model import AgentLimits, AnyAgentSpec, GraderSpec, TaskSpec
from ..execution.agents import AgentResolver, spec_label
from ..execution.attempt import AttemptJob, AttemptRunner
from ..execution.limits import LimitGate, Limits
from ..sources.dataset import Dataset, TaskDef
from ..sources.speccache import SpecCache
from ..store.plan import Plan
from ..store.stops import Stops
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
    fixture_folders: dict[Any, bool] = field(default_factory=dict)
    """Whether the `agenteval_agent` fixture is visible from a task file (by its node)."""
    _roots: list[tuple[str, Dataset]] = field(default_factory=list)
    _limits: dict[tuple[int, int], tuple[str, Limits]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Innermost roots first, as "root/" prefixes, so nested datasets match correctly.
        ordered = sorted(self.datasets, key=lambda d: len(d.root.parts), reverse=True)
        self._roots = [(str(d.root) + os.sep, d) for d in ordered]

    def join_run(self, stops: Stops) -> None:
        """Share the run's folder with its other processes: check `stops` before each attempt
        starts, and hold the agents' limits there."""
        self.stops = stops
        self.runner.stopped = stops.reason
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

    def grader_factory(self, dataset: Dataset) -> Callable[[GraderSpec, TaskSpec], Any]:
        def make(spec: GraderSpec, task: TaskSpec) -> Any:
            return self.make_grader(spec, task, dataset.root)

        return make

    def agent_spec(self, task: TaskDef) -> AnyAgentSpec | None:
        """Which declared agent runs `task`: --agenteval-agent, task `agent:`, manifest `agent:`."""
        return self.settings.agent_override or task.spec.agent or task.dataset.manifest.agent

    def declared_agent(self, task: TaskDef) -> tuple[Any, str]:
        """The agent the task's declared spec names (built once), and its label for records."""
        spec = self.agent_spec(task)
        if spec is None:
            raise AgentError(
                f"no agent for task {task.id!r}",
                detail="set `agent:` in agenteval.yaml, pass --agenteval-agent module:function, "
                f"or define an `{FIXTURE_NAME}` fixture in conftest.py",
            )
        override = spec is self.settings.agent_override
        base = self.settings.invocation_dir if override else task.dataset.root
        return self.agents.agent(spec, base), spec_label(spec)


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


RUNTIME = pytest.StashKey[Runtime]()
