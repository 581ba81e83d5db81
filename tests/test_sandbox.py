"""The Docker sandbox, against the real daemon: each attempt in a fresh container with no
network and bounded memory, its command agent and command graders inside, nothing left
running. Skipped when no daemon answers, except under `CI=true`, where that fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import DatasetMaker, default_sigint, latest_record
from pytest_agenteval.core.model import DockerImage, SandboxSpec
from pytest_agenteval.execution.docker import (
    LABEL,
    DockerEnvironment,
    Images,
    SandboxUnavailable,
    remove_orphans,
)
from pytest_agenteval.execution.environment import ChangedFile, Environment

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
        SandboxSpec(docker=DockerImage(image=image), memory="64m"),
        f"agenteval-test-{os.getpid()}-{tmp_path.name}",
        template,
        Images(),
    )
    yield made
    made.teardown(keep=False)


def _containers(name: str) -> list[str]:
    listed = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


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
        ["sh", "-c", 'pwd; cat; echo "$WHO"; rm gone.txt; echo 2 > src/calc.txt'],
        input=b"from stdin\n",
        env={"WHO": "agent"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["/workspace", "from stdin", "agent"]
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
    with pytest.raises(OSError, match="no-such-program"):
        environment.exec(["no-such-program"])


def test_a_numeric_user_runs_the_programs_and_owns_the_workspace(
    image: str, tmp_path: Path
) -> None:
    """With `user: "1000:1000"` programs run as that user and the workspace copy is theirs,
    so the agent can write into it."""
    (tmp_path / "seed.txt").write_text("seed")
    spec = SandboxSpec(docker=DockerImage(image=image), user="1000:1000")
    images = Images()
    sandbox = DockerEnvironment(spec, f"agenteval-test-user-{os.getpid()}", tmp_path, images)
    try:
        done = sandbox.exec(["sh", "-c", "id -u; stat -c %u seed.txt; echo x > new.txt"])
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["1000", "1000"]
    finally:
        sandbox.teardown(keep=False)
        images.wait()


def test_the_network_is_off_inside(environment: DockerEnvironment) -> None:
    """With the default `network: none` the container is made without a network and has
    loopback only, so a connection to another address fails."""
    mode = subprocess.run(
        ["docker", "inspect", "--format", "{{.HostConfig.NetworkMode}}", environment.name],
        capture_output=True,
        text=True,
        check=True,
    )
    assert mode.stdout.strip() == "none"
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
    """An image that is not present and cannot be pulled is a `sandbox build` error naming
    it and what to do; a second attempt gets the same error without trying again."""
    images = Images()
    spec = SandboxSpec(docker=DockerImage(image="agenteval-test-absent:none"))
    with pytest.raises(SandboxUnavailable) as first:
        DockerEnvironment(spec, f"agenteval-test-absent-{os.getpid()}", None, images)
    assert "sandbox build: the image 'agenteval-test-absent:none' is not present" in str(
        first.value
    )
    assert "docker build" in first.value.detail
    with pytest.raises(SandboxUnavailable) as second:
        DockerEnvironment(spec, f"agenteval-test-absent-{os.getpid()}", None, images)
    assert second.value is first.value


def test_a_daemon_that_does_not_answer_is_a_clear_error(
    image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When no Docker daemon answers, making a sandbox says so and what to do."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    spec = SandboxSpec(docker=DockerImage(image=image))
    with pytest.raises(SandboxUnavailable, match="the Docker daemon is not running") as raised:
        DockerEnvironment(spec, "agenteval-test-nodaemon", None, Images())
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
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1, failed=1)
    assert _containers(f"agenteval-{os.getpid()}-ds--") == []  # the run was in this process
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
    assert _containers(f"agenteval-{os.getpid()}-ds--") == []  # the run was in this process


def test_a_missing_image_errors_each_attempt_and_the_others_run(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """A task whose image is missing is an error saying so; a task without a sandbox runs
    on the host as before."""
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
    assert latest_record(pytester.path, "boxed", 0)["error_type"] == "sandbox_unavailable"


@pytest.mark.slow
def test_the_next_session_removes_the_containers_of_a_dead_one(image: str, tmp_path: Path) -> None:
    """A session killed with SIGKILL leaves its container running; the next session's first
    sandbox removes it (its pid is gone), and leaves a live session's alone."""
    script = tmp_path / "session.py"
    script.write_text(
        "import sys, time\n"
        "from pytest_agenteval.core.model import DockerImage, SandboxSpec\n"
        "from pytest_agenteval.execution.docker import DockerEnvironment, Images\n"
        f"spec = SandboxSpec(docker=DockerImage(image={image!r}))\n"
        "DockerEnvironment(spec, sys.argv[1], None, Images())\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    name = f"agenteval-test-orphan-{os.getpid()}"
    session = subprocess.Popen(
        [sys.executable, str(script), name], stdout=subprocess.PIPE, preexec_fn=default_sigint
    )
    try:
        assert session.stdout is not None and session.stdout.readline() == b"ready\n"
        assert name not in remove_orphans() and _containers(name) == [name]
    finally:
        session.kill()
        session.wait(timeout=30)
    deadline = time.monotonic() + 30  # hang guard
    while not remove_orphans() and time.monotonic() < deadline:
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
