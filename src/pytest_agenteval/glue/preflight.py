"""Mistakes found before the run: task files that did not load and agents that cannot be
built, printed once as collection finishes, before the probe and before any attempt.

Registered in the controller only (or the lone process), after the probe: among `tryfirst`
implementations it runs first, so a failed probe follows the mistakes that may explain it.
Their attempts still become `[load-error]` items and `agent build` errors; the others run.
Alone, the items collected are checked (each agent built as `agenteval validate` builds it;
the runtime keeps what it built). Under xdist the controller collects nothing: it checks
what the first worker's collection names, and builds agents only of datasets with no
conftest.py of their own (the controller does not load those, so a plugin's agent kind or
tool would look unknown there; the workers report such problems per item).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..core.errors import AgentUnavailable
from ..core.identity import AttemptId
from ..sources.dataset import TaskDef, load_task_file
from ..sources.taskfile import LoadFailure
from .collect import LoadErrorItem
from .concurrency import say_now
from .items import AttemptItem
from .probe import KeysOf
from .runtime import Runtime


class PreflightHooks:
    """Prints every load problem the session knows before anything runs."""

    def __init__(self, runtime: Runtime, keys_of: KeysOf) -> None:
        self.runtime = runtime
        self.keys_of = keys_of
        self.done = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.done or not session.items:
            return
        self.done = True
        problems: list[tuple[str, int]] = []
        built: set[tuple[int, bool, bool]] = set()
        runtime = self.runtime
        for item in session.items:
            if isinstance(item, LoadErrorItem):
                problems.append((item.failure.render(), len(item.failure.errors) or 1))
            elif isinstance(item, AttemptItem):
                spec = id(runtime.agent_spec(item.task, item.variant))
                key = (spec, runtime.runner.environments.on_host(item.task), item.uses_fixture())
                if key in built or runtime.decide(item.key, item.task).action != "run":
                    continue
                built.add(key)
                try:
                    item.check_agent()
                except AgentUnavailable as exc:
                    problems.append((exc.render(), 1))
        say_problems(session.config, problems)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """Under xdist: the first worker's collection is the session's selection."""
        if self.done:
            return
        self.done = True
        keys, broken = self.keys_of(list(ids))
        problems = [(f.render(), len(f.errors) or 1) for f in self._failures(broken)]
        problems += [(text, 1) for text in self._agent_problems(keys)]
        say_problems(node.config, problems)

    def _failures(self, broken: set[tuple[str, str]]) -> Iterator[LoadFailure]:
        """The load failures of the task files a worker reported as `[load-error]` items."""
        runtime = self.runtime
        if not broken:
            return
        for dataset in runtime.datasets:
            for path in dataset.task_files():
                if runtime.dataset_for(path) is not dataset:
                    continue
                for loaded in load_task_file(
                    path, dataset, runtime.grader_factory(dataset), runtime.specs
                ):
                    if isinstance(loaded, LoadFailure) and (dataset.name, loaded.label) in broken:
                        yield loaded

    def _agent_problems(self, keys: list[AttemptId]) -> Iterator[str]:
        runtime = self.runtime
        tasks = {(t.dataset.name, t.id): t for t in runtime.all_tasks()}
        mine = {d.name for d in runtime.datasets} - _with_own_conftest(tasks.values())
        built: set[int] = set()
        for key in keys:
            task = tasks.get((key.dataset, key.task_id))
            if task is None or key.dataset not in mine:
                continue
            spec = runtime.agent_spec(task, key.variant)
            if spec is None or id(spec) in built or runtime.decide(key, task).action != "run":
                continue  # no spec: the `agenteval_agent` fixture may supply it
            built.add(id(spec))
            try:
                runtime.declared_agent(task, key.variant)
            except AgentUnavailable as exc:
                yield exc.render()


def _with_own_conftest(tasks: Iterable[TaskDef]) -> set[str]:
    """The datasets with a conftest.py in their folder or a task file's folder (the task
    files as loaded already: walking a dataset again reads every task file)."""
    folders: dict[Path, str] = {}
    for task in tasks:
        folders.setdefault(task.dataset.root, task.dataset.name)
        folders.setdefault(task.path.parent, task.dataset.name)
    return {name for folder, name in folders.items() if (folder / "conftest.py").exists()}


def say_problems(config: pytest.Config, problems: list[tuple[str, int]]) -> None:
    """`agenteval: N problem(s) found before the run ...` and each as `validate` prints it."""
    problems = list(dict.fromkeys(problems))  # one spec may be built twice (host, sandbox)
    if not problems:
        return
    count = sum(n for _, n in problems)
    head = (
        f"agenteval: {count} problem(s) found before the run "
        "(their attempts will not run; the others do):"
    )
    say_now(config, "\n".join([head, *(text for text, _ in problems)]))
