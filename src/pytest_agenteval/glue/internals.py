"""The private parts of pytest and pytest-xdist the plugin relies on, each behind one function.

Everything else goes through their public API. Each use here has no public route (the
docstring says why); `CHECKED` names the releases they were checked against, and
tests/test_internals.py checks each one still exists with the shape used here, so a release
that breaks one fails one named test instead of a run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Failure representations: `ExceptionInfo.getrepr()` returns them and reports carry them
# across xdist, but pytest exports none of them; a failure with its own crash message (the
# short test summary's and JUnit's) and a first line of its own can only be built from them.
from _pytest._code.code import (
    ExceptionChainRepr,
    ExceptionRepr,
    ReprEntryNative,
    ReprExceptionInfo,
    ReprFileLocation,
    ReprTracebackNative,
    TerminalRepr,
)

__all__ = [
    "CHECKED",
    "ExceptionChainRepr",
    "ExceptionRepr",
    "ReprEntryNative",
    "ReprExceptionInfo",
    "ReprFileLocation",
    "ReprTracebackNative",
    "TerminalRepr",
    "basetemp",
    "conftest_paths",
    "drop_exit_banner",
    "fixture_defs",
    "fixture_value",
    "queued_reports",
    "skip_at_item",
    "stop_distributing",
    "uncaptured",
    "worker_queue",
]

CHECKED = {"pytest": ("9.0.0", "9.2.0"), "pytest-xdist": ("3.6.1", "3.8.0")}
"""The releases every internal below was checked against."""


def conftest_paths(config: pytest.Config, name: str, path: Path) -> list[Path] | None:
    """A conftest list such as `collect_ignore` as it applies at `path` (None: no conftest
    there sets it). pytest reads these only inside its own `pytest_ignore_collect`."""
    found: list[Path] | None = config._getconftest_pathlist(name, path=path)
    return found


def fixture_defs(item: pytest.Item, name: str) -> tuple[pytest.FixtureDef[Any], ...]:
    """The definitions of fixture `name` visible from `item`, innermost last. pytest offers
    fixtures only to test functions (`request`), not to the items of other plugins."""
    manager = item.session._fixturemanager
    return tuple(manager.getfixturedefs(name, item) or ())


def fixture_value(item: pytest.Item, name: str) -> Any:
    """Fixture `name` made for `item` (set up with it, torn down at its teardown), as for a
    test function; pytest's `FixtureRequest` cannot be made for another plugin's items.

    The most fragile internal here, kept because the public route costs more than it saves
    (checked against pytest 9.2): an attempt item that is a `pytest.Function` (callobj
    `def attempt(request)`) would get its request from pytest's own setup and reach the
    fixture by the public `request.getfixturevalue`, but (1) `Function.__init__` resolves the
    fixture closure of every item (`getfixtureinfo`, per attempt: tens of thousands), (2) its
    setup runs every autouse fixture of the conftests above a dataset for every attempt,
    replays included, which a user's Python-test fixtures never meant, and (3) knowing whether
    the fixture exists before any setup (to build declared agents up front, `fixture_defs`)
    and reading a session fixture's value ahead of its item's turn (`--agenteval-concurrency`)
    stay private either way. So the request is made here, only for the items that ask."""
    from _pytest.fixtures import TopRequest

    request = getattr(item, "_request", None)
    if request is None:
        info = item.session._fixturemanager.getfixtureinfo(node=item, func=None, cls=None)
        item.funcargs = {}  # type: ignore[attr-defined]  # what TopRequest fills
        item._fixtureinfo = info  # type: ignore[attr-defined]
        item.fixturenames = info.names_closure  # type: ignore[attr-defined]
        request = item._request = TopRequest(item, _ispytest=True)  # type: ignore[arg-type,attr-defined]
    return request.getfixturevalue(name)


def basetemp(config: pytest.Config) -> Path | None:
    """pytest's basetemp for this session (made on first use; its retention policy applies),
    or None with `-p no:tmpdir`. Only the `tmp_path_factory` fixture exposes it, and
    workspaces are made outside any fixture."""
    factory = getattr(config, "_tmp_path_factory", None)
    return factory.getbasetemp() if factory is not None else None


def skip_at_item(reason: str) -> BaseException:
    """A skip reported at the item's own location (its task's line), not at the plugin's line
    that raised it; `pytest.skip()` has no public way to say so."""
    return pytest.skip.Exception(reason, _use_item_location=True)


def uncaptured(config: pytest.Config) -> contextlib.AbstractContextManager[object]:
    """Output goes to the terminal now, also while an item's output is being captured. The
    public route (`capsys.disabled()`) is a fixture's; this is the capture plugin's own."""
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        return contextlib.nullcontext()
    disabled: contextlib.AbstractContextManager[object] = capman.global_and_fixture_disabled()
    return disabled


def drop_exit_banner(config: pytest.Config) -> None:
    """Forget the `pytest.exit()` that ended the session, so the terminal reporter does not
    print its `!!! _pytest.outcomes.Exit: ... !!!` banner at unconfigure (for an exit that is
    a success, said in a plain line already). `pytest.exit` is the one public way to end a
    session before anything is scheduled, under xdist too, and it always notes that banner.
    An exit with status 2 (INTERRUPTED) prints it at session finish, not at unconfigure:
    the reporter's printing of it is made a no-op too."""
    terminal = config.pluginmanager.getplugin("terminalreporter")
    if terminal is not None:
        terminal._keyboardinterrupt_memo = None
        terminal._report_keyboardinterrupt = lambda: None


def stop_distributing(config: pytest.Config, reason: str) -> None:
    """Make xdist's controller stop handing out items (its loop checks its own flag, not the
    session's `shouldstop`); nothing when xdist does not distribute."""
    dsession = config.pluginmanager.getplugin("dsession")
    if dsession is not None:
        dsession.shouldstop = reason


def worker_queue(config: pytest.Config) -> Callable[[], list[int]] | None:
    """On an xdist worker, a function giving the indices of the items the controller sent it
    that follow the one running, in order (None elsewhere). xdist says nothing about them:
    they are its WorkerInteractor's (registered without a name) `nextitem_index` and
    `torun` queue (xdist 3.7+: a `TestQueue`; 3.6: a standard `queue.Queue`)."""
    if not hasattr(config, "workerinput"):
        return None
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor" and hasattr(plugin, "torun"):
            interactor = plugin
            break
    else:
        return None

    def following() -> list[int]:
        with _queued(interactor.torun) as queued:
            indices = [i for i in queued if isinstance(i, int)]
        upcoming = interactor.nextitem_index
        return [upcoming, *indices] if isinstance(upcoming, int) else indices

    return following


@contextlib.contextmanager
def _queued(torun: Any) -> Iterator[Iterable[Any]]:
    """The items of a worker's `torun` queue, held still while they are read."""
    if hasattr(torun, "lock"):  # xdist 3.7+
        with torun.lock() as queued:
            yield queued
    else:  # xdist 3.6: execnet's queue.Queue
        with torun.mutex:
            yield torun.queue


def queued_reports(config: pytest.Config) -> list[tuple[pytest.TestReport, Any]]:
    """Take the test reports xdist's controller received but had not handed to pytest yet,
    with the worker each came from: on Ctrl-C xdist drops its queue of events (`DSession.
    queue`, not public), and with them finished attempts."""
    import queue

    dsession = config.pluginmanager.getplugin("dsession")
    found: list[tuple[pytest.TestReport, Any]] = []
    while dsession is not None:
        try:
            event, kwargs = dsession.queue.get_nowait()
        except queue.Empty:
            break
        if event == "testreport":
            found.append((kwargs["rep"], kwargs["node"]))
    return found
