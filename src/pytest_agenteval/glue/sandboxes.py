"""What a session knows and says of its sandboxes: the kinds registered (Docker's and the
plugins'), the orphans its processes' sweeps removed (a line each at the end, an xdist
worker's through its workeroutput), and the sweep of a dead worker's sandboxes when the
session ends."""

from __future__ import annotations

from typing import Any

import pytest

from ..core.kinds import EnvironmentKind
from ..execution.kinds import KindError, installed_kinds, registry
from .runtime import Runtime

SWEPT = "agenteval_swept"
"""workeroutput key: what a worker's orphan sweeps removed, a line each."""


class SandboxNotes:
    """In every process: a worker hands its sweeps' lines to the controller; the controller
    (or the lone process) removes a dead worker's sandboxes at the end and says every line."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.lines: list[str] = []
        """What the workers' sweeps removed."""
        self.worker_died = False

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker is done (or dead, with `error`): keep what its sweeps said."""
        self.lines += getattr(node, "workeroutput", {}).get(SWEPT, [])
        self.worker_died = self.worker_died or error is not None

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        environments = self.runtime.runner.environments
        config = session.config
        if hasattr(config, "workerinput"):
            said = environments.said()
            if said:
                config.workeroutput[SWEPT] = said  # type: ignore[attr-defined]
            return
        if not self.worker_died:
            return
        kinds = {t.sandbox.kind for t in self.runtime.all_tasks() if t.sandbox is not None}
        if kinds:
            environments.sweep(sorted(kinds))  # a killed worker left its sandboxes running

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for line in [*self.lines, *self.runtime.runner.environments.said()]:
            terminalreporter.write_line(f"agenteval: {line}", yellow=True)


def environment_kinds(config: pytest.Config) -> dict[str, EnvironmentKind]:
    """The sandbox kinds this run knows: Docker, the entry points', then each plugin's and
    conftest's `pytest_agenteval_environment_kinds` (a kind that is not one is a usage error
    naming who gave it)."""
    hook = config.hook.pytest_agenteval_environment_kinds
    try:
        answers = installed_kinds()
        answers += [
            (f"pytest_agenteval_environment_kinds of {impl.plugin_name}", impl.function())
            for impl in hook.get_hookimpls()
        ]
        return registry(answers)
    except KindError as exc:
        raise pytest.UsageError(exc.render()) from None
