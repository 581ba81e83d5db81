"""A new user's first hour: agent typos found once and up front, failures that say why, and
numbers rounded for people."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from junitparser import xunit2

from helpers import WORKERS, DatasetMaker, stored, summary_of, task
from pytest_agenteval.cli import main
from pytest_agenteval.core.importing import UnresolvedReference, resolve_callable
from pytest_agenteval.core.numbers import rounded

MANIFEST = """\
name: ds
version: "1"
agent: {agent}
defaults:
  attempts: 2
"""

# Logs its import, so tests can tell when (and whether) the agent module was imported.
COUNTED_AGENT = """
import pathlib
LOG = pathlib.Path(__file__).with_name("calls.log")
with LOG.open("a") as log:
    log.write("imported\\n")


def run(task):
    with LOG.open("a") as log:
        log.write(f"{task.id} {task.attempt}\\n")
    return "ok"
"""

BROKEN_AGENT = """
import pathlib
pathlib.Path(__file__).with_name("calls.log").open("a").write("broken imported\\n")
import no_such_dependency
"""


def write_manifest(root: Path, agent: str) -> None:
    (root / "agenteval.yaml").write_text(MANIFEST.format(agent=agent))


def junit_cases(path: Path) -> dict[str, xunit2.TestCase]:
    cases = {}
    for suite in xunit2.JUnitXml.fromfile(str(path)):
        for case in suite:
            assert isinstance(case, xunit2.TestCase)  # what an xunit2 suite holds
            cases[case.name] = case
    return cases


# --- 11.6 agent references ---------------------------------------------------------------------


def test_a_bad_agent_is_reported_once_at_its_line_and_nothing_is_recorded(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A typo in the manifest's agent errors its attempts without records, is explained once
    (manifest line and a did-you-mean), and fails the gate even with --agenteval-allow-errors."""
    root = dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    write_manifest(root, "agnt:run")
    result = pytester.runpytest(
        "--agenteval", "ds", "--agenteval-allow-errors", "--agenteval-min-pass-rate", "0"
    )
    result.assert_outcomes(errors=4)
    out = result.stdout.str()
    problem = "ds/agenteval.yaml:3: at agent: cannot load agent 'agnt:run': no module named 'agnt'"
    result.stdout.fnmatch_lines(
        [
            "4 attempt(s) not run: their agent cannot be built*",
            f"  {problem}",
            "  Hint: did you mean 'agent'?",
        ]
    )
    # Under the first attempt's error and in the end section; before the run on stderr.
    assert out.count("did you mean 'agent'?") == 2
    assert result.stderr.str().count("did you mean 'agent'?") == 1
    # In full under the first attempt's error only: the other three refer to it.
    assert out.count(f"] not run: {problem}") == 1
    assert out.count("not run: its agent cannot be built (the first such error above") == 3
    result.stdout.fnmatch_lines(["pass@k n/a: no attempt recorded"])
    assert "pass^k" not in out
    result.stdout.fnmatch_lines(
        [f"ERROR ds/a.yaml::a[[]attempt-0[]] - agent build: not run: {problem[:10]}*"]
    )
    assert "gate NOT met" in out and "4 attempt(s) not run: their agent cannot be built" in out
    assert result.ret == 1
    assert stored(pytester.path) == []
    summary = summary_of(pytester)
    assert summary["agent_errors"] == [
        {"message": f"{problem}\nHint: did you mean 'agent'?", "attempts": 4}
    ]


def test_after_fixing_the_agent_a_resume_runs_the_attempts(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Attempts that could not start are not agent results: a resume after the fix runs them."""
    root = dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    write_manifest(root, "agent.py:rn")
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(
        [
            "  ds/agenteval.yaml:3: at agent: cannot load agent 'agent.py:rn': "
            "'agent.py' has no attribute 'rn'",
            "  Hint: did you mean 'run'?",
        ]
    )
    write_manifest(root, "agent.py:run")
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    result.assert_outcomes(passed=4)
    assert sorted(dataset.calls()) == ["a 0", "a 1", "b 0", "b 1"]
    assert summary_of(pytester)["status"] == "complete"


def test_agents_are_built_before_the_first_attempt_and_only_for_attempts_that_run(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Agents are imported once each, before any attempt runs (a bad per-task agent in the
    last task is known up front); `--co`, a -k that selects nothing and a replay import none."""
    root = dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    write_manifest(root, "counted:run")
    (root / "counted.py").write_text(COUNTED_AGENT)
    (root / "broken.py").write_text(BROKEN_AGENT)
    (root / "z.yaml").write_text("input: q\nexpected: ok\nagent: broken.py:run\n")
    pytester.runpytest("--agenteval", "ds", "--co").assert_outcomes()
    pytester.runpytest("--agenteval", "ds", "-k", "nothing_matches")
    assert dataset.calls() == []
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(
        [
            "  ds/z.yaml:3: at agent: cannot load agent 'broken.py:run': importing 'broken.py' "
            "failed at ds/broken.py:4: ModuleNotFoundError: No module named 'no_such_dependency'"
        ]
    )
    assert dataset.calls() == ["imported", "broken imported", "a 0", "a 1", "b 0", "b 1"]
    (root / "z.yaml").unlink()
    (root / "calls.log").unlink()
    pytester.runpytest("--agenteval", "ds", "--resume-suite").assert_outcomes(passed=4)
    assert dataset.calls() == []


def test_missing_command_program_names_the_task_line(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A per-task command whose program is not on PATH, or whose `{dataset}` script is missing,
    is found without starting anything, at the task file's line, with the names nearby."""
    bin_dir = pytester.path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "mybot"
    program.write_text("#!/bin/sh\necho ok\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    dataset(
        {
            "good.yaml": task(agent={"command": ["mybot"], "env": {"PATH": str(bin_dir)}}),
            "typo.yaml": task(agent={"command": ["mybto"], "env": {"PATH": str(bin_dir)}}),
            "script.yaml": task(agent={"command": ["{python}", "{dataset}/agnt.py"]}),
        }
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "  ds/typo.yaml:1: at agent: agent command 'mybto' not found on PATH",
            "  Hint: did you mean 'mybot'?",
            "  ds/script.yaml:1: at agent: agent command script '{dataset}/agnt.py' not found *",
            "  Hint: did you mean 'agent.py'?",
        ]
    )


@pytest.mark.slow
def test_a_bad_agent_under_xdist_is_reported_once(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Under `-n 2` the workers' reports bring the problem to the controller: one explanation,
    every attempt an error, nothing stored."""
    root = dataset({f"t{i}.yaml": task("ok") for i in range(3)})
    write_manifest(root, "agnt:run")
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2")
    result.assert_outcomes(errors=6)
    result.stdout.fnmatch_lines(["6 attempt(s) not run: their agent cannot be built*"])
    out = result.stdout.str()
    # In full under each worker's first attempt's error, once in the end section; once
    # before the run (the controller's, on stderr).
    full = out.count("] not run: ds/agenteval.yaml:3: at agent: cannot load agent")
    assert 1 <= full <= 2
    assert out.count("Hint: did you mean 'agent'?") == full + 1
    assert result.stderr.str().count("Hint: did you mean 'agent'?") == 1
    assert stored(pytester.path) == []


def test_validate_checks_agents_and_plugin_graders(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agenteval validate` builds graders through conftest plugins and every task's agent,
    reports each problem at its line, and leaves no run and no cache behind."""
    root = dataset(
        {
            "good.yaml": task("ok", graders=[{"length": {"at_least": 1}}]),
            "opts.yaml": task("ok", graders=[{"length": {"at_least": -1}}]),
            "name.yaml": task("ok", graders=[{"lenght": {"at_least": 1}}]),
            "own.yaml": task("ok", agent="agent:rnu"),
        }
    )
    pytester.makeconftest(
        """
        class Length:
            def grade(self, ctx):
                return True

        def pytest_agenteval_make_grader(spec, task, dataset_root):
            if spec.type == "length":
                if spec.options["at_least"] < 0:
                    raise ValueError("at_least must be >= 0")
                return Length()
        """
    )
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "ds/opts.yaml:1: at graders[0]: at_least must be >= 0" in out
    assert "ds/name.yaml:1: at graders[0]: unknown grader 'lenght'" in out
    assert "ds/own.yaml:1: at agent: cannot load agent 'agent:rnu'" in out
    assert "did you mean 'run'?" in out
    assert out.rstrip().endswith("1 task valid, 3 problems")
    write_manifest(root, "agnt:run")
    for name in ("opts.yaml", "name.yaml", "own.yaml"):
        (root / name).unlink()
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "ds/agenteval.yaml:3: at agent: cannot load agent 'agnt:run'" in out
    assert "0 tasks valid, 1 problem" in out
    assert not (pytester.path / ".pytest_cache").exists() and dataset.calls() == []


def test_two_datasets_each_run_their_own_same_named_agent_module(
    pytester: pytest.Pytester,
) -> None:
    """Two datasets whose manifests both say `agent:answer` (each its own agent.py) evaluate each
    its own agent in one session (not the module of that name imported first)."""
    for name in ("one", "two"):
        root = pytester.mkdir(name)
        (root / "agenteval.yaml").write_text(f"name: {name}\nversion: '1'\nagent: agent:answer\n")
        (root / "agent.py").write_text(f"def answer(task):\n    return {name!r}\n")
        (root / "t.yaml").write_text(f"input: hi\nexpected: {name}\n")
    result = pytester.runpytest("--agenteval", "one", "--agenteval", "two")
    result.assert_outcomes(passed=2)


def test_unresolved_references_suggest_what_is_close(tmp_path: Path) -> None:
    """Module, file and function typos each get a did-you-mean; an import that fails inside
    the user's module says where."""
    (tmp_path / "helper_mod.py").write_text("def solve(task):\n    return 'x'\n")
    (tmp_path / "broken_mod.py").write_text("import json\nimport no_such_dependency_x\n")
    cases = {
        "helper_md:solve": "did you mean 'helper_mod'?",
        "helper_mod.py:slove": "did you mean 'solve'?",
        "helpr_mod.py:solve": "did you mean 'helper_mod.py'?",
    }
    for ref, hint in cases.items():
        with pytest.raises(UnresolvedReference) as info:
            resolve_callable(ref, tmp_path)
        assert info.value.hint == hint
    with pytest.raises(UnresolvedReference, match=r"broken_mod\.py:2: ModuleNotFoundError"):
        resolve_callable("broken_mod:run", tmp_path)
    assert resolve_callable("helper_mod:solve", tmp_path)(None) == "x"


# --- 11.7 failure output -----------------------------------------------------------------------

ASYNC_AGENT = """
import asyncio


def helper(task):
    raise RuntimeError("kaboom")


async def run_async(task):
    await asyncio.sleep(0)
    helper(task)


def run_sync(task):
    helper(task)
"""


@pytest.mark.parametrize("agent", ["user:run_async", "user:run_sync"])
def test_tracebacks_show_only_the_users_frames(
    pytester: pytest.Pytester, dataset: DatasetMaker, agent: str
) -> None:
    """An async agent (on the event loop thread) and a timed sync agent (in a thread of its
    own) show their own frames only: no asyncio, concurrent.futures, threading or plugin."""
    root = dataset({"boom.yaml": task(timeout=30)}, manifest={"agent": agent})
    (root / "user.py").write_text(ASYNC_AGENT)
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=1)
    errors = result.stdout.str().split("= ERRORS =")[1].split("= agenteval =")[0]
    internals = (
        "asyncio/",
        "concurrent/",
        "threading.py",
        "_pytest/",
        "pluggy/",
        "pytest_agenteval/",
    )
    assert not [path for path in internals if path in errors]
    assert errors.count("ds/user.py:") == 2 and "E       RuntimeError: kaboom" in errors
    record = summary_of(pytester)["tasks"][0]["attempts"][0]
    assert record["reason"] == "RuntimeError: kaboom"


@pytest.mark.parametrize("workers", WORKERS)
def test_failures_say_why_on_their_first_line_and_in_junit(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """The short test summary and pytest's JUnit name the failing grader's reason, the agent's
    exception, or its timeout (after where the error happened: pytest's JUnit writes it as
    `failed on setup with "..."`), also from xdist workers."""
    dataset(
        {
            "wrong.yaml": task("41", expected="42"),
            "boom.yaml": task(metadata={"raise": "kaboom"}),
            "slow.yaml": task("ok", metadata={"sleep": 5}, timeout=0.3),
        }
    )
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "-rA", "--junitxml=out.xml", *workers
    )
    result.assert_outcomes(failed=1, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "FAILED ds/wrong.yaml::wrong[[]attempt-0[]] - equals: expected '42', got '41'",
            "ERROR ds/boom.yaml::boom[[]attempt-0[]] - agent call: RuntimeError: kaboom",
            "ERROR ds/slow.yaml::slow[[]attempt-0[]] - agent call: agent timed out after 0.3s*",
            "wrong [[]attempt 0[]] failed: equals: expected '42', got '41'",
        ]
    )
    cases = junit_cases(pytester.path / "out.xml")
    assert cases["wrong[attempt-0]"].result[0].message == "equals: expected '42', got '41'"
    said = 'failed on setup with "agent call: '
    assert cases["boom[attempt-0]"].result[0].message == f'{said}RuntimeError: kaboom"'
    assert (
        cases["slow[attempt-0]"].result[0].message.startswith(f"{said}agent timed out after 0.3s")
    )
    assert "Traceback" not in cases["slow[attempt-0]"].result[0].text


def test_a_replayed_failure_says_why_too(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """A failure replayed from the store keeps its reason on the first line."""
    dataset({"wrong.yaml": task("41", expected="42")})
    pytester.runpytest("--agenteval", "ds")
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite", "-rf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "wrong [[]attempt 0[]] failed (replayed from the stored record): "
            "equals: expected '42', got '41'",
            "FAILED ds/wrong.yaml::wrong[[]attempt-0[]] - equals: expected '42', got '41'",
        ]
    )


# --- 11.9 numbers --------------------------------------------------------------------------------

COST_AGENT = """
from pytest_agenteval import AgentResult, Usage


def run(task):
    scores = {0: "ok", 1: "no", 2: "ok"}
    return AgentResult(output=scores[task.attempt % 3], usage=Usage(cost=0.1 + 0.2))
"""


def test_reports_round_numbers_and_summary_json_keeps_them(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """JUnit properties and the terminal show rounded numbers and a labelled interval;
    summary.json keeps full precision."""
    root = dataset(
        {"a.yaml": task(), "b.yaml": task(), "c.yaml": task(expected="never")},
        manifest={"agent": "costly:run"},
    )
    (root / "costly.py").write_text(COST_AGENT)
    result = pytester.runpytest(
        "--agenteval", "ds", "--attempts", "3", "--junitxml=out.xml", "--agenteval-report", "rep"
    )
    result.stdout.fnmatch_lines(
        ["pass@1 0.444, 95% CI *-* (standard error 0.222 across 3 tasks)", "cost 2.7000"]
    )
    props = {
        p.name: p.value for p in junit_cases(pytester.path / "out.xml")["a[attempt-0]"].properties()
    }
    assert props["cost"] == "0.3"
    suite_props = {
        p.name: p.value
        for s in xunit2.JUnitXml.fromfile(str(root.parent / "rep/junit.xml"))
        for p in s.properties()
    }
    assert suite_props["pass_at_1"] == "0.4444"
    assert json.loads(suite_props["pass_at_k"]) == {"1": 0.4444, "2": 0.6667, "3": 0.6667}
    summary = json.loads((pytester.path / "rep/summary.json").read_text())
    assert summary["metrics"]["pass_at_k"]["1"] == pytest.approx(4 / 9, abs=1e-15)
    assert summary["metrics"]["pass_at_k"]["1"] != 0.4444
    assert "95% CI" in (pytester.path / "rep/summary.md").read_text()


def test_rounded_keeps_four_significant_digits() -> None:
    """Rounding removes float noise and keeps small values (a cheap model's cost)."""
    assert rounded(0.7999999999999999) == 0.8
    assert rounded(2 / 3) == 0.6667
    assert rounded(0.1 + 0.2) == 0.3
    assert rounded(0.0000123456) == 0.00001235
    assert rounded(1234.5678) == 1235.0
    assert rounded(0.0) == 0.0
