"""An attempt's Environment: the local folder does what workspaces always did, and command
agents, command graders and python graders reach files and programs only through the seam."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from helpers import DatasetMaker, aid, stored, task
from pytest_agenteval import Environment, ExecResult
from pytest_agenteval.core.environment import ChangedFile
from pytest_agenteval.execution.environment import LocalEnvironment
from pytest_agenteval.execution.workspaces import Workspaces


def _template(tmp_path: Path) -> Path:
    template = tmp_path / "template"
    (template / "src").mkdir(parents=True)
    (template / "src/calc.py").write_text("def add(a, b):\n    return a - b\n")
    (template / "README").write_text("read me\n")
    (template / "gone.txt").write_text("to delete\n")
    return template


def test_local_environment_holds_a_copy_runs_programs_and_reads_and_writes(
    tmp_path: Path,
) -> None:
    """A local environment is a fresh copy of the template; programs run there with input and
    variables; files are read and written below it, never outside."""
    env = Workspaces(tmp_path / "base").create(aid("ds", "t", 0), _template(tmp_path))
    assert isinstance(env, Environment)
    assert env.read_file("src/calc.py").startswith(b"def add")
    env.write_file("notes/new.txt", b"hello")
    done = env.exec(
        [env.python, "-c", "import os, sys; print(os.getcwd(), sys.stdin.read(), os.environ['X'])"],
        input=b"from stdin",
        env={"X": "set"},
    )
    assert (done.returncode, done.timed_out) == (0, False)
    assert done.stdout.split() == [env.workdir, "from", "stdin", "set"]
    assert (Path(env.workdir) / "notes/new.txt").read_bytes() == b"hello"
    for outside in ("../escape.txt", "/etc/passwd"):
        with pytest.raises(PermissionError, match="outside the attempt's workspace"):
            env.read_file(outside)
    assert env.read_file(f"{env.workdir}/README") == b"read me\n"


def test_local_environment_writes_text_as_utf8_and_bytes_as_given(tmp_path: Path) -> None:
    """`write_file` takes a str (written as UTF-8) as well as bytes; `exec` answers with the
    public `ExecResult`, its fields by name."""
    env = Workspaces(tmp_path / "base").create(aid("ds", "t", 0), None)
    env.write_file("deep/text.txt", "café ☕\n")
    env.write_file("raw.bin", b"\xff\x00")
    assert env.read_file("deep/text.txt") == "café ☕\n".encode()
    assert env.read_file("raw.bin") == b"\xff\x00"
    done = env.exec(["cat", "deep/text.txt"])
    assert isinstance(done, ExecResult)
    assert done == ExecResult(0, "café ☕\n", "", False)


def test_local_environment_lists_the_files_changed_against_the_template(tmp_path: Path) -> None:
    """Changed files are the ones added, modified or deleted against the template, with sizes."""
    env = Workspaces(tmp_path / "base").create(aid("ds", "t", 0), _template(tmp_path))
    assert env.changed_files() == []
    env.write_file("src/calc.py", b"def add(a, b):\n    return a + b\n")
    env.write_file("out/result.json", b"{}")
    env.exec(["rm", "gone.txt"])
    assert env.changed_files() == [
        ChangedFile("gone.txt", "deleted", 0),
        ChangedFile("out/result.json", "added", 2),
        ChangedFile("src/calc.py", "modified", 32),
    ]
    empty = Workspaces(tmp_path / "base").create(aid("ds", "t", 1), None)
    empty.write_file("a.txt", b"abc")
    assert empty.changed_files() == [ChangedFile("a.txt", "added", 3)]


def test_local_environment_teardown_removes_or_keeps(tmp_path: Path) -> None:
    """Teardown removes a passed attempt's folder and keeps a failed one's; a new environment
    for the same attempt starts fresh."""
    workspaces = Workspaces(tmp_path / "base")
    kept = workspaces.create(aid("ds", "t", 0), None)
    kept.write_file("left.txt", b"x")
    kept.teardown(keep=True)
    assert (Path(kept.workdir) / "left.txt").exists()
    again = workspaces.create(aid("ds", "t", 0), None)
    assert again.workdir == kept.workdir and again.changed_files() == []
    again.teardown(keep=False)
    assert not Path(again.workdir).exists()
    workspaces.close()
    assert not workspaces.base.exists()


def test_local_exec_timeout_kills_the_process_group(tmp_path: Path) -> None:
    """At its timeout a program and the child it started are killed, and the run says so."""
    env = LocalEnvironment.create(tmp_path / "w", None)
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
        "time.sleep(120)\n"
    )
    done = env.exec([env.python, "-c", script], timeout=2)
    assert done.timed_out
    child = int(env.read_file("child.pid"))
    end = time.monotonic() + 10  # the kill is immediate; the zombie's reaping is not
    while time.monotonic() < end and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


# A plugin's environment: a folder of its own outside pytest's basetemp, programs started with
# subprocess.run (none of the local kind's code), every exec and teardown written to a log, and
# `{python}` a wrapper script of its own, so a placeholder that bypasses the seam shows.
RECORDING = """
import json, os, shutil, subprocess, sys, tempfile
from pathlib import Path

from pytest_agenteval import ExecResult

HERE = Path(__file__).parent
LOG = HERE / "env.log"
PYTHON = HERE / "fakepython"


def log(*entry):
    with LOG.open("a") as f:
        f.write(json.dumps(entry) + "\\n")


class Recording:
    def __init__(self, key, template):
        self.key = key.to_json()
        self.root = Path(tempfile.mkdtemp(prefix="fake-env-", dir=HERE / "envs")) / "w"
        if template is not None:
            shutil.copytree(template, self.root)
        else:
            self.root.mkdir()

    workdir = property(lambda self: str(self.root))
    python = str(PYTHON)
    local_path = property(lambda self: self.root)
    where = property(lambda self: "fake " + str(self.root))

    def exec(self, argv, input=None, timeout=None, env=None):
        log("exec", self.key, list(argv))
        done = subprocess.run(
            list(argv), cwd=self.root, input=input, capture_output=True, timeout=timeout,
            env={**os.environ, **(env or {})},
        )
        return ExecResult(done.returncode, done.stdout.decode(), done.stderr.decode(), False)

    def read_file(self, path):
        return (self.root / path).read_bytes()

    def write_file(self, path, data):
        (self.root / path).write_bytes(data)

    def changed_files(self):
        return []

    def teardown(self, keep):
        log("teardown", self.key, keep)


def pytest_agenteval_make_environment(task, key, template, dataset_root, config):
    return Recording(key, template)
"""


def _install_recording(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(RECORDING)
    (pytester.path / "envs").mkdir()
    wrapper = pytester.path / "fakepython"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)


def _log(pytester: pytest.Pytester) -> list[list[Any]]:
    path = pytester.path / "env.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _verdicts(pytester: pytest.Pytester) -> dict[tuple[str, int], str]:
    return {(t, a): status for t, a, status in stored(pytester.path)}


@pytest.mark.slow
def test_the_example_suite_gives_the_same_verdicts_through_a_plugin_environment(
    pytester: pytest.Pytester,
) -> None:
    """Through a plugin's recording environment the example suite's verdicts are the local
    folder's; its command grader ran through the seam, with the environment's `{python}`, and
    every environment made was torn down (kept exactly when its attempt did not pass)."""
    shutil.copytree(Path(__file__).parent.parent / "example_suite", pytester.path / "example_suite")
    pytester.runpytest_subprocess("--agenteval", "example_suite")
    local = _verdicts(pytester)
    shutil.rmtree(pytester.path / ".pytest_cache")
    _install_recording(pytester)
    pytester.runpytest_subprocess("--agenteval", "example_suite")
    assert _verdicts(pytester) == local and len(local) > 30
    log = _log(pytester)
    execs = [key for kind, key, argv in log if kind == "exec"]
    assert sorted(execs) == [["example", "coding/fix_add", i] for i in range(3)]
    graders = {tuple(argv[:3]) for kind, _, argv in log if kind == "exec"}
    assert graders == {(str(pytester.path / "fakepython"), "-m", "pytest")}
    kept = {(key[1], key[2]): keep for kind, key, keep in log if kind == "teardown"}
    assert sorted(kept) == [("coding/fix_add", i) for i in range(3)]
    assert all(keep == (local[attempt] != "pass") for attempt, keep in kept.items())


COMMAND_AGENT = """
import json, pathlib, sys
task = json.load(sys.stdin)
assert task["workspace"] == sys.argv[1]
pathlib.Path("answer.txt").write_text(task["input"])
print(task["input"])
"""


def test_command_agents_and_command_graders_run_in_the_attempt_environment(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A command agent and a command grader run through the attempt's environment: `{python}`
    and `{workspace}` are the environment's, the grader sees the agent's files, and the
    verdicts are the local folder's."""
    root = dataset(
        {
            "a.yaml": {
                "input": "right",
                "graders": [
                    {
                        "command": [
                            "{python}",
                            "-c",
                            "import sys; open('answer.txt').read() == 'right' or sys.exit(1)",
                        ]
                    }
                ],
            },
            "b.yaml": {
                "input": "wrong",
                "graders": [
                    {
                        "command": [
                            "{python}",
                            "-c",
                            "import sys; open('answer.txt').read() == 'right' or sys.exit(1)",
                        ]
                    }
                ],
            },
        },
        manifest={"agent": {"command": ["{python}", "{dataset}/agent.py", "{workspace}"]}},
    )
    (root / "agent.py").write_text(COMMAND_AGENT)
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1, failed=1)
    local = _verdicts(pytester)
    shutil.rmtree(pytester.path / ".pytest_cache")
    _install_recording(pytester)
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1, failed=1)
    assert _verdicts(pytester) == local == {("a", 0): "pass", ("b", 0): "fail"}
    fake = str(pytester.path / "fakepython")
    execs = [(key[1], argv[0], argv[1]) for kind, key, argv in _log(pytester) if kind == "exec"]
    assert Counter(execs) == Counter(
        [
            ("a", fake, str(root / "agent.py")),
            ("a", fake, "-c"),
            ("b", fake, str(root / "agent.py")),
            ("b", fake, "-c"),
        ]
    )
    agent = str(root / "agent.py")
    workdirs = [argv[2] for kind, _, argv in _log(pytester) if kind == "exec" and argv[1] == agent]
    assert len(workdirs) == 2 and all(
        w.startswith(str(pytester.path / "envs" / "fake-env-")) for w in workdirs
    )


def test_python_graders_get_the_environment(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A python grader can name `environment` and read the attempt's files through it, and
    `workspace` still gives the local folder."""
    root = dataset(
        {"a.yaml": {"input": "x", "workspace": "ws", "graders": [{"python": "checks:both"}]}},
        manifest={"agent": "agent:run"},
    )
    (root / "ws").mkdir()
    (root / "ws/seed.txt").write_text("from the template")
    (root / "agent.py").write_text(
        "def run(task):\n"
        "    task.environment.write_file('made.txt', b'by the agent')\n"
        "    return (task.workspace / 'seed.txt').read_text()\n"
    )
    (root / "checks.py").write_text(
        "def both(output, environment, workspace):\n"
        "    made = environment.read_file('made.txt').decode()\n"
        "    assert str(workspace) == environment.workdir\n"
        "    return made == 'by the agent' and output == 'from the template'\n"
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)


def test_an_isolated_agent_s_folder_is_adopted_kept_on_failure_and_removed_on_pass(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Under --agenteval-isolate the folder a forked agent made is the attempt's environment:
    its grader reads it, a failed attempt keeps and names it, a passed one's is removed."""
    root = dataset(
        {"a.yaml": {"input": "x", "graders": [{"python": "checks:made"}]}},
        manifest={"agent": "agent:run"},
    )
    (root / "agent.py").write_text(
        "def run(task):\n"
        "    (task.workspace / 'made.txt').write_text(str(task.attempt))\n"
        "    return 'done'\n"
    )
    (root / "checks.py").write_text(
        "def made(environment):\n    return environment.read_file('made.txt') == b'1'\n"
    )
    base = pytester.path / "tmp"
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--attempts", "2", "--agenteval-isolate", "--basetemp", str(base)
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["workspace kept: *tmp/agenteval/ds--a--0-*"])
    assert [p.name[:9] for p in base.glob("agenteval/*")] == ["ds--a--0-"]


def test_a_plugin_environment_that_is_not_one_errors_the_attempt_and_says_why(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A `pytest_agenteval_make_environment` answer that is not an Environment makes the
    attempt an error naming the hook and what an environment has, not a crash later."""
    (pytester.path / "ds/ws").mkdir(parents=True)
    dataset({"a.yaml": {**task(), "workspace": "ws"}})
    pytester.makeconftest(
        "def pytest_agenteval_make_environment(task, key, template, dataset_root, config):\n"
        "    return str(template)\n"
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*error: pytest_agenteval_make_environment returned str, not an Environment*"]
    )
