"""Our observer hooks (`pytest_agenteval_record_committed`, `pytest_agenteval_summary`), each
implementation called alone: one that raises is reported with its plugin's name, and neither
the other implementations nor the run stop for it.

pluggy stops a hook call at the first implementation that raises and hands the error to the
caller: in the controller's report handling that ended the session (exit 3) after one attempt,
and at the session's end it left a finished run `interrupted`. An observer only watches, so
its error is its own: the run records every attempt and ends with its own status and exit.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Any

import pluggy
import pytest

from .pluginhooks import plugin_label

OBSERVERS_KEY = pytest.StashKey["Observers"]()
OURS = tuple(
    os.path.dirname(path) + os.sep for path in (os.path.dirname(__file__), pluggy.__file__)
)
"""Frames a plugin's traceback leaves out: this package's and pluggy's."""


@dataclass
class HookFailure:
    """An observer that raised: the first error in full, and how many times it raised."""

    hook: str
    who: str
    error: str
    trace: list[str]
    times: int = 1

    def lines(self) -> list[str]:
        times = f" ({self.times} times)" if self.times > 1 else ""
        head = (
            f"agenteval: {self.hook} of {self.who} raised {self.error}{times}; "
            "the run went on without it"
        )
        return [head, *self.trace]


class Observers:
    """Calls observer hooks implementation by implementation and keeps their errors for the
    terminal summary (controller only, where these hooks are called)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.failures: dict[tuple[str, str], HookFailure] = {}

    def notify(self, name: str, **kwargs: Any) -> None:
        """Call hook `name` with `kwargs`, each implementation alone (in pluggy's order,
        hook wrappers around each), so one that raises stops nothing else; `pytest.exit`
        still ends the session."""
        hook = getattr(self.config.hook, name)
        impls = [i for i in hook.get_hookimpls() if not (i.wrapper or i.hookwrapper)]
        if len(impls) <= 1:  # one call, as pluggy makes it (also with none: it is observed)
            self._call(name, hook, impls[0] if impls else None, kwargs)
            return
        for impl in reversed(impls):
            others = [i.plugin for i in impls if i is not impl]
            alone = self.config.pluginmanager.subset_hook_caller(name, others)
            self._call(name, alone, impl, kwargs)

    def _call(self, name: str, hook: Any, impl: Any, kwargs: dict[str, Any]) -> None:
        """One call of `hook`, whose only implementation (but for wrappers) is `impl`."""
        try:
            hook(**kwargs)
        except pytest.exit.Exception:
            raise
        except Exception as exc:
            who = plugin_label(impl.plugin, impl.plugin_name) if impl else "a hook wrapper"
            self._failed(name, who, exc)

    def _failed(self, hook: str, who: str, exc: Exception) -> None:
        known = self.failures.get((hook, who))
        if known is not None:
            known.times += 1
            return
        error = traceback.format_exception_only(exc)[-1].strip()
        self.failures[(hook, who)] = HookFailure(hook, who, error, _their_frames(exc))

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for failure in self.failures.values():
            for line in failure.lines():
                terminalreporter.write_line(line, yellow=True)


def _their_frames(exc: Exception) -> list[str]:
    """The error's traceback from the plugin's code on (this package's and pluggy's frames
    left out), indented under the report's first line."""
    stack = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(OURS)]
    text = "".join(traceback.StackSummary.from_list(stack).format()).rstrip("\n")
    return [f"  {line}" for line in text.splitlines()]


def observers(config: pytest.Config) -> Observers:
    """The session's observer caller, made and registered on first use."""
    found = config.stash.get(OBSERVERS_KEY, None)
    if found is None:
        found = config.stash[OBSERVERS_KEY] = Observers(config)
        config.pluginmanager.register(found, "agenteval-observers")
    return found
