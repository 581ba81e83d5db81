"""The private parts of pytest and xdist the plugin uses: each still exists with the shape used.

One test per internal (glue/internals.py), so a pytest or xdist release that breaks one fails
one named test; `CHECKED` there lists the releases they were checked against.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from pathlib import Path

import pytest

import pytest_agenteval
from pytest_agenteval.glue import internals


def params(function: Callable[..., object]) -> list[str]:
    return list(inspect.signature(function).parameters)


def check_failure_reprs(pytester: pytest.Pytester) -> None:
    crash = internals.ReprFileLocation("task.yaml", 3, "wrong answer")
    made = internals.ReprExceptionInfo(
        reprtraceback=internals.ReprTracebackNative(["line one\n"]), reprcrash=crash
    )
    assert isinstance(made, internals.ExceptionRepr)
    assert isinstance(made, internals.TerminalRepr)
    assert made.reprcrash is not None and made.reprcrash.message == "wrong answer"
    assert "line one" in str(made)
    assert isinstance(made.reprtraceback.reprentries[0], internals.ReprEntryNative)
    try:
        raise ValueError("x")
    except ValueError:
        chain = pytest.ExceptionInfo.from_current().getrepr(style="long", chain=True)
    assert isinstance(chain, internals.ExceptionChainRepr)
    first = chain.chain[0][0]
    first.reprentries = [internals.ReprEntryNative(["said first\n"]), *first.reprentries]
    assert str(chain).startswith("said first\n")


def check_conftest_paths(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("collect_ignore = ['skipped']")
    config = pytester.parseconfigure()
    found = internals.conftest_paths(config, "collect_ignore", pytester.path)
    assert found == [pytester.path / "skipped"]
    assert internals.conftest_paths(config, "collect_ignore_glob", pytester.path) is None


def check_fixtures(pytester: pytest.Pytester) -> None:
    from _pytest.fixtures import FixtureManager, TopRequest

    assert params(FixtureManager.getfixturedefs)[1:] == ["argname", "node"]
    assert params(FixtureManager.getfixtureinfo)[1:4] == ["node", "func", "cls"]
    assert "_ispytest" in params(TopRequest.__init__)
    assert params(TopRequest.getfixturevalue)[1:] == ["argname"]
    pytester.makeconftest(
        """
        import pytest
        from pytest_agenteval.glue.internals import fixture_defs, fixture_value

        @pytest.fixture(scope="session")
        def answer():
            yield 42
            print("TORN DOWN")

        class Asks(pytest.Item):
            def runtest(self):
                assert [d.argname for d in fixture_defs(self, "answer")] == ["answer"]
                assert fixture_value(self, "answer") == 42

        def pytest_collect_file(file_path, parent):
            if file_path.suffix == ".ask":
                return AskFile.from_parent(parent, path=file_path)

        class AskFile(pytest.File):
            def collect(self):
                yield Asks.from_parent(self, name="asks")
        """
    )
    pytester.makefile(".ask", one="")
    result = pytester.runpytest_inprocess("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*TORN DOWN*"])


def check_basetemp(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfigure("--basetemp", str(pytester.path / "base"))
    assert internals.basetemp(config) == pytester.path / "base"
    config = pytester.parseconfigure("-p", "no:tmpdir")
    assert internals.basetemp(config) is None


def check_skip_at_item(pytester: pytest.Pytester) -> None:
    skip = internals.skip_at_item("not started")
    assert isinstance(skip, pytest.skip.Exception)
    assert getattr(skip, "_use_item_location", None) is True


def check_worker_queue(pytester: pytest.Pytester) -> None:
    import execnet
    from xdist import remote

    init = inspect.getsource(remote.WorkerInteractor.__init__)
    assert "self.nextitem_index" in init
    execmodel = execnet.gateway_base.get_execmodel("thread")
    if hasattr(remote, "TestQueue"):  # xdist 3.7+
        assert "self.torun = TestQueue(" in init
        queue = remote.TestQueue(execmodel)
    else:  # xdist 3.6: execnet's standard queue
        assert "self.torun = self._make_queue()" in init
        assert "execmodel.queue.Queue()" in inspect.getsource(remote.WorkerInteractor._make_queue)
        queue = execmodel.queue.Queue()
    queue.put(3)
    with internals._queued(queue) as queued:
        assert list(queued) == [3]


def check_queued_reports(pytester: pytest.Pytester) -> None:
    from xdist.dsession import DSession

    assert "self.queue" in inspect.getsource(DSession.__init__)
    assert "node" in params(DSession.worker_testreport)
    assert "rep" in params(DSession.worker_testreport)


def check_uncaptured(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import sys
        from pytest_agenteval.glue.internals import uncaptured

        def pytest_runtest_call(item):
            with uncaptured(item.config):
                sys.stderr.write("SAID NOW\\n")
        """
    )
    pytester.makepyfile("def test_one(): pass")
    result = pytester.runpytest_subprocess()
    assert "SAID NOW" in result.stderr.str()
    assert internals.uncaptured(pytester.parseconfigure("-p", "no:capture")) is not None


def check_stop_distributing(pytester: pytest.Pytester) -> None:
    from xdist.dsession import DSession

    loop = inspect.getsource(DSession.pytest_runtestloop)
    assert "self.shouldstop = False" in loop
    assert "if self.shouldstop:" in loop


def check_drop_exit_banner(pytester: pytest.Pytester) -> None:
    from _pytest.terminal import TerminalReporter

    assert "self._keyboardinterrupt_memo" in inspect.getsource(TerminalReporter.__init__)
    assert "_keyboardinterrupt_memo" in inspect.getsource(TerminalReporter.pytest_unconfigure)
    pytester.makeconftest(
        """
        import pytest
        from pytest_agenteval.glue.internals import drop_exit_banner

        def pytest_collection_finish(session):
            pytest.exit("done here", returncode=0)

        @pytest.hookimpl(tryfirst=True)
        def pytest_unconfigure(config):
            drop_exit_banner(config)
        """
    )
    pytester.makepyfile("def test_one(): pass")
    result = pytester.runpytest_subprocess()
    assert result.ret == 0 and "done here" not in result.stdout.str()


CHECKS: dict[str, Callable[[pytest.Pytester], None]] = {
    "failure reprs (_pytest._code.code)": check_failure_reprs,
    "conftest_paths (Config._getconftest_pathlist)": check_conftest_paths,
    "fixture_defs and fixture_value (FixtureManager, TopRequest)": check_fixtures,
    "basetemp (Config._tmp_path_factory)": check_basetemp,
    "skip_at_item (Skipped._use_item_location)": check_skip_at_item,
    "worker_queue (xdist WorkerInteractor.torun)": check_worker_queue,
    "queued_reports (xdist DSession.queue)": check_queued_reports,
    "uncaptured (CaptureManager.global_and_fixture_disabled)": check_uncaptured,
    "stop_distributing (xdist DSession.shouldstop)": check_stop_distributing,
    "drop_exit_banner (TerminalReporter._keyboardinterrupt_memo)": check_drop_exit_banner,
}
COVERS = {
    check_failure_reprs: (
        "ExceptionChainRepr",
        "ExceptionRepr",
        "ReprEntryNative",
        "ReprExceptionInfo",
        "ReprFileLocation",
        "ReprTracebackNative",
        "TerminalRepr",
    ),
    check_conftest_paths: ("conftest_paths",),
    check_fixtures: ("fixture_defs", "fixture_value"),
    check_basetemp: ("basetemp",),
    check_skip_at_item: ("skip_at_item",),
    check_worker_queue: ("worker_queue",),
    check_queued_reports: ("queued_reports",),
    check_uncaptured: ("uncaptured",),
    check_stop_distributing: ("stop_distributing",),
    check_drop_exit_banner: ("drop_exit_banner",),
}


@pytest.mark.parametrize("check", CHECKS.values(), ids=list(CHECKS))
def test_private_internal_still_has_the_shape_used(
    check: Callable[[pytest.Pytester], None], pytester: pytest.Pytester
) -> None:
    """Each private pytest/xdist part the plugin uses still exists and behaves as it did in
    the releases `internals.CHECKED` names."""
    check(pytester)


def test_every_internal_has_its_check() -> None:
    """Nothing joins the internals module without a check here."""
    covered = {name for names in COVERS.values() for name in names}
    assert covered == set(internals.__all__) - {"CHECKED"}
    assert set(COVERS) == set(CHECKS.values())
    assert internals.CHECKED["pytest"] and internals.CHECKED["pytest-xdist"]


GLUE = Path(pytest_agenteval.__file__).parent
ALLOWED = {"os._exit"}


def private_uses(path: Path) -> list[str]:
    """`_pytest` imports and private attributes of objects other than `self` in a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            found += [f"import {n}" for n in names if n and n.startswith("_pytest")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            owner = node.value
            mine = isinstance(owner, ast.Name) and owner.id in ("self", "cls")
            text = ast.unparse(node)
            if not (mine or node.attr.startswith("__") or text in ALLOWED):
                found.append(text)
    return [f"{path.name}:{use}" for use in found]


def test_private_internals_stay_in_one_module() -> None:
    """The pytest glue reaches pytest's and xdist's private parts only through
    glue/internals.py (nor subclasses a class pytest marks final)."""
    modules = [*sorted((GLUE / "glue").glob("*.py")), GLUE / "plugin.py", GLUE / "hookspecs.py"]
    found = [use for path in modules if path.name != "internals.py" for use in private_uses(path)]
    assert found == []
    assert "pytest.Dir)" not in (GLUE / "glue" / "collect.py").read_text()
