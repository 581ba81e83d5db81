"""The Docker sandbox, against the real daemon: each attempt in a fresh container with no
network and bounded memory, its command agent and command graders inside, nothing left
running. Skipped when no daemon answers, except under `CI=true`, where that fails."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemons import Daemon, build_busybox, own_daemon
from helpers import (
    WORKERS,
    DatasetMaker,
    default_sigint,
    latest_record,
    latest_run,
    sampling,
    stored,
    summary_of,
)
from pytest_agenteval import ExecResult
from pytest_agenteval.cli import main
from pytest_agenteval.core.environment import ChangedFile, Environment
from pytest_agenteval.core.model import DockerImage, SandboxSpec
from pytest_agenteval.execution.docker import (
    LABEL,
    RUN_LABEL,
    DockerEnvironment,
    DockerSession,
    remove_orphans,
)
from pytest_agenteval.execution.docker_cli import SandboxUnavailable
from pytest_agenteval.execution.sandboxes import BuildFailed, session_label

IMAGE = "agenteval-test-busybox:1"
"""A test image `FROM scratch` holding Debian's busybox-static (no registry is reachable)."""


def _daemon_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The busybox test image, built once (a no-op when it exists)."""
    return busybox_image(tmp_path_factory)


def busybox_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Build the busybox test image (a no-op when it exists); skip, or fail under `CI=true`,
    when no daemon answers."""
    busybox = shutil.which("busybox")
    if not _daemon_answers() or busybox is None:
        why = "no Docker daemon answers" if busybox else "busybox-static is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}: under CI=true the sandbox tests must run (.ci/run starts one)")
        pytest.skip(f"{why} (`.ci/run` installs docker.io and busybox-static, starts dockerd)")
    folder = tmp_path_factory.mktemp("busybox-image")
    shutil.copy(busybox, folder / "busybox")
    (folder / "Dockerfile").write_text(
        'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\n'
    )
    subprocess.run(["docker", "build", "-q", "-t", IMAGE, str(folder)], check=True)
    return IMAGE


@pytest.fixture
def environment(image: str, tmp_path: Path) -> Iterator[DockerEnvironment]:
    """One sandbox of the test image holding a small template."""
    template = tmp_path / "template"
    (template / "src").mkdir(parents=True)
    (template / "src/calc.txt").write_text("1 + 1 = 3\n")
    (template / "gone.txt").write_text("to delete\n")
    made = DockerEnvironment(
        SandboxSpec(docker=DockerImage(image=image), memory="64m", cpus=1.5, env={"FROM": "spec"}),
        f"agenteval-test-{os.getpid()}-{tmp_path.name}",
        template,
        DockerSession(),
    )
    yield made
    made.teardown(keep=False)


def _containers(name: str, by: str = "name", host: str | None = None) -> list[str]:
    """The containers (running or not) whose `by` (name, or `label`: `key` or `key=value`)
    matches `name`, on the daemon `host` (None: the default one)."""
    on = ["--host", host] if host is not None else []
    listed = subprocess.run(
        ["docker", *on, "ps", "-a", "--filter", f"{by}={name}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A dockerd of this module's own holding the busybox test image: orphans planted there
    are out of reach of the sweeps of the sessions other tests (and other users of the
    shared daemon) run at the same time, which would remove them first."""
    if not _daemon_answers():
        pytest.skip("no Docker daemon answers")
    daemon = own_daemon()
    try:
        build_busybox(daemon, tmp_path_factory.mktemp("private-image"), IMAGE)
        yield daemon
    finally:
        daemon.close()


@pytest.fixture
def only_private(
    private: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Daemon]:
    """This process's default daemon is the private one, and its machine folder (the slot
    files, the daemons earlier sessions used) is the test's own, so a sweep here reaches
    no other daemon."""
    folder = tmp_path / "machine"
    folder.mkdir()
    monkeypatch.setenv("DOCKER_HOST", private.host)
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr("tempfile.tempdir", str(folder))
    yield private


def _built() -> set[str]:
    """The images built from `build:` folders: tag and id."""
    listed = subprocess.run(
        [
            "docker",
            "images",
            "--filter",
            "reference=agenteval-build",
            "--format",
            "{{.Tag}} {{.ID}}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(listed.stdout.split("\n"))


def _sandboxed(image: str, **fields: object) -> dict[str, object]:
    return {"docker": {"image": image}, **fields}


def test_a_sandbox_runs_programs_reads_writes_and_lists_changes(
    environment: DockerEnvironment,
) -> None:
    """A sandbox holds a copy of the template at its workdir; programs run there with stdin
    and variables; files are read and written below it; changes are listed against the
    template; a path out of the workdir is refused; a program that is not there cannot
    start."""
    assert isinstance(environment, Environment) and environment.local_path is None
    done = environment.exec(
        ["sh", "-c", 'pwd; cat; echo "$WHO $FROM"; rm gone.txt; echo 2 > src/calc.txt'],
        input=b"from stdin\n",
        env={"WHO": "agent"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["/workspace", "from stdin", "agent spec"]
    environment.write_file("notes/new.txt", b"hello")
    assert environment.read_file("/workspace/notes/new.txt") == b"hello"
    assert environment.read_file("src/calc.txt") == b"2\n"
    assert environment.changed_files() == [
        ChangedFile("gone.txt", "deleted", 0),
        ChangedFile("notes/new.txt", "added", 5),
        ChangedFile("src/calc.txt", "modified", 2),
    ]
    with pytest.raises(PermissionError):
        environment.read_file("../etc/passwd")
    with pytest.raises(PermissionError, match="outside the attempt's workspace"):
        environment.write_file("/etc/passwd", b"root::0:0::/:/bin/sh\n")
    with pytest.raises(OSError, match=r"src/calc\.txt/under"):
        environment.write_file("src/calc.txt/under", b"a file is no folder")
    with pytest.raises(OSError, match="no-such-program"):
        environment.exec(["no-such-program"])
    assert _inspect(environment.name, "{{.HostConfig.NanoCpus}}") == "1500000000"


def test_a_container_stopped_under_the_attempt_is_a_lost_sandbox(
    environment: DockerEnvironment,
) -> None:
    """When the container is gone from under a program (killed outside the plugin), the
    program's exit is not taken for its own: the sandbox is lost, said, and stays lost."""
    subprocess.run(["docker", "kill", environment.name], capture_output=True, check=True)
    with pytest.raises(SandboxUnavailable, match="stopped under the attempt") as lost:
        environment.exec(["true"])
    assert lost.value.detail
    with pytest.raises(OSError, match="its container stopped under the attempt"):
        environment.exec(["true"])


@pytest.mark.slow
def test_a_sandbox_writes_text_as_utf8_and_answers_with_an_exec_result(
    environment: DockerEnvironment,
) -> None:
    """In a container too, `write_file` takes a str (written as UTF-8) or bytes, and `exec`
    answers with the public `ExecResult`."""
    environment.write_file("deep/text.txt", "café ☕\n")
    environment.write_file("raw.bin", b"\xff\x00")
    assert environment.read_file("deep/text.txt") == "café ☕\n".encode()
    assert environment.read_file("raw.bin") == b"\xff\x00"
    done = environment.exec(["cat", "deep/text.txt"])
    assert isinstance(done, ExecResult)
    assert done == ExecResult(0, "café ☕\n", "", False)


def test_a_numeric_user_runs_the_programs_and_owns_the_workspace(
    image: str, tmp_path: Path
) -> None:
    """With `user: "1000:1000"` programs run as that user and the workspace copy is theirs,
    so the agent can write into it."""
    (tmp_path / "seed.txt").write_text("seed")
    spec = SandboxSpec(docker=DockerImage(image=image), user="1000:1000")
    session = DockerSession()
    sandbox = DockerEnvironment(spec, f"agenteval-test-user-{os.getpid()}", tmp_path, session)
    try:
        done = sandbox.exec(["sh", "-c", "id -u; stat -c %u seed.txt; echo x > new.txt"])
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["1000", "1000"]
    finally:
        sandbox.teardown(keep=False)
        session.wait()


def test_the_network_is_off_inside(environment: DockerEnvironment) -> None:
    """With the default `network: none` the container is made without a network and has
    loopback only, so a connection to another address fails."""
    assert _inspect(environment.name, "{{.HostConfig.NetworkMode}}") == "none"
    assert environment.exec(["ls", "/sys/class/net"]).stdout.split() == ["lo"]
    out = environment.exec(["nc", "-w", "3", "10.0.0.1", "80"], input=b"", timeout=30)
    assert out.returncode != 0 and "Network is unreachable" in out.stderr


@pytest.mark.slow
def test_a_program_over_the_memory_limit_is_killed(environment: DockerEnvironment) -> None:
    """A program that allocates past `memory:` (64m here) is killed by the kernel, and the
    result says it ran out of memory."""
    hog = environment.exec(["sh", "-c", "x=$(yes | head -c 200000000); echo survived"])
    assert hog.returncode == 137 and not hog.timed_out and "survived" not in hog.stdout


def test_a_timeout_kills_the_container_and_its_program(
    environment: DockerEnvironment,
) -> None:
    """At its timeout a program is killed with its container: nothing keeps running, and the
    sandbox refuses later programs."""
    done = environment.exec(["sleep", "600"], timeout=1)
    assert done.timed_out
    running = subprocess.run(
        ["docker", "inspect", "--format", "{{.State.Running}}", environment.name],
        capture_output=True,
        text=True,
    )
    assert running.stdout.strip() == "false"
    with pytest.raises(OSError, match="killed at the timeout"):
        environment.exec(["true"])


def test_a_missing_image_is_a_clear_error_said_once(image: str) -> None:
    """An image that is not present and cannot be pulled is a `build_failed` error naming
    it and what to do; a second attempt gets the same error without trying again, its story
    not told twice."""
    session = DockerSession()
    spec = SandboxSpec(docker=DockerImage(image="agenteval-test-absent:none"))
    with pytest.raises(BuildFailed) as first:
        DockerEnvironment(spec, f"agenteval-test-absent-{os.getpid()}", None, session)
    assert "sandbox build: the image 'agenteval-test-absent:none' is not present" in str(
        first.value
    )
    assert "docker build" in first.value.detail
    with pytest.raises(BuildFailed) as second:
        DockerEnvironment(spec, f"agenteval-test-absent-{os.getpid()}", None, session)
    assert second.value.message == first.value.message and isinstance(first.value, BuildFailed)
    assert second.value.error_type == "build_failed" and "docker build" not in second.value.detail


def test_a_daemon_that_does_not_answer_is_a_clear_error(
    image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When no Docker daemon answers, making a sandbox says so and what to do."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    spec = SandboxSpec(docker=DockerImage(image=image))
    with pytest.raises(SandboxUnavailable, match="the Docker daemon is not running") as raised:
        DockerEnvironment(spec, "agenteval-test-nodaemon", None, DockerSession())
    assert "dockerd" in raised.value.detail


def test_command_agent_and_grader_share_one_container_and_leave_none(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """A command agent writes into the sandbox's workspace and a command grader in the same
    container sees the file; `{workspace}` is the workdir; after the run no container of the
    session is left."""
    grader = {"command": ["sh", "-c", 'test "$(cat answer.txt)" = right']}
    root = dataset(
        {
            "a.yaml": {"input": "right", "workspace": "ws", "graders": [grader]},
            "b.yaml": {"input": "wrong", "graders": [grader]},
        },
        manifest={
            "agent": {
                "command": ["sh", "-c", 'cd {workspace} && echo -n "$0" > answer.txt', "{input}"]
            },
            "defaults": {"sandbox": _sandboxed(image)},
        },
    )
    (root / "ws").mkdir()
    (root / "ws/seed.txt").write_text("seed")
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, failed=1)
    assert "workspace kept" not in result.stdout.str()  # the failed attempt's is gone too
    assert _containers(f"agenteval-{os.getpid()}-") == []  # the run was in this process
    assert latest_record(pytester.path, "a", 0)["status"] == "pass"


def test_a_python_agent_and_grader_act_inside_the_container(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """A Python agent runs programs and writes files in its attempt's container through
    `task.environment`, a python grader reads them there, and `task.workspace` says that
    the files are not on this machine."""
    root = dataset(
        {"a.yaml": {"input": "x", "graders": [{"python": "checks:made"}]}},
        manifest={"agent": "agent:run", "defaults": {"sandbox": _sandboxed(image)}},
    )
    (root / "agent.py").write_text(
        "def run(task):\n"
        "    box = task.environment\n"
        "    box.write_file('in.txt', b'hello')\n"
        "    done = box.exec(['sh', '-c', 'tr a-z A-Z < in.txt > out.txt; hostname'])\n"
        "    assert done.returncode == 0, done.stderr\n"
        "    try:\n"
        "        task.workspace\n"
        "    except Exception as exc:\n"
        "        return str(exc)\n"
        "    return 'a host folder'\n"
    )
    (root / "checks.py").write_text(
        "def made(output, environment):\n"
        "    assert 'not on this machine' in output, output\n"
        "    return environment.read_file('out.txt') == b'HELLO'\n"
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)


def test_an_interrupted_session_removes_the_containers_it_made(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """Ctrl-C in the middle of an attempt (its container made, its outcome never known)
    still leaves no container of the session once the session ends."""
    dataset(
        {"a.yaml": {"input": "x", "expected": "x"}},
        manifest={"agent": "agent:run", "defaults": {"sandbox": _sandboxed(image)}},
    )
    (pytester.path / "ds/agent.py").write_text(
        "def run(task):\n"
        "    task.environment.write_file('started', b'')\n"
        "    raise KeyboardInterrupt\n"
    )
    result = pytester.runpytest("--agenteval", "ds", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert _containers(f"agenteval-{os.getpid()}-") == []  # the run was in this process


def test_a_missing_image_errors_each_attempt_and_the_others_run(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """A task whose image is missing errs in phase `build` (`build_failed`), its story told
    once on the terminal; a task without a sandbox runs on the host as before."""
    dataset(
        {
            "boxed.yaml": {
                "input": "x",
                "expected": "x",
                "sandbox": _sandboxed("agenteval-test-absent:none"),
            },
            "host.yaml": {"input": "ok", "expected": "ok"},
        },
        manifest={"agent": {"command": ["echo", "-n", "{input}"]}},
    )
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "2")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(["*sandbox build: the image 'agenteval-test-absent:none'*"])
    assert result.stdout.str().count("docker build -t agenteval-test-absent:none") == 1
    for attempt in (0, 1):
        record = latest_record(pytester.path, "boxed", attempt)
        assert (record["error_type"], record["phase"]) == ("build_failed", "build")


@pytest.mark.slow
def test_the_next_session_removes_the_containers_of_a_dead_one(
    only_private: Daemon, tmp_path: Path
) -> None:
    """A session killed with SIGKILL leaves its container running; the next session's first
    sandbox removes it (its pid is gone), and leaves a live session's alone (on a daemon of
    the test's own: no other session's sweep takes the orphan first)."""
    image = IMAGE
    script = tmp_path / "session.py"
    script.write_text(
        "import sys, time\n"
        "from pytest_agenteval.core.model import DockerImage, SandboxSpec\n"
        "from pytest_agenteval.execution.docker import DockerEnvironment, DockerSession\n"
        f"spec = SandboxSpec(docker=DockerImage(image={image!r}))\n"
        "DockerEnvironment(spec, sys.argv[1], None, DockerSession())\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    name = f"agenteval-test-orphan-{os.getpid()}"
    session = subprocess.Popen(
        [sys.executable, str(script), name], stdout=subprocess.PIPE, preexec_fn=default_sigint
    )
    try:
        assert session.stdout is not None and session.stdout.readline() == b"ready\n"
        assert name not in remove_orphans().names and _containers(name) == [name]
    finally:
        session.kill()
        session.wait(timeout=30)
    deadline = time.monotonic() + 30  # hang guard
    while not remove_orphans().names and time.monotonic() < deadline:
        pass
    assert _containers(name) == []
    labelled = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert name not in labelled.stdout.split()


@pytest.mark.slow
def test_a_build_folder_is_built_once_tagged_by_its_digest_and_a_failed_build_says_so(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """A `build:` folder becomes an image tagged by the folder's content digest, which later
    runs reuse; a Dockerfile that does not build makes that task's attempts `sandbox build`
    errors with the build log's tail, and the other tasks run."""
    command = ["sh", "-c", "cat /etc/made-by-build"]
    root = dataset(
        {
            "good.yaml": {
                "input": "x",
                "expected": "built",
                "sandbox": {"docker": {"build": "img"}},
            },
            "bad.yaml": {"input": "x", "expected": "x", "sandbox": {"docker": {"build": "broken"}}},
        },
        manifest={"agent": {"command": command}},
    )
    (root / "img").mkdir()
    shutil.copy(str(shutil.which("busybox")), root / "img/busybox")
    (root / "img/Dockerfile").write_text(
        "FROM scratch\nCOPY busybox /bin/busybox\n"
        'RUN ["/bin/busybox", "--install", "-s", "/bin"]\n'
        'RUN ["/bin/sh", "-c", "echo -n built > /etc/made-by-build"]\n'
    )
    (root / "broken").mkdir()
    (root / "broken/Dockerfile").write_text('FROM scratch\nRUN ["/bin/no-such-program"]\n')
    first = pytester.runpytest("--agenteval", "ds")
    first.assert_outcomes(passed=1, errors=1)
    first.stdout.fnmatch_lines(["*sandbox build: building the image of*broken failed*"])
    built = _built()
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1, errors=1)
    assert _built() == built, "the same folder is the same image: not built again"
    (root / "img/Dockerfile").write_text(
        (root / "img/Dockerfile").read_text() + f"# {time.time_ns()}\n"
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1, errors=1)
    assert built < _built(), "a changed folder is a new digest, so a new image"


@pytest.mark.slow
def test_sandboxes_under_xdist_workers_with_concurrency(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """Two xdist workers with two attempts in flight each run every attempt in a container
    of its own, and leave none behind."""
    tasks = {f"xdist{i}.yaml": {"input": f"n{i}", "expected": f"n{i}"} for i in range(4)}
    dataset(
        tasks,
        manifest={
            "agent": {"command": ["sh", "-c", 'echo -n "$0" > mine && cat mine', "{input}"]},
            "defaults": {"sandbox": _sandboxed(image)},
        },
    )
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "-n", "2", "--agenteval-concurrency", "2", "--attempts", "2"
    )
    result.assert_outcomes(passed=8)
    assert _containers("-ds--xdist") == []


def _labelled(label: str) -> list[str]:
    """The containers (running or not) carrying `label` (`name` or `name=value`)."""
    return _containers(label, by="label")


def _alive_sampled(
    run_id: str, host: str | None = None
) -> contextlib.AbstractContextManager[list[int]]:
    """How many containers of the run `run_id` exist on `host`, sampled from a thread over
    and over while the block runs."""
    return sampling(lambda: len(_containers(f"{RUN_LABEL}={run_id}", by="label", host=host)))


def _inspect(name: str, template: str) -> str:
    done = subprocess.run(
        ["docker", "inspect", "--format", template, name], capture_output=True, text=True
    )
    return done.stdout.strip()


def _records_per_key(root: Path, run_id: str) -> Counter[tuple[str, int]]:
    lines = (root / f".pytest_cache/agenteval/runs/{run_id}/records.jsonl").read_text()
    return Counter((r["task_id"], r["attempt"]) for r in map(json.loads, lines.splitlines()))


@pytest.mark.slow
@pytest.mark.parametrize("workers", WORKERS)
def test_a_killed_session_leaves_an_orphan_that_the_resume_removes(
    pytester: pytest.Pytester, dataset: DatasetMaker, only_private: Daemon, workers: list[str]
) -> None:
    """kill -9 of the session while a sandboxed attempt runs leaves its container, labelled
    with the run; `--resume-suite` removes it, runs that attempt again, and records every
    attempt exactly once (on a daemon of the test's own: no concurrent sweep takes the
    orphan before the resume)."""
    image = IMAGE
    root = dataset(
        {
            "fast.yaml": {"input": "a", "expected": "a"},
            "slow.yaml": {"input": "b", "expected": "b"},
        },
        manifest={"agent": "boxed:run", "defaults": {"sandbox": _sandboxed(image)}},
    )
    (root / "boxed.py").write_text(
        "import pathlib\n"
        "def run(task):\n"
        "    box = task.environment\n"
        "    if task.id == 'slow' and pathlib.Path(__file__).with_name('hold').exists():\n"
        "        box.exec(['sleep', '600'])\n"
        "    return task.input\n"
    )
    (root / "hold").touch()
    run_id = f"orphan{os.getpid()}{len(workers)}"
    session = pytester.popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "--agenteval",
            "ds",
            "--agenteval-run-id",
            run_id,
            *workers,
        ],
        stdin=None,  # type: ignore[arg-type]
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    deadline = time.monotonic() + 120  # hang guard
    slow: list[str] = []
    while not (slow and stored(pytester.path)) and time.monotonic() < deadline:
        slow = [n for n in _labelled(f"{RUN_LABEL}={run_id}") if "-ds--slow--" in n]
        time.sleep(0.1)
    (orphan,) = slow
    os.killpg(session.pid, signal.SIGKILL)
    session.wait(30)
    assert _inspect(orphan, "{{.State.Running}}") == "true", "the orphan is left running"
    (root / "hold").unlink()
    resumed = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-run-id", run_id, "--resume-suite", *workers
    )
    resumed.assert_outcomes(passed=2)
    assert _labelled(f"{RUN_LABEL}={run_id}") == []
    assert _records_per_key(pytester.path, run_id) == {("fast", 0): 1, ("slow", 0): 1}


def test_repair_removes_the_sandboxes_of_gone_sessions(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    only_private: Daemon,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`agenteval repair` removes the containers whose session is gone, says how many and
    whose (`removed 1 sandbox container of a session that is gone (pid N on host H)`), and
    leaves a live session's alone (planted on a daemon of the test's own, out of reach of
    the sweeps concurrent sessions make)."""
    image = IMAGE
    dataset(
        {"a.yaml": {"input": "x", "expected": "x"}},
        manifest={"agent": {"command": ["echo", "-n", "{input}"]}},
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    names = {}
    for who, pid in (("gone", int(gone)), ("live", os.getpid())):
        names[who] = f"agenteval-test-repair-{who}-{os.getpid()}"
        label = f"{LABEL}={session_label(pid)}"
        subprocess.run(
            [
                "docker",
                "run",
                "-d",
                "--name",
                names[who],
                "--label",
                label,
                "--network",
                "none",
                "--entrypoint",
                "sleep",
                image,
                "infinity",
            ],
            check=True,
            capture_output=True,
        )
    try:
        assert main(["repair", "latest"]) == 0
        said = capsys.readouterr().out
        said_line = re.search(
            rf"^removed 1 sandbox container of a session that is gone \(pid {gone} on host \S+\)$",
            said,
            re.M,
        )
        assert said_line is not None, said
        assert _containers(names["gone"]) == [] and _containers(names["live"]) == [names["live"]]
    finally:
        subprocess.run(["docker", "rm", "-f", *names.values()], capture_output=True)


@pytest.mark.parametrize(
    "how",
    [["--agenteval-keep-sandboxes", "failed"], ["-o", "agenteval_keep_sandboxes=failed"]],
    ids=["option", "ini"],
)
def test_kept_sandboxes_are_stopped_and_named_in_the_failure_report(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str, how: list[str]
) -> None:
    """With `--agenteval-keep-sandboxes failed` (or its ini twin) a failed attempt's container
    is kept, stopped, under the name its failure report gives; a passed one is removed."""
    dataset(
        {"good.yaml": {"input": "x", "expected": "x"}, "bad.yaml": {"input": "y", "expected": "x"}},
        manifest={
            "agent": {"command": ["sh", "-c", 'echo -n "$0" | tee answer.txt', "{input}"]},
            "defaults": {"sandbox": _sandboxed(image)},
        },
    )
    run_id = f"keep{os.getpid()}{len(how[0])}"
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", run_id, *how)
    result.assert_outcomes(passed=1, failed=1)
    kept = _labelled(f"{RUN_LABEL}={run_id}")
    try:
        assert len(kept) == 1 and kept[0].startswith("agenteval-kept-") and "--bad--" in kept[0]
        result.stdout.fnmatch_lines(
            [f"*workspace kept: docker container {kept[0]} (kept, stopped*"]
        )
        assert _inspect(kept[0], "{{.State.Running}}") == "false"
        copied = subprocess.run(
            ["docker", "cp", f"{kept[0]}:/workspace/answer.txt", "-"], capture_output=True
        )
        assert copied.returncode == 0 and b"answer.txt" in copied.stdout
        assert kept[0] not in remove_orphans().names, "a kept sandbox is no orphan"
    finally:
        subprocess.run(["docker", "rm", "-f", *kept], capture_output=True)


def test_keep_sandboxes_refuses_other_values(pytester: pytest.Pytester) -> None:
    """`--agenteval-keep-sandboxes` takes `failed` or `all` and says so otherwise."""
    result = pytester.runpytest("--agenteval-keep-sandboxes", "some")
    result.stderr.fnmatch_lines(["*'some' is not 'failed' or 'all'*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.slow
def test_max_sandboxes_bounds_the_containers_alive_across_workers(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str, own_slots: Path
) -> None:
    """`--agenteval-max-sandboxes 1` under two xdist workers with two attempts in flight each:
    never more than one container of the run exists at once (sampled from a thread)."""
    tasks = {f"m{i}.yaml": {"input": f"n{i}", "expected": f"n{i}"} for i in range(4)}
    dataset(
        tasks,
        manifest={
            "agent": {"command": ["sh", "-c", 'sleep 1; echo -n "$0"', "{input}"]},
            "defaults": {"sandbox": _sandboxed(image)},
        },
    )
    run_id = f"max{os.getpid()}"
    with _alive_sampled(run_id) as seen:
        result = pytester.runpytest_subprocess(
            "--agenteval",
            "ds",
            "-n",
            "2",
            "--agenteval-concurrency",
            "2",
            "--agenteval-max-sandboxes",
            "1",
            "--agenteval-run-id",
            run_id,
        )
    result.assert_outcomes(passed=4)
    assert max(seen) == 1 and len(seen) > 4


@pytest.mark.slow
def test_max_sandboxes_starts_attempts_ahead_up_to_the_cap(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str, own_slots: Path
) -> None:
    """`--agenteval-max-sandboxes 4` with `--agenteval-concurrency 8` on two xdist workers:
    sandboxed attempts start ahead of their turn as slots come free, so four containers of
    the run are alive at once, never five (sampled from a thread), and no worker waits
    forever for a slot a later attempt of its own holds."""
    tasks = {f"c{i:02}.yaml": {"input": f"n{i}", "expected": f"n{i}"} for i in range(16)}
    dataset(
        tasks,
        manifest={
            "agent": {"command": ["sh", "-c", 'sleep 1; echo -n "$0"', "{input}"]},
            "defaults": {"sandbox": _sandboxed(image)},
        },
    )
    run_id = f"cap{os.getpid()}"
    with _alive_sampled(run_id) as seen:
        result = pytester.runpytest_subprocess(
            "--agenteval", "ds", "-n", "2", "--agenteval-concurrency", "8",
            "--agenteval-max-sandboxes", "4", "--agenteval-run-id", run_id,
        )  # fmt: skip
    result.assert_outcomes(passed=16)
    assert max(seen) == 4, f"containers alive, as sampled: {seen}"
    assert _labelled(f"{RUN_LABEL}={run_id}") == []


def test_a_sandbox_done_ahead_of_its_turn_is_removed_before_its_turn(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """At concurrency 2, the second attempt's agent answers at once while the first's waits:
    graded by `equals` only (no grader left needs its container), the second's container is
    removed before its item's turn, not kept until the first is done. The first's agent goes
    on only once a look from this test saw the second's container gone while its own ran
    (its timeout is the hang guard)."""
    wait = 'if [ "$0" = wait ]; then while [ ! -e go ]; do sleep 0.1; done; fi; echo -n ok'
    dataset(
        {
            "a.yaml": {"id": "a", "input": "wait", "expected": "ok", "timeout": 120},
            "b.yaml": {"id": "b", "input": "now", "expected": "ok"},
        },
        manifest={
            "agent": {"command": ["sh", "-c", wait, "{input}"]},
            "defaults": {"sandbox": _sandboxed(image)},
        },
    )
    run_id = f"early{os.getpid()}"
    done = threading.Event()
    told: list[str] = []

    def watch() -> None:
        seen_b = False
        while not done.is_set() and not told:
            names = _labelled(f"{RUN_LABEL}={run_id}")
            first = [n for n in names if "--a--" in n]
            second = [n for n in names if "--b--" in n]
            seen_b = seen_b or bool(second)
            if seen_b and first and not second:
                subprocess.run(["docker", "exec", first[0], "touch", "go"], check=True)
                told.append(first[0])

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = pytester.runpytest_subprocess(
            "--agenteval", "ds", "--agenteval-concurrency", "2", "--agenteval-run-id", run_id
        )
    finally:
        done.set()
        watcher.join()
    result.assert_outcomes(passed=2)
    assert told, "the second attempt's container outlived it until the first was done"


def test_a_missing_image_is_counted_apart_fails_the_gate_and_runs_again_on_resume(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """Attempts whose image cannot be had are `counts.build_failed` in summary.json, said in
    the terminal, summary.md and the HTML report, fail the gate even with `--agenteval-allow-errors`, and a
    resume runs them again once the image is there (the task unchanged)."""
    later = f"agenteval-test-later:{os.getpid()}"
    dataset(
        {"boxed.yaml": {"input": "x", "expected": "x", "sandbox": _sandboxed(later)}},
        manifest={"agent": {"command": ["echo", "-n", "{input}"]}},
    )
    first = pytester.runpytest(
        "--agenteval", "ds", "--attempts", "2", "--agenteval-allow-errors",
        "--agenteval-html", "page.html",
    )  # fmt: skip
    first.assert_outcomes(errors=2)
    assert "<dt>sandbox build failed</dt><dd>2</dd>" in (pytester.path / "page.html").read_text()
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    first.stdout.fnmatch_lines(
        [
            "0 passed, 0 failed, 2 errors (2 sandbox build failed)*",
            "*gate NOT met: 2 attempt(s) could not build or pull their sandbox image*",
        ]
    )
    summary = summary_of(pytester)
    assert summary["counts"]["build_failed"] == 2
    run_dir = pytester.path / f".pytest_cache/agenteval/runs/{summary['run_id']}"
    assert "(2 sandbox build failed)" in (run_dir / "summary.md").read_text()
    subprocess.run(["docker", "tag", image, later], check=True)
    try:
        again = pytester.runpytest("--agenteval", "ds", "--attempts", "2", "--resume-suite")
    finally:
        subprocess.run(["docker", "rmi", later], capture_output=True)
    again.assert_outcomes(passed=2)
    assert "build_failed" not in summary_of(pytester)["counts"]


def test_the_record_keeps_the_image_and_the_captured_environment_and_drift_is_said(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sandbox: environment:` runs its commands inside each container before the agent; the
    record keeps their outputs and the image id, and a value that differs across attempts
    (each container's hostname) is listed in summary.json's `environment_drift` and warned of
    in the terminal, summary.md and the HTML report, while equal values are not; `agenteval
    show` shows the image and the captured values."""
    capture = {"os": "uname -s", "host": "hostname", "gone": "no-such-program"}
    dataset(
        {"a.yaml": {"input": "x", "expected": "x"}},
        manifest={
            "agent": {"command": ["echo", "-n", "{input}"]},
            "defaults": {"sandbox": _sandboxed(image, environment=capture)},
        },
    )
    result = pytester.runpytest(
        "--agenteval", "ds", "--attempts", "2", "--agenteval-html", "page.html"
    )
    result.assert_outcomes(passed=2)
    assert "environment drift: host" in (pytester.path / "page.html").read_text()
    image_id = _inspect(image, "{{.Id}}")
    hosts = []
    for attempt in (0, 1):
        record = latest_record(pytester.path, "a", attempt)
        assert record["sandbox"] == {"kind": "docker", "image": image_id}  # its kind's words
        assert "image" not in record  # the field of records written before kinds
        captured = record["environment"]
        assert captured["os"] == "Linux" and "no-such-program" in captured["gone"]
        hosts.append(captured["host"])
    assert hosts[0] != hosts[1]
    assert main(["show", latest_run(pytester.path), "a/1"]) == 0
    shown = capsys.readouterr().out
    assert f"sandbox image {image_id}" in shown and f"environment host: {hosts[1]}" in shown
    summary = summary_of(pytester)
    assert summary["environment_drift"] == [{"name": "host", "values": sorted(hosts)}]
    result.stdout.fnmatch_lines(["warning: environment drift: host differs across attempts: *"])
    run_dir = pytester.path / f".pytest_cache/agenteval/runs/{summary['run_id']}"
    assert "environment drift: host" in (run_dir / "summary.md").read_text()


@pytest.mark.slow
def test_two_workers_build_a_digest_once(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """Under `-n 2` the tasks sharing a `build:` folder are built once: the worker that comes
    second waits for the first's build and uses its image (Docker tags it once)."""
    tasks = {f"b{i}.yaml": {"input": f"n{i}", "expected": f"n{i}"} for i in range(4)}
    root = dataset(
        tasks,
        manifest={
            "agent": {"command": ["echo", "-n", "{input}"]},
            "defaults": {"sandbox": {"docker": {"build": "img"}}},
        },
    )
    (root / "img").mkdir()
    shutil.copy(str(shutil.which("busybox")), root / "img/busybox")
    (root / "img/Dockerfile").write_text(
        f"# {time.time_ns()}\nFROM scratch\nCOPY busybox /bin/busybox\n"
        'RUN ["/bin/busybox", "--install", "-s", "/bin"]\nRUN ["/bin/sleep", "2"]\n'
    )
    since = str(int(time.time()) - 1)
    run_id = f"once{os.getpid()}"
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "-n", "2", "--agenteval-run-id", run_id
    )
    result.assert_outcomes(passed=4)
    records = (pytester.path / f".pytest_cache/agenteval/runs/{run_id}/records.jsonl").read_text()
    ids = {json.loads(line)["sandbox"]["image"] for line in records.splitlines()}
    assert len(ids) == 1, ids
    events = subprocess.run(
        [
            *("docker", "events", "--since", since, "--until", str(int(time.time()) + 1)),
            *("--filter", "type=image", "--filter", "event=tag", "--format", "{{.Actor.ID}}"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    tagged = [line for line in events.stdout.split() if line]  # other tests' tags too
    built = {tag for tag in _built() if tag}
    assert tagged.count(ids.pop()) == 1, (tagged, built)


@pytest.mark.slow
def test_a_failed_build_errs_in_phase_build_and_a_resume_builds_the_fixed_dockerfile(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """A Dockerfile that does not build makes the attempt a `build_failed` error of phase
    `build` keeping the build log's tail; fixed, `--resume-suite` builds it and runs the
    attempt."""
    root = dataset(
        {"t.yaml": {"input": "x", "expected": "x", "sandbox": {"docker": {"build": "img"}}}},
        manifest={"agent": {"command": ["echo", "-n", "{input}"]}},
    )
    (root / "img").mkdir()
    shutil.copy(str(shutil.which("busybox")), root / "img/busybox")
    stamp = f"# {time.time_ns()}\nFROM scratch\nCOPY busybox /bin/busybox\n"
    (root / "img/Dockerfile").write_text(stamp + 'RUN ["/bin/no-such-program"]\n')
    pytester.runpytest("--agenteval", "ds").assert_outcomes(errors=1)
    record = latest_record(pytester.path, "t", 0)
    assert (record["phase"], record["error_type"]) == ("build", "build_failed")
    assert "no-such-program" in record["error"]
    (root / "img/Dockerfile").write_text(
        stamp + 'RUN ["/bin/busybox", "--install", "-s", "/bin"]\n'
    )
    pytester.runpytest("--agenteval", "ds", "--resume-suite").assert_outcomes(passed=1)
    assert latest_record(pytester.path, "t", 0)["status"] == "pass"


def test_a_sandboxed_command_agents_program_is_looked_up_in_the_container(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """A command agent's program that only the image has (`ash` on the container's PATH, a
    script in the workspace copy) runs in a sandbox; on the host the same program is still
    looked up before any attempt and said missing."""
    assert shutil.which("ash") is None, "the test needs a program the host does not have"
    root = dataset(
        {
            "bare.yaml": {
                "input": "x",
                "expected": "inside",
                "agent": {"command": ["ash", "-c", "echo -n inside"]},
                "sandbox": _sandboxed(image),
            },
            "script.yaml": {
                "input": "x",
                "expected": "script",
                "workspace": "ws",
                "agent": {"command": ["/workspace/agent.sh"]},
                "sandbox": _sandboxed(image),
            },
            "host.yaml": {
                "input": "x",
                "expected": "inside",
                "agent": {"command": ["ash", "-c", "echo -n inside"]},
            },
        },
    )
    (root / "ws").mkdir()
    (root / "ws/agent.sh").write_text("#!/bin/sh\necho -n script\n")
    (root / "ws/agent.sh").chmod(0o755)
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*host*not run*agent command 'ash' not found on PATH*"])
