"""`agenteval validate`: collect datasets as `pytest --co` would and build what attempts need.

Collection runs in-process with the project's conftest.py files and plugins, so plugin graders
(`pytest_agenteval_make_grader`) and plugin agent kinds are built by the same hooks as in a
real run. Each task's agent is built as its first attempt would build it: a module imported,
a command's program looked up; nothing is started, no run is created, no cache is written.
An `agenteval_agent` fixture is not set up (it may start things): such tasks are only counted.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ..core.errors import AgentUnavailable
from .collect import LoadErrorItem
from .items import AttemptItem

ARGS = ("--collect-only", "-p", "no:cacheprovider", "-p", "no:terminal", "-o", "addopts=")
"""Collect only, write no cache, print nothing of pytest's own, ignore the ini's addopts
(`-n`, `-x`, ...), which are about running."""


class Validation:
    """A plugin for one in-process collection that notes every problem it finds."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.count = 0
        """Problems found: a task's load error counts each of its problems."""
        self.agent_problems: Counter[str] = Counter()
        self.valid: set[tuple[str, str]] = set()
        """Tasks whose agent (one variant's at least) was built."""
        self.fixture_tasks = 0

    @property
    def tasks(self) -> int:
        return len(self.valid)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.problems.append(f"{report.nodeid or '.'}: {report.longreprtext.strip()}")
            self.count += 1

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            if isinstance(item, LoadErrorItem):
                self.problems.append(item.failure.render())
                self.count += len(item.failure.errors) or 1
            elif isinstance(item, AttemptItem) and item.attempt == 0:
                self._check(item)

    def _check(self, item: AttemptItem) -> None:
        try:
            item.check_agent()
        except AgentUnavailable as exc:
            self.agent_problems[exc.render()] += 1
            return
        task = (item.key.dataset, item.key.task_id)
        if task not in self.valid:  # each variant's agent is checked, each task counted once
            self.valid.add(task)
            self.fixture_tasks += item.uses_fixture()

    def report(self) -> list[str]:
        """What `validate` prints: each problem once, then the totals."""
        lines = list(self.problems)
        for message, tasks in self.agent_problems.items():
            lines.append(message + (f"\n(the agent of {tasks} tasks)" if tasks > 1 else ""))
        if self.fixture_tasks:
            lines.append(
                f"note: {self.fixture_tasks} task(s) use the `agenteval_agent` fixture; "
                "it is set up only when attempts run, so it was not checked"
            )
        return lines


def validate(roots: list[Path]) -> tuple[list[str], int, int]:
    """Collect the datasets at `roots`; returns what to print, the valid tasks and the
    number of problems."""
    validation = Validation()
    args = [*ARGS, *(arg for root in roots for arg in ("--agenteval", str(root)))]
    code = pytest.main(args, plugins=[validation])
    lines = validation.report()
    problems = validation.count + len(validation.agent_problems)
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED) and not problems:
        problems = 1  # pytest refused to start and printed why (a usage error)
    return lines, validation.tasks, problems
