"""Our hooks as pytest's per-path hooks: a conftest applies below its folder, and a bad answer
names the conftest or plugin that gave it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from helpers import WORKERS, DatasetMaker, latest_record, latest_run, summary_of, task

GRADER = """
class Mine:
    def grade(self, ctx):
        return {verdict}, "graded by {where}"

def pytest_agenteval_make_grader(spec, task, dataset_root):
    if spec.type == "mine":
        return Mine()
"""


def write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))


@pytest.mark.parametrize("workers", WORKERS)
def test_a_conftest_grader_applies_only_to_datasets_below_it(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """Two datasets each with a conftest grader of the same name get their own; a third without
    one gets neither, while a conftest above them all supplies every dataset."""
    graded = {**task("x"), "graders": [{"mine": {}}, {"shared": {}}]}
    for folder in ("a", "b", "c"):
        dataset({"t.yaml": graded}, name=folder, folder=folder)
    write(pytester.path / "a/conftest.py", GRADER.format(verdict=True, where="a"))
    write(pytester.path / "b/conftest.py", GRADER.format(verdict=False, where="b"))
    pytester.makeconftest(
        """
        class Shared:
            def grade(self, ctx):
                return True

        def pytest_agenteval_make_grader(spec, task, dataset_root):
            if spec.type == "shared":
                return Shared()
        """
    )
    args = ["--agenteval", "a", "--agenteval", "b", "--agenteval", "c", *workers]
    result = pytester.runpytest_subprocess(*args) if workers else pytester.runpytest(*args)
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*[[]FAIL[]] mine: graded by b*"])
    result.stdout.fnmatch_lines(["c/t.yaml:1: at graders[[]0[]]: unknown grader 'mine'*"])


def test_a_grader_without_grade_names_its_conftest(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A plugin grader with no `grade` method errors its task at the grader's line, naming the
    conftest that returned it; the other tasks still run."""
    dataset({"bad.yaml": {**task("ok"), "graders": [{"mine": {}}]}, "good.yaml": task("ok")})
    write(
        pytester.path / "ds/conftest.py",
        """
        def pytest_agenteval_make_grader(spec, task, dataset_root):
            if spec.type == "mine":
                return "not a grader"
        """,
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "ds/bad.yaml:1: at graders[[]0[]]: pytest_agenteval_make_grader returned str for "
            "'mine', which has no grade(ctx) method (answered by conftest ds/conftest.py)"
        ]
    )


def test_an_agent_that_is_not_callable_names_its_plugin(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A plugin agent that is not callable: its attempts do not run, and the error names the
    plugin (here registered by name) that returned it."""
    dataset({"a.yaml": task("ok")}, manifest={"agent": {"echo": {}}})
    pytester.makeconftest(
        """
        class EchoPlugin:
            def pytest_agenteval_make_agent(self, spec, dataset_root):
                if getattr(spec, "type", None) == "echo":
                    return 42

        def pytest_configure(config):
            config.pluginmanager.register(EchoPlugin(), "echo-agents")
        """
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*pytest_agenteval_make_agent returned int, which is not callable "
            "(answered by plugin 'echo-agents')*"
        ]
    )


def test_an_environment_that_is_not_one_names_its_conftest(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A plugin environment that is not an Environment errors the attempt, naming the conftest
    that made it."""
    (pytester.path / "ds/ws").mkdir(parents=True)
    dataset({"a.yaml": {**task("ok"), "workspace": "ws"}})
    write(
        pytester.path / "ds/conftest.py",
        """
        def pytest_agenteval_make_environment(task, key, template, dataset_root, config):
            return "a folder"
        """,
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*pytest_agenteval_make_environment returned str, not an Environment "
            "(answered by conftest ds/conftest.py)*"
        ]
    )


def test_debug_traces_our_hooks(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """pluggy calls our factory hooks, so `pytest --debug` traces them like pytest's own."""
    (pytester.path / "ds/ws").mkdir(parents=True)
    dataset({"a.yaml": {**task("ok"), "workspace": "ws"}})
    pytester.runpytest("--agenteval", "ds", "--debug").assert_outcomes(passed=1)
    log = (pytester.path / "pytestdebug.log").read_text()
    for hook in ("executor", "environment", "agent", "grader"):
        assert f"pytest_agenteval_make_{hook} [hook]" in log, hook


WRAPPER = """
import pathlib
import pytest

LOG = pathlib.Path(__file__).with_name("wrapped.log")


class Never:
    name = "never"

    def grade(self, ctx):
        return False, "changed by the wrapper"


class Counting:
    def __init__(self, inner):
        self.inner = inner

    def call_agent(self, call):
        with LOG.open("a") as log:
            log.write("call\\n")
        return self.inner.call_agent(call)

    def kill_running(self):
        self.inner.kill_running()

    def close(self):
        self.inner.close()


@pytest.hookimpl(wrapper=True)
def pytest_agenteval_make_{hook}({args}):
    made = yield
    with LOG.open("a") as log:
        log.write("{hook}\\n")
    return {answer}
"""
FACTORIES = {
    "grader": ("spec, task, dataset_root", "Never() if spec.type == 'equals' else made"),
    "agent": ("spec, dataset_root", "lambda task: 'changed'"),
    "environment": ("task, key, template, dataset_root, config", "'a folder'"),
    "executor": ("config, isolate, concurrency, agents", "Counting(made)"),
}
CHANGED = {
    "grader": ({"failed": 1}, "*[[]FAIL[]] equals: changed by the wrapper*"),
    "agent": ({"failed": 1}, "*expected 'ok', got 'changed'*"),
    "environment": (
        {"errors": 1},
        "*returned str, not an Environment (answered by a hook wrapper (conftest conftest.py))*",
    ),
    "executor": ({"passed": 1}, None),
}


@pytest.mark.parametrize("changes", [False, True], ids=["passes-through", "changes-it"])
@pytest.mark.parametrize("hook", list(FACTORIES))
def test_a_wrapper_implementation_wraps_every_factory_hook(
    pytester: pytest.Pytester, dataset: DatasetMaker, hook: str, changes: bool
) -> None:
    """A `wrapper=True` implementation of each factory hook gets the answer the others gave:
    returned as it is, the run is the same; changed, the change is what the run uses (a bad
    one is blamed on the wrapper)."""
    (pytester.path / "ds/ws").mkdir(parents=True)
    dataset({"a.yaml": {**task("ok"), "workspace": "ws"}})
    args, answer = FACTORIES[hook]
    pytester.makeconftest(
        WRAPPER.format(hook=hook, args=args, answer=answer if changes else "made")
    )
    result = pytester.runpytest("--agenteval", "ds")
    outcomes, line = CHANGED[hook] if changes else ({"passed": 1}, None)
    result.assert_outcomes(**outcomes)
    if line:
        result.stdout.fnmatch_lines([line])
    wrapped = (pytester.path / "wrapped.log").read_text().splitlines()
    assert hook in wrapped
    assert ("call" in wrapped) == (changes and hook == "executor")


def test_every_type_a_hookspec_names_is_public() -> None:
    """Each type our hookspecs' parameters name (beyond pytest's, pathlib's and typing's) is
    importable from `pytest_agenteval` (in `__all__`), the very object the hookspec means."""
    import ast
    import importlib
    import inspect

    import pytest_agenteval
    from pytest_agenteval import hookspecs

    tree = ast.parse(inspect.getsource(hookspecs))
    imported = {
        alias.asname or alias.name: f"pytest_agenteval.{node.module}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        for alias in node.names
    }
    named = set()
    for function in vars(hookspecs).values():
        if inspect.isfunction(function) and function.__name__.startswith("pytest_agenteval_"):
            for annotation in function.__annotations__.values():
                expression = ast.parse(str(annotation), mode="eval")
                named |= {n.id for n in ast.walk(expression) if isinstance(n, ast.Name)}
    elsewhere = {"pytest", "Path", "Any", "dict", "str", "None", "bool", "int"}
    assert named - elsewhere, "the hookspecs name types of ours"
    for name in sorted(named - elsewhere):
        assert name in pytest_agenteval.__all__, name
        meant = getattr(importlib.import_module(imported[name]), name)
        assert getattr(pytest_agenteval, name) is meant, name


@pytest.mark.parametrize(
    ("phase", "expected"),
    [("build", ("build", "build_failed")), ("start", ("sandbox", "sandbox_error"))],
)
def test_a_plugin_environment_that_cannot_be_had_is_infrastructure_a_resume_runs_again(
    pytester: pytest.Pytester, dataset: DatasetMaker, phase: str, expected: tuple[str, str]
) -> None:
    """A plugin environment raising the documented `EnvironmentUnavailable` errs its attempt
    as Docker's own failures do (phase `build` as `build_failed`, `start` as a sandbox
    error), never as the agent's; once it can be had, a plain `--resume-suite` runs the
    attempt again and it passes."""
    (pytester.path / "ds/ws").mkdir(parents=True)
    dataset({"a.yaml": {**task("ok"), "workspace": "ws"}})
    write(
        pytester.path / "ds/conftest.py",
        f"""
        import pathlib
        from pytest_agenteval import EnvironmentUnavailable

        def pytest_agenteval_make_environment(task, key, template, dataset_root, config):
            if not pathlib.Path(dataset_root, "fixed").exists():
                raise EnvironmentUnavailable("no sandbox today", phase={phase!r})
            return None
        """,
    )
    args = ("--agenteval", "ds", "--agenteval-run-id", f"plugin-{phase}")
    pytester.runpytest(*args).assert_outcomes(errors=1)
    record = latest_record(pytester.path, "a", 0)
    assert (record["phase"], record["error_type"]) == expected
    assert "no sandbox today" in record["error"]
    (pytester.path / "ds/fixed").touch()
    pytester.runpytest(*args, "--resume-suite").assert_outcomes(passed=1)


RAISING = """
def pytest_agenteval_record_committed(attempt_record):
    raise ValueError(f"boom at {attempt_record.task_id}")

def pytest_agenteval_summary(summary):
    raise RuntimeError("no summary for you")
"""
LISTENING = """
import pathlib

SEEN = pathlib.Path(__file__).with_name("seen.log")

def pytest_agenteval_record_committed(attempt_record):
    with SEEN.open("a") as seen:
        seen.write(attempt_record.task_id + "\\n")

def pytest_agenteval_summary(summary):
    with SEEN.open("a") as seen:
        seen.write("summary " + summary.status + "\\n")
"""


@pytest.mark.parametrize("workers", WORKERS)
def test_an_observer_hook_that_raises_is_reported_and_stops_nothing(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """A conftest whose record and summary hooks raise: every attempt still runs and is
    recorded, the other plugin's hooks still see each record and the summary, the run is
    `complete` with exit 0, and each error is said once with its conftest, count and
    traceback (before: exit 3 after the first attempt; `interrupted` at the end)."""
    dataset({f"t{i}.yaml": task("ok") for i in range(4)})
    pytester.makeconftest(RAISING)
    pytester.makepyfile(listening=LISTENING)
    pytester.syspathinsert()
    args = ["--agenteval", "ds", "-p", "listening", *workers]
    result = pytester.runpytest_subprocess(*args) if workers else pytester.runpytest(*args)
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "agenteval: pytest_agenteval_record_committed of conftest conftest.py raised "
            "ValueError: boom at t? (4 times); the run went on without it",
            "*conftest.py*line 2, in pytest_agenteval_record_committed",
            "*raise ValueError*",
            "agenteval: pytest_agenteval_summary of conftest conftest.py raised "
            "RuntimeError: no summary for you; the run went on without it",
        ]
    )
    seen = (pytester.path / "seen.log").read_text().splitlines()
    assert sorted(seen) == ["summary complete", "t0", "t1", "t2", "t3"]
    assert summary_of(pytester)["status"] == "complete"
    run = pytester.path / ".pytest_cache/agenteval/runs" / latest_run(pytester.path)
    assert json.loads((run / "run.json").read_text())["status"] == "complete"
