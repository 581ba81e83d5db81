"""Running attempts: agent kinds, outcomes (pass / failure / error), records on reports."""

from __future__ import annotations

import fnmatch
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from junitparser import Error, xunit2

from helpers import DatasetMaker, default_sigint, task
from pytest_agenteval.core.records import AttemptRecord


def test_wrong_answer_is_a_failure_with_a_readable_report(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A failed attempt shows task, attempt, each grader's verdict, expected and the output."""
    dataset(
        {
            "q.yaml": {
                "input": "q",
                "expected": "42",
                "metadata": {"answers": ["42", "41"]},
                "graders": ["equals", {"contains": "4"}],
            }
        }
    )
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*agenteval: q[[]attempt-1[]]*",
            "q [[]attempt 1[]] failed: equals: expected '42', got '41'",
            "  [[]FAIL[]] equals: expected '42', got '41'",
            "  [[]pass[]] contains: contains '4'",
            "expected: 42",
            "output: '41'",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_agent_exception_is_an_error_and_others_still_run(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """An agent crash is an *error* showing the agent's own traceback, not the plugin's."""
    dataset({"boom.yaml": task(metadata={"raise": "kaboom"}), "fine.yaml": task("ok")})
    result = pytester.runpytest("--agenteval", "ds", "--junitxml=out.xml")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of agenteval: boom[[]attempt-0[]]*",
            "agent call: boom [[]attempt 0[]] error: RuntimeError: kaboom",
            "E * RuntimeError: kaboom",
            "ds/agent.py:*: RuntimeError",
        ]
    )
    errors = result.stdout.str().split("ERRORS")[1].split("- generated xml file")[0]
    assert "pluggy" not in errors and "_pytest" not in errors and "pytest_agenteval" not in errors
    xml = (pytester.path / "out.xml").read_text()
    assert "<error" in xml and "<failure" not in xml


WHENS = """
import os, pathlib

def pytest_runtest_logreport(report):
    with pathlib.Path(__file__).with_name("whens.log").open("a") as log:
        log.write(f"{os.getpid()} {report.when}\\n")
"""
USAGE_AGENT = """
from pytest_agenteval import AgentResult, Usage

def run(task):
    return AgentResult(output="ok", usage=Usage(input_tokens=500, output_tokens=0))
"""
WHERE = {
    "boom[attempt-0]": ("agent call", "agent call: RuntimeError: kaboom"),
    "judged[attempt-0]": ("grading", "grading: ValueError: no verdict"),
    "over[attempt-0]": ("budget", "over budget: 500 tokens used (budget max_tokens 10)"),
    "nobody[attempt-0]": ("agent build", "agent build: not run: ds/nobody.yaml:*"),
    "typo[load-error]": ("load", "load: ds/typo.yaml:1: at graders[[]0[]]: unknown grader*"),
}
"""Each erroring attempt's testcase: its `phase` property and its JUnit message (pytest's
`failed on setup with "..."` around the crash message, which says where first)."""


@pytest.mark.parametrize("workers", [[], pytest.param(["-n", "2"], marks=pytest.mark.slow)])
def test_reports_keep_pytests_phases_and_say_where_an_attempt_failed(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """Over a passing, a failing, an erroring (agent, grading, budget), an unbuildable and a
    load-error attempt, new and replayed, alone and on xdist workers: every report's `when` is
    pytest's setup, call or teardown; each error's first line, short summary, JUnit message
    and `phase` property say where it failed, and pytest heads it `ERROR at setup of`."""
    root = dataset(
        {
            "fine.yaml": task("ok"),
            "wrong.yaml": task("41", expected="42"),
            "boom.yaml": task(metadata={"raise": "kaboom"}),
            "judged.yaml": {**task("ok"), "graders": [{"python": "grade:broken"}]},
            "over.yaml": {**task(), "agent": "usage:run", "budget": {"max_tokens": 10}},
            "nobody.yaml": {**task(), "agent": "nosuchmodule:run"},
            "typo.yaml": {**task("ok"), "graders": ["equal"]},
        }
    )
    (root / "grade.py").write_text("def broken(output):\n    raise ValueError('no verdict')\n")
    (root / "usage.py").write_text(USAGE_AGENT)
    pytester.makeconftest(WHENS)
    for resume in ([], ["--resume-suite"]):
        args = ["--agenteval", "ds", "--junitxml=out.xml", "-rE", *workers, *resume]
        run = pytester.runpytest_subprocess if workers else pytester.runpytest_inprocess
        result = run(*args)
        result.assert_outcomes(passed=1, failed=1, errors=5)
        result.stdout.fnmatch_lines_random(
            [
                "*_ ERROR at setup of agenteval: boom[[]attempt-0[]] _*",
                "agent call: boom [[]attempt 0[]] error*: RuntimeError: kaboom",
                "*grading: judged [[]attempt 0[]] error*: ValueError: no verdict",
                "ERROR ds/boom.yaml::boom[[]attempt-0[]] - agent call: RuntimeError: kaboom",
                "ERROR ds/over.yaml::over[[]attempt-0[]] - over budget: *",
                "ERROR ds/typo.yaml::typo[[]load-error[]] - load: ds/typo.yaml:1:*",
                "ERROR ds/nobody.yaml::nobody[[]attempt-0[]] - agent build: not run: *",
                "ds/typo.yaml:1: at graders[[]0[]]: unknown grader 'equal'",
            ]
        )
        assert "ERROR at agent call" not in result.stdout.str()
        whens = (pytester.path / "whens.log").read_text().split()[1::2]
        assert set(whens) == {"setup", "call", "teardown"}
        suite = next(iter(xunit2.JUnitXml.fromfile(str(pytester.path / "out.xml"))))
        cases = {case.name: case for case in suite}
        assert cases["fine[attempt-0]"].result == []
        [failure] = cases["wrong[attempt-0]"].result
        assert (
            not isinstance(failure, Error) and failure.message == "equals: expected '42', got '41'"
        )
        for name, (phase, said) in WHERE.items():
            [error] = cases[name].result
            assert isinstance(error, Error), name
            assert fnmatch.fnmatch(error.message, f'failed on setup with "{said}"'), error.message
            case = cases[name]
            assert isinstance(case, xunit2.TestCase)  # what an xunit2 suite holds
            assert {p.name: p.value for p in case.properties()}["phase"] == phase, name
        (pytester.path / "whens.log").unlink()


def test_async_agent(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    dataset({"a.yaml": task("ok")}, manifest={"agent": "agent:run_async"})
    pytester.runpytest("--agenteval", "ds", "--attempts", "2").assert_outcomes(passed=2)


@pytest.mark.parametrize("agent", ["agent:run", "agent:run_async"])
def test_timeout_is_an_error(pytester: pytest.Pytester, dataset: DatasetMaker, agent: str) -> None:
    """An agent that exceeds the task's timeout errors, even if it swallows exceptions, and the
    run does not wait for it: the run is over before the agent wakes from its 60 s sleep (no
    clock in the test)."""
    meta = {"sleep": 60, "async_sleep": 60}
    root = dataset(
        {"slow.yaml": task("ok", metadata=meta, timeout=0.3), "fine.yaml": task("ok")},
        manifest={"agent": f"sleeper:{agent.split(':')[1]}"},
    )
    (root / "sleeper.py").write_text(SLEEPER)
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*slow [[]attempt 0[]] error: agent timed out after 0.3s*"])
    assert not (root / "woke.log").exists()


# The test agent, which writes woke.log when the slow task's sleep ends.
SLEEPER = """
import pathlib
from agent import run as _run, run_async as _run_async

WOKE = pathlib.Path(__file__).with_name("woke.log")


def run(task):
    answer = _run(task)
    if task.id == "slow":
        WOKE.write_text("woke")
    return answer


async def run_async(task):
    answer = await _run_async(task)
    if task.id == "slow":
        WOKE.write_text("woke")
    return answer
"""


def test_agent_from_file_path_and_override(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`tools/bot.py:answer` resolves beside the manifest; --agenteval-agent overrides it."""
    root = dataset(
        {"a.yaml": task(expected="from file")}, manifest={"agent": "tools/bot.py:answer"}
    )
    (root / "tools").mkdir()
    (root / "tools/bot.py").write_text("def answer(task):\n    return 'from file'\n")
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    pytester.makepyfile(other_agent="def answer(task):\n    return 'from cli'\n")
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-agent", "other_agent.py:answer")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expected 'from file', got 'from cli'*"])


def test_agent_problems_are_errors_with_advice(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A missing agent module, a missing agent, or a wrong return type error clearly."""
    dataset({"a.yaml": task("ok")}, manifest={"agent": "nosuchmodule:run"})
    result = pytester.runpytest("--agenteval", "ds")
    result.stdout.fnmatch_lines(
        [
            "*not run: ds/agenteval.yaml:1: at agent: cannot load agent 'nosuchmodule:run': "
            "no module named 'nosuchmodule'"
        ]
    )
    dataset({"a.yaml": task("ok")}, manifest={"agent": None})
    result = pytester.runpytest("--agenteval", "ds")
    result.stdout.fnmatch_lines(
        [
            "*not run: ds/agenteval.yaml:1: at agent: no agent for the tasks of this dataset",
            "*Hint: set `agent:` in agenteval.yaml*",
        ]
    )
    pytester.makepyfile(bad_agent="def run(task):\n    return 42\n")
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-agent", "bad_agent:run")
    result.stdout.fnmatch_lines(
        ["*error: agent returned int 42", "return the output as a str, or an AgentResult"]
    )
    result.assert_outcomes(errors=1)


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie (PID 1 in a container may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


COMMAND_AGENT = """
import json, os, subprocess, sys, time
task = json.load(sys.stdin)
if task["metadata"].get("spawn"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    open(task["metadata"]["spawn"], "w").write(str(child.pid))
    time.sleep(60)
if task["metadata"].get("fail"):
    print("something broke", file=sys.stderr)
    sys.exit(3)
open("note.txt", "w").write("written in " + os.getcwd())
print(sys.argv[1], task["attempt"], os.environ["GREETING"], end="")
"""


def test_command_agent(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """A command agent gets the task as JSON on stdin, {input} in argv, env, a fresh cwd."""
    root = dataset(
        {
            "a.yaml": {
                "input": "hello",
                "expected": "hello 1 hi",
                "graders": [
                    "equals",
                    {
                        "command": [
                            "{python}",
                            "-c",
                            "import pathlib; assert 'written in' in pathlib.Path('note.txt').read_text()",
                        ]
                    },
                ],
            }
        },
        manifest={
            "agent": {
                "command": ["{python}", "{dataset}/cmd.py", "{input}"],
                "env": {"GREETING": "hi"},
            }
        },
    )
    (root / "cmd.py").write_text(COMMAND_AGENT)
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*expected 'hello 1 hi', got 'hello 0 hi'*"])


def test_command_agent_failure_and_timeout_kill_the_process_group(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Non-zero exit is an error with stderr; on timeout the agent *and its children* die."""
    pidfile = pytester.path / "child.pid"
    root = dataset(
        {
            "fails.yaml": task(metadata={"fail": True}),
            "hangs.yaml": task(metadata={"spawn": str(pidfile)}, timeout=1),
        },
        manifest={
            "agent": {
                "command": [sys.executable, "{dataset}/cmd.py", "x"],
                "env": {"GREETING": "hi"},
            }
        },
    )
    (root / "cmd.py").write_text(COMMAND_AGENT)
    result = pytester.runpytest_subprocess("--agenteval", "ds")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*fails [[]attempt 0[]] error: agent command exited with status 3",
            "something broke",
            "*hangs [[]attempt 0[]] error: agent command timed out after 1s (process group killed)*",
        ]
    )
    assert not alive(int(pidfile.read_text()))


def test_command_agent_json_output(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    root = dataset(
        {"a.yaml": task(expected="yes")},
        manifest={
            "agent": {
                "command": [sys.executable, "{dataset}/j.py"],
                "output": "json",
                "stdin": "none",
            }
        },
    )
    (root / "j.py").write_text(
        'print(\'{"output": "yes", "usage": {"input_tokens": 3, "cost": 0.5}}\')'
    )
    reprec = pytester.inline_run("--agenteval", "ds")
    reprec.assertoutcome(passed=1)
    (call,) = reprec.getcalls("pytest_agenteval_record_committed")
    assert call.attempt_record.usage == {
        "input_tokens": 3,
        "output_tokens": None,
        "cost": 0.5,
    }


def test_fixture_agent_is_set_up_once_per_session(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """An `agenteval_agent` session fixture overrides the manifest and starts once."""
    dataset(
        {"a.yaml": task(expected="fixture says hi"), "b.yaml": task(expected="fixture says hi")}
    )
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture(scope="session")
        def agenteval_agent():
            print("SETUP-AGENT")
            yield lambda task: "fixture says hi"
            print("TEARDOWN-AGENT")
        """
    )
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "3", "-s")
    result.assert_outcomes(passed=6)
    assert result.stdout.str().count("SETUP-AGENT") == 1
    assert result.stdout.str().count("TEARDOWN-AGENT") == 1


def test_workspace_is_fresh_per_attempt_and_kept_on_failure(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Each attempt gets a copy of the template; a failing attempt's copy is kept and shown."""
    root = dataset(
        {
            "code.yaml": {
                "input": "fix",
                "workspace": "ws",
                "graders": [
                    {"command": ["{python}", "-m", "pytest", "-q", "-p", "no:cacheprovider"]}
                ],
            }
        },
        manifest={"agent": "fixer:fix"},
    )
    (root / "ws").mkdir()
    (root / "ws/calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "ws/test_calc.py").write_text(
        "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    (root / "fixer.py").write_text(
        "def fix(task):\n"
        "    calc = task.workspace / 'calc.py'\n"
        "    assert 'a - b' in calc.read_text(), 'the template must be fresh'\n"
        "    if task.attempt == 1:\n"
        "        calc.write_text(calc.read_text().replace('a - b', 'a + b'))\n"
        "    return 'done'\n"
    )
    result = pytester.runpytest(
        "--agenteval", "ds", "--attempts", "2", "--basetemp", str(pytester.path / "tmp")
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*exited 1*", "workspace kept: *tmp/agenteval/ds--code--0-*"])
    kept = [p.name for p in (pytester.path / "tmp").glob("agenteval/*")]
    assert len(kept) == 1 and kept[0].startswith("ds--code--0-")
    assert (root / "ws/calc.py").read_text().count("a - b") == 1


def test_records_on_reports_are_complete_plain_json(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Every attempt's report carries a complete agenteval.record/1 of plain JSON types."""
    dataset({"a.yaml": task("ok", tags=["t1"]), "e.yaml": task(metadata={"raise": "x"})})
    pytester.makeconftest(
        """
        import json
        from pytest_agenteval.core.payloads import NewRecord, from_wire

        def pytest_runtest_logreport(report):
            carried = getattr(report, "agenteval", None)
            if isinstance(carried, NewRecord):
                record = json.loads(from_wire(carried.ship()).text)
                assert record == carried.record.to_json()
                assert json.loads(json.dumps(record)) == record, "not plain JSON types"
                with open("on-reports.log", "a") as log:
                    log.write(carried.record.task_id + "\\n")
        """
    )
    reprec = pytester.inline_run("--agenteval", "ds", "--attempts", "2", "-s")
    calls = reprec.getcalls("pytest_agenteval_record_committed")
    records = [call.attempt_record.to_json() for call in calls]
    assert len(records) == 4
    on_reports = (pytester.path / "on-reports.log").read_text().split()
    assert sorted(on_reports) == ["a", "a", "e", "e"]
    seeds = set()
    for rec in records:
        AttemptRecord.from_json(rec)
        assert (
            rec["dataset"] == "ds" and rec["digest"] and rec["run_digest"] and rec["duration"] >= 0
        )
        assert rec["agent"]["used"] == "callable:agent:run"
        seeds.add(rec["task_id"])
    by_task = {(r["task_id"], r["attempt"]): r for r in records}
    assert (
        by_task[("a", 0)]["status"] == "pass"
        and by_task[("a", 0)]["verdicts"][0]["grader"] == "equals"
    )
    assert by_task[("a", 1)]["tags"] == ["t1"]
    assert (
        by_task[("e", 0)]["status"] == "error" and "RuntimeError: x" in by_task[("e", 0)]["error"]
    )
    assert by_task[("e", 0)]["phase"] == "agent"


def test_seed_is_deterministic_per_attempt(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    root = dataset({"a.yaml": task(expected="x")}, manifest={"agent": "seeder:run"})
    (root / "seeder.py").write_text(
        "def run(task):\n    print('SEED', task.attempt, task.seed)\n    return 'x'\n"
    )
    first = pytester.runpytest("--agenteval", "ds", "--attempts", "3", "-s").stdout.str()
    second = pytester.runpytest("--agenteval", "ds", "--attempts", "3", "-s").stdout.str()
    seeds = re.findall(r"SEED \d+ \d+", first)
    assert len(seeds) == 3 and len({s.split()[2] for s in seeds}) == 3
    assert seeds == re.findall(r"SEED \d+ \d+", second)


def test_sigint_leaves_no_orphan_command_agent(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Ctrl-C while a command agent runs kills it; the session still ends cleanly (exit 2)."""
    pidfile = pytester.path / "child.pid"
    root = dataset(
        {"hangs.yaml": task(metadata={"spawn": str(pidfile)})},
        manifest={
            "agent": {
                "command": [sys.executable, "{dataset}/cmd.py", "x"],
                "env": {"GREETING": "hi"},
            }
        },
    )
    (root / "cmd.py").write_text(COMMAND_AGENT)
    proc = pytester.popen(
        [sys.executable, "-m", "pytest", "--agenteval", "ds"],
        # None (inherit stdin) is valid for Popen; pytest's annotation of popen omits it.
        stdin=None,  # type: ignore[arg-type]
        preexec_fn=default_sigint,
    )
    deadline = time.monotonic() + 20
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(20) == pytest.ExitCode.INTERRUPTED
    assert not alive(int(pidfile.read_text()))


def test_example_suite_runs(pytester: pytest.Pytester) -> None:
    """The shipped example suite shows passes, failures and one agent error, offline."""
    shutil.copytree(Path(__file__).parent.parent / "example_suite", pytester.path / "example_suite")
    result = pytester.runpytest_subprocess("--agenteval", "example_suite")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] > 20 and outcomes["failed"] >= 1 and outcomes["errors"] == 3


def test_custom_grader_from_a_plugin_hook(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """A conftest registers a grader by name; YAML uses it; bad options point at the YAML line."""
    dataset(
        {
            "a.yaml": {
                "input": "q",
                "metadata": {"answer": "abcde"},
                "graders": [{"length": {"at_least": 3}}],
            },
            "b.yaml": {
                "input": "q",
                "metadata": {"answer": "ab"},
                "graders": [{"length": {"at_least": 3}}],
            },
            "c.yaml": {
                "input": "q",
                "metadata": {"answer": "ab"},
                "graders": [{"length": {"at_least": -1}}],
            },
        }
    )
    pytester.makeconftest(
        """
        class Length:
            def __init__(self, at_least):
                if at_least < 0:
                    raise ValueError("at_least must be >= 0")
                self.at_least = at_least

            def grade(self, ctx):
                return len(ctx.output) >= self.at_least, f"{len(ctx.output)} chars"

        def pytest_agenteval_make_grader(spec, task, dataset_root):
            if spec.type == "length":
                return Length(**spec.options)
        """
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*[[]FAIL[]] length: 2 chars*"])
    result.stdout.fnmatch_lines(["ds/c.yaml:1: at graders[[]0[]]: at_least must be >= 0"])


def test_custom_agent_kind_from_a_plugin_hook(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A conftest provides an agent kind; `{kind: {options}}` uses it (built once, also as
    the manifest's agent); an unknown kind errors its attempts, saying where kinds come from."""
    dataset(
        {
            "a.yaml": task("hello a", metadata={}, expected="hello a"),
            "b.yaml": {**task(expected="hi b"), "agent": {"echo": {"greeting": "hi"}}},
            "c.yaml": {**task(expected="x"), "agent": {"ecko": {}}},
        },
        manifest={"agent": {"echo": {"greeting": "hello"}}},
    )
    pytester.makeconftest(
        """
        BUILT = []

        def pytest_agenteval_make_agent(spec, dataset_root):
            if getattr(spec, "type", None) == "echo":
                BUILT.append(spec.options)
                greeting = spec.options["greeting"]
                return lambda task: f"{greeting} {task.id}"

        def pytest_sessionfinish(session):
            print("BUILT", len(BUILT))
        """
    )
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "2", "-s")
    result.assert_outcomes(passed=4, errors=2)
    assert "PydanticSerializationUnexpectedValue" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*BUILT 2",
            "*ds/c.yaml:1: at agent: unknown agent kind 'ecko'*",
            "*built-in kinds: callable, command, openai, react; other kinds come from plugins*",
        ]
    )
