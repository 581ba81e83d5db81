"""A sandbox kind from a plugin (tests/kind_plugin.py, registered by a conftest.py) runs what a
Docker sandbox runs: command agents, the `command` grader, Python agents through
`task.environment`, artifacts, `--agenteval-isolate` and xdist workers; a task naming an
unknown kind, or bad options of its kind, is an error at its file's line; an environment
that cannot be had is an infrastructure error; the kind's orphans are swept by the next
session."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from helpers import WORKERS, DatasetMaker, latest_record, latest_run, run_layout, stored

KIND_PLUGIN = Path(__file__).parent / "kind_plugin.py"

AGENT = """
import json, os, pathlib, sys
task = json.load(sys.stdin)
assert task["workspace"] == os.getcwd() == sys.argv[1], (task["workspace"], os.getcwd())
assert os.environ["GREETING"] == "hi"
pathlib.Path("answer.txt").write_text(task["input"])
print(task["input"])
"""

GRADER = ["{python}", "-c", "import sys; open('answer.txt').read() == 'right' or sys.exit(1)"]

PYTHON_AGENT = """
def run(task):
    env = task.environment
    assert env.local_path is None
    seed = env.read_file("seed.txt").decode()
    env.write_file("answer.txt", task.input)
    done = env.exec([env.python, "-c", "print(open('answer.txt').read())"])
    assert done.returncode == 0 and not done.timed_out, done
    return done.stdout.strip() + "/" + seed
"""


def _install(pytester: pytest.Pytester, max_alive: int | None = None) -> None:
    from kind_plugin import CONFTEST

    (pytester.path / "kind_plugin.py").write_text(KIND_PLUGIN.read_text())
    pytester.makeconftest(CONFTEST.replace("MAX_ALIVE = None", f"MAX_ALIVE = {max_alive}"))


def _log(pytester: pytest.Pytester) -> list[list[Any]]:
    path = pytester.path / "private" / "kind.log"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _dataset(dataset: DatasetMaker, agent: Any, sandbox: dict[str, Any]) -> Path:
    root = dataset(
        {
            "a.yaml": {"input": "right", "workspace": "ws", "graders": [{"command": GRADER}]},
            "b.yaml": {"input": "wrong", "workspace": "ws", "graders": [{"command": GRADER}]},
        },
        manifest={"agent": agent, "defaults": {"sandbox": sandbox}},
    )
    (root / "ws").mkdir()
    (root / "ws/seed.txt").write_text("seed")
    return root


def _artifacts(root: Path, task_id: str) -> dict[str, bytes]:
    folder = root / ".pytest_cache/agenteval/runs" / latest_run(root) / "artifacts/ds"
    folder /= f"{task_id}[attempt-0]"
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")}


@pytest.mark.parametrize("workers", WORKERS)
def test_a_plugin_kind_runs_command_agents_and_graders_and_keeps_artifacts(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """The command agent and the command grader run in the kind's private folder (its
    `{workspace}`, `{python}` and `env:`); the record names the kind and what it described;
    the changed files are kept; every process started and ended the kind, and every folder
    it made was torn down."""
    _install(pytester)
    agent = {"command": ["{python}", "{dataset}/agent.py", "{workspace}"]}
    root = _dataset(dataset, agent, {"folder": {"label": "t1"}, "env": {"GREETING": "hi"}})
    (root / "agent.py").write_text(AGENT)
    result = run_layout(pytester, "--agenteval", "ds", *workers)
    result.assert_outcomes(passed=1, failed=1)
    assert stored(pytester.path) == [("a", 0, "pass"), ("b", 0, "fail")]
    record = latest_record(pytester.path, "a", 0)
    assert record["sandbox"]["kind"] == "folder" and record["sandbox"]["label"] == "t1"
    assert "image" not in record
    assert [f["path"] for f in record["changed_files"]] == ["answer.txt"]
    assert _artifacts(pytester.path, "a") == {"answer.txt": b"right"}
    log = _log(pytester)
    made = Counter(entry[1][1] for entry in log if entry[0] == "create")
    torn = Counter(entry[1][1] for entry in log if entry[0] == "teardown")
    assert made == torn == {"a": 1, "b": 1}
    execs = [entry for entry in log if entry[0] == "exec"]
    assert {(e[1][1], e[2][1]) for e in execs} == {
        (t, what) for t in "ab" for what in (str(root / "agent.py"), "-c")
    }
    starts = {entry[-1] for entry in log if entry[0] == "start"}
    ends = {entry[-1] for entry in log if entry[0] == "end"}
    assert starts == ends and len(starts) == (2 if workers else 1)
    assert list((pytester.path / "private/box").iterdir()) == []


@pytest.mark.parametrize("isolate", [[], ["--agenteval-isolate"]], ids=["in-process", "isolate"])
def test_a_python_agent_works_through_task_environment(
    pytester: pytest.Pytester, dataset: DatasetMaker, isolate: list[str]
) -> None:
    """A Python agent gets no local path, only `task.environment`, and reads, writes and
    runs there (also in a forked child under `--agenteval-isolate`, under a bound of 2
    alive, whose slots the dispatch holds)."""
    _install(pytester, max_alive=2 if isolate else None)
    root = _dataset(dataset, "pyagent:run", {"folder": {}, "env": {}})
    (root / "pyagent.py").write_text(PYTHON_AGENT)
    ahead = [] if isolate else ["--agenteval-concurrency", "2"]  # unbounded: made ahead
    result = pytester.runpytest_subprocess("--agenteval", "ds", *ahead, *isolate)
    result.assert_outcomes(passed=1, failed=1)
    record = latest_record(pytester.path, "a", 0)
    assert record["output"] == "right/seed"
    assert record["sandbox"]["kind"] == "folder" and record["sandbox"]["label"] == "private"
    assert _artifacts(pytester.path, "a") == {"answer.txt": b"right"}


def test_an_unknown_kind_and_bad_options_are_errors_at_their_line(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A kind no plugin registered, and options its model refuses, are reported at the
    task file's line and field, with a hint; no traceback of ours."""
    _install(pytester)
    root = dataset({})
    (root / "unknown.yaml").write_text("input: x\nexpected: x\nsandbox:\n  foldr:\n    label: x\n")
    (root / "typo.yaml").write_text("input: x\nexpected: x\nsandbox:\n  folder:\n    labl: x\n")
    (root / "bad.yaml").write_text("input: x\nexpected: x\nsandbox:\n  folder:\n    fail: now\n")
    result = pytester.runpytest_subprocess("--agenteval", "ds")
    text = result.stdout.str()
    assert "unknown.yaml:5: at sandbox.foldr: unknown sandbox kind 'foldr'" in text
    assert "did you mean 'folder'?" in text
    assert "typo.yaml:5: at sandbox.folder.labl: unknown key 'labl'" in text
    assert "bad.yaml:5: at sandbox.folder.fail:" in text
    assert "Traceback" not in text + result.stderr.str()


@pytest.mark.parametrize(("phase", "error_type"), [("build", "build_failed"), ("start", None)])
def test_an_environment_that_cannot_be_had_is_an_infrastructure_error(
    pytester: pytest.Pytester, dataset: DatasetMaker, phase: str, error_type: str | None
) -> None:
    """A kind raising EnvironmentUnavailable errs the attempt in its phase, before any agent
    call, and a resume runs it again."""
    _install(pytester)
    root = _dataset(dataset, "pyagent:run", {"folder": {"fail": phase}})
    (root / "pyagent.py").write_text(PYTHON_AGENT)
    pytester.runpytest_subprocess("--agenteval", "ds")
    record = latest_record(pytester.path, "a", 0)
    assert record["status"] == "error"
    assert record["error_type"] == (error_type or "sandbox_error")
    assert record["phase"] == ("build" if phase == "build" else "sandbox")
    assert "asked to fail" in record["error"]
    again = pytester.runpytest_subprocess("--agenteval", "ds", "--resume-suite")
    creates = [entry for entry in _log(pytester) if entry[0] == "create"]
    assert len(creates) == 4, again.stdout.str()  # both tasks, both sessions


def test_the_kind_s_bound_and_the_next_session_s_orphan_sweep(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`--agenteval-max-sandboxes` above the kind's maximum is held to it (2); a private
    folder a gone session left is removed by the next session's start, which says so."""
    _install(pytester, max_alive=2)
    root = _dataset(dataset, "pyagent:run", {"folder": {}})
    (root / "pyagent.py").write_text(PYTHON_AGENT)
    orphan = pytester.path / "private/box/agenteval-1-x-orphan"
    orphan.mkdir(parents=True)
    (orphan / "session").write_text(f"{socket.gethostname()}/999999999/1")
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-max-sandboxes", "5", "--agenteval-concurrency", "4"
    )
    result.assert_outcomes(passed=1, failed=1)
    assert "agenteval: removed 1 private folders of gone sessions" in result.stdout.str()
    assert not orphan.exists()
    starts = [entry for entry in _log(pytester) if entry[0] == "start"]
    assert [entry[3] for entry in starts] == [2]


def test_a_docker_sandbox_dumps_as_before_kinds_and_a_plugin_s_as_written() -> None:
    """The `docker:` form dumps exactly as before kinds (its task digests stay), a plugin's
    kind as `KIND: {options}`, and each reads back as itself."""
    from pytest_agenteval.core.model import SandboxSpec

    docker = SandboxSpec.model_validate({"docker": {"image": "x"}, "memory": "2g"})
    digested: dict[str, Any] = {"environment": True, "docker": {"hosts"}}  # as digests read it
    assert docker.model_dump(mode="json", exclude=digested) == {
        "docker": {"image": "x", "build": None},
        "workdir": "/workspace",
        "network": "none",
        "cpus": None,
        "memory": "2g",
        "pids_limit": 256,
        "user": None,
        "env": {},
    }
    folder = SandboxSpec.model_validate({"folder": {"label": "a"}, "env": {"A": "1"}})
    dumped = folder.model_dump(mode="json")
    assert dumped["folder"] == {"label": "a"} and "plugin" not in dumped
    assert SandboxSpec.model_validate(dumped) == folder and folder.kind == "folder"
    assert docker.kind == "docker" and docker.kind_options == {"image": "x"}


def test_a_record_from_before_kinds_keeps_its_image_and_shows_it() -> None:
    """A format /1 record that names its Docker image in `image` reads as it is, and `show`
    says its image as it says a new record's `sandbox`."""
    from pytest_agenteval.core.records import AttemptRecord
    from pytest_agenteval.reporting.show import _sandbox_lines

    old = {
        **{"schema": "agenteval.record/1", "dataset": "ds", "task_id": "a", "attempt": 0},
        **{"digest": "d", "run_digest": "r", "agent": {}, "status": "pass"},
        **{"duration": 1.0, "started_at": 0.0, "image": "sha256:abc"},
    }
    record = AttemptRecord.from_json(old)
    assert record.image == "sha256:abc" and record.sandbox is None
    assert _sandbox_lines(record) == ["sandbox image sha256:abc"]
    new = AttemptRecord.from_json(
        {**old, "image": None, "sandbox": {"kind": "docker", "image": "sha256:abc"}}
    )
    assert _sandbox_lines(new) == ["sandbox image sha256:abc"]
    assert new.to_json()["sandbox"] == {"kind": "docker", "image": "sha256:abc"}
    folder = AttemptRecord.from_json({**old, "image": None, "sandbox": {"kind": "folder"}})
    assert _sandbox_lines(folder) == ["sandbox folder"]


def test_a_kind_that_is_not_one_is_a_usage_error_naming_who_gave_it(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A hook returning something that is not an EnvironmentKind stops the session at
    configure with a line naming the hook's plugin, never a traceback."""
    pytester.makeconftest("def pytest_agenteval_environment_kinds():\n    return [object()]\n")
    dataset({"a.yaml": {"input": "x", "expected": "x"}})
    result = pytester.runpytest_subprocess("--agenteval", "ds")
    text = result.stdout.str() + result.stderr.str()
    assert "pytest_agenteval_environment_kinds of" in text and "conftest.py" in text
    assert "gave object, not a pytest_agenteval.EnvironmentKind" in text
    assert "Traceback" not in text and result.ret != 0


def _entry_point(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kind installed as a package would be: a dist-info naming it in the entry point
    group, on the path of every process started from here."""
    site = pytester.path / "site"
    info = site / "folder_kind-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: folder-kind\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[pytest_agenteval.environment_kinds]\nfolder = kind_plugin:entry_kind\n"
    )
    (site / "kind_plugin.py").write_text(KIND_PLUGIN.read_text())
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("KIND_ROOT", str(pytester.path / "private"))


def test_an_entry_point_kind_runs_and_agenteval_repair_sweeps_its_orphans(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kind an installed package names in `pytest_agenteval.environment_kinds` needs no
    conftest.py, and `agenteval repair` sweeps what gone sessions of it left."""
    _entry_point(pytester, monkeypatch)
    root = _dataset(dataset, "pyagent:run", {"folder": {"label": "ep"}})
    (root / "pyagent.py").write_text(PYTHON_AGENT)
    pytester.runpytest_subprocess("--agenteval", "ds").assert_outcomes(passed=1, failed=1)
    assert latest_record(pytester.path, "a", 0)["sandbox"]["label"] == "ep"
    orphan = pytester.path / "private/box/agenteval-1-x-orphan"
    orphan.mkdir()
    (orphan / "session").write_text(f"{socket.gethostname()}/999999999/1")
    repair = subprocess.run(
        [sys.executable, "-m", "pytest_agenteval.cli", "repair", latest_run(pytester.path)],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "removed 1 private folders of gone sessions" in repair.stdout, repair
    assert not orphan.exists()
