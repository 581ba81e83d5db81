"""The sandbox against what an attempt can do to the host and what a task file can ask for:
memory bounded whatever an agent writes, hard links, build folders, the run's ceiling on
isolation, daemon failures, and orphans said and swept. Against the real Docker daemon, as
test_sandbox.py (skipped without one, except under `CI=true`)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from daemons import Daemon, build_busybox, own_daemon
from helpers import DatasetMaker, aid, latest_record
from pytest_agenteval.core.model import DockerImage, SandboxSpec, Task
from pytest_agenteval.execution.artifacts import collect
from pytest_agenteval.execution.docker import LABEL, RUN_LABEL, DockerEnvironment, DockerSession
from pytest_agenteval.execution.environment import LocalEnvironment
from pytest_agenteval.execution.process import MAX_OUTPUT, was_cut
from pytest_agenteval.execution.tools import BUILTIN_TOOLS, TOOL_OUTPUT
from test_sandbox import IMAGE, busybox_image


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The busybox test image of test_sandbox.py."""
    return busybox_image(tmp_path_factory)


def _sandboxed(image: str, **fields: object) -> dict[str, object]:
    return {"docker": {"image": image}, **fields}


def test_a_programs_outputs_keep_their_head_and_tail_and_say_their_size(tmp_path: Path) -> None:
    """Past MAX_OUTPUT a program's stdout (and its stderr) keeps its first and last half
    around a note of the full size, so nothing it writes is held whole."""
    local = LocalEnvironment(tmp_path)
    script = f'printf a; head -c {3 * MAX_OUTPUT} /dev/zero | tr "\\0" m; printf z; echo -n e >&2'
    done = local.exec(["sh", "-c", script])
    assert done.returncode == 0 and done.stderr == "e"
    assert len(done.stdout) < MAX_OUTPUT + 200 and was_cut(done.stdout)
    assert done.stdout.startswith("am") and done.stdout.endswith("mz")
    assert f"output cut: {3 * MAX_OUTPUT + 2:,} bytes written" in done.stdout
    small = local.exec(["sh", "-c", f"head -c {MAX_OUTPUT} /dev/zero"])
    assert len(small.stdout) == MAX_OUTPUT and not was_cut(small.stdout)


def test_a_hard_linked_file_is_listed_and_kept_as_the_file_it_is(
    image: str, tmp_path: Path
) -> None:
    """A file with a second hard link is two files of the same bytes: both listed with their
    size and kept (the tar's link entry is not a symbolic link)."""
    session = DockerSession()
    spec = SandboxSpec(docker=DockerImage(image=image))
    sandbox = DockerEnvironment(spec, f"agenteval-test-hardlink-{os.getpid()}", None, session)
    try:
        done = sandbox.exec(["sh", "-c", "echo -n data > a.txt && ln a.txt b.txt"])
        assert done.returncode == 0, done.stderr
        made = collect(sandbox, max_bytes=100)
    finally:
        sandbox.teardown(keep=False)
        session.wait()
    assert made.files == [
        {"path": "a.txt", "change": "added", "size": 4, "kept": True},
        {"path": "b.txt", "change": "added", "size": 4, "kept": True},
    ]
    assert made.kept == {"a.txt": b"data", "b.txt": b"data"}


PEAK = """
import pathlib


def pytest_unconfigure(config):
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            pathlib.Path("peak-kb.txt").write_text(line.split()[1])
"""
"""A conftest that writes the pytest process's peak resident memory (kB) as it ends."""

BIG = 300_000_000
"""Bytes of the big file and of the big output (a few hundred MB: what the host must not
hold)."""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "sandboxed"])
def test_a_big_file_and_a_big_output_cost_the_host_little(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str, where: str
) -> None:
    """An agent that writes a file of hundreds of MB into its workspace and prints as much, and
    a command grader that prints as much again, leave the pytest process's peak memory within a
    few tens of MB of a run that writes a thousand bytes: the copy-out is streamed, no body past
    `max_bytes` is read, and programs' outputs keep their head and tail with the full size
    said (locally and in a container)."""
    agent = [
        "sh",
        "-c",
        'cd {workspace} && echo -n "$0" > n.txt && head -c "$0" /dev/zero > big.bin'
        ' && head -c "$0" /dev/zero | tr "\\0" x',
        "{input}",
    ]
    grader = {"command": ["sh", "-c", 'head -c "$(cat n.txt)" /dev/zero | tr "\\0" y']}
    defaults: dict[str, object] = {"artifacts": {"max_bytes": 4096}}
    if where == "sandboxed":
        defaults["sandbox"] = _sandboxed(image, memory="64m")
    pytester.makeconftest(PEAK)
    peaks = {}
    for size in (1000, BIG):
        dataset(
            {"a.yaml": {"input": str(size), "graders": [{"contains": "xxx"}, grader]}},
            manifest={"agent": {"command": agent}, "defaults": defaults},
        )
        pytester.runpytest_subprocess("--agenteval", "ds").assert_outcomes(passed=1)
        peaks[size] = int((pytester.path / "peak-kb.txt").read_text()) * 1024
        record = latest_record(pytester.path, "a", 0)
        assert len(json.dumps(record)) < 4 * 1024 * 1024
    assert f"output cut: {BIG:,} bytes written" in record["output"]
    assert record["changed_files"][0] == {
        "path": "big.bin",
        "change": "added",
        "size": BIG,
        "kept": False,
    }
    assert peaks[BIG] - peaks[1000] < 40 * 1024 * 1024, peaks


def test_a_build_folder_outside_the_dataset_is_a_load_error(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A task's `build:` that leads out of the dataset is a load error at its line, as a
    workspace is (the other tasks run); in the manifest's defaults it stops the session with
    the manifest's line."""
    (pytester.path / "outside").mkdir()
    (pytester.path / "outside/Dockerfile").write_text("FROM scratch\n")
    dataset(
        {
            "out.yaml": "input: x\nexpected: x\nsandbox:\n  docker: {build: ../outside}\n",
            "fine.yaml": {"input": "ok", "expected": "ok"},
        },
        manifest={"agent": {"command": ["echo", "-n", "{input}"]}},
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*out.yaml:4: at sandbox.docker.build: build folder '../outside' is outside the "
            "dataset*",
            "Hint: a build folder*inside the dataset*",
        ]
    )
    dataset(
        {"fine.yaml": {"input": "ok", "expected": "ok"}},
        manifest={"defaults": {"sandbox": {"docker": {"build": "../outside"}}}},
    )
    result = pytester.runpytest("--agenteval", "ds")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*agenteval.yaml*: at defaults.sandbox.docker.build: *outside*"])


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda img: os.mkfifo(img / "pipe"), "pipe in the build folder"),
        (
            lambda img: (img / "data").symlink_to(img.parent.parent / "outside.txt"),
            "the symlink data in the build folder points outside it",
        ),
    ],
    ids=["fifo", "symlink-outside"],
)
def test_an_unreadable_build_folder_is_build_failed_never_a_shared_tag(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    image: str,
    make: Callable[[Path], object],
    said: str,
) -> None:
    """A `build:` folder holding a FIFO, or a symlink to a file outside it, cannot be
    digested: its attempts are `build_failed` saying why, and an image that happens to carry
    a shared tag is never used for them."""
    root = dataset(
        {"t.yaml": {"input": "x", "expected": "x", "sandbox": {"docker": {"build": "img"}}}},
        manifest={"agent": {"command": ["echo", "-n", "{input}"]}},
    )
    (root / "img").mkdir()
    (root / "img/Dockerfile").write_text("FROM scratch\n")
    (root.parent / "outside.txt").write_text("secret\n")
    make(root / "img")
    subprocess.run(["docker", "tag", image, "agenteval-build:unreadable"], check=True)
    try:
        result = pytester.runpytest("--agenteval", "ds")
    finally:
        subprocess.run(["docker", "rmi", "agenteval-build:unreadable"], capture_output=True)
    result.assert_outcomes(errors=1)
    record = latest_record(pytester.path, "t", 0)
    assert (record["phase"], record["error_type"]) == ("build", "build_failed")
    assert "the build folder" in record["error"] and said in record["error"]


def test_a_failed_build_says_its_log_once_and_refers_to_it_after(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """A build that fails shows its log under the image's first attempt only; the later
    attempts of that image say the same error in a line that refers to it."""
    root = dataset(
        {"t.yaml": {"input": "x", "expected": "x", "sandbox": {"docker": {"build": "img"}}}},
        manifest={"agent": {"command": ["echo", "-n", "{input}"]}},
    )
    (root / "img").mkdir()
    (root / "img/Dockerfile").write_text(
        f'# {time.time_ns()}\nFROM scratch\nRUN ["/bin/no-such-program"]\n'
    )
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "3")
    result.assert_outcomes(errors=3)
    assert result.stdout.str().count("Step 2/2 : RUN") == 1
    errors = [latest_record(pytester.path, "t", attempt)["error"] for attempt in range(3)]
    assert "no-such-program" in errors[0]
    for later in errors[1:]:
        first_line, reference = later.splitlines()
        assert first_line == errors[0].splitlines()[0] and "first attempt" in reference


def test_a_broken_build_never_calls_the_agent(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """The image of a sandboxed task is made sure of before its agent starts: with a build
    that fails, neither a Python agent that never touches its container nor one that would
    is called; every attempt is `build_failed`, also on a resume."""
    root = dataset(
        {
            "quiet.yaml": {"input": "x", "expected": "x", "metadata": {"touch": False}},
            "busy.yaml": {"input": "x", "expected": "x", "metadata": {"touch": True}},
        },
        manifest={"agent": "called:run", "defaults": {"sandbox": {"docker": {"build": "img"}}}},
    )
    (root / "called.py").write_text(
        "import pathlib\n"
        "def run(task):\n"
        "    with pathlib.Path(__file__).with_name('calls.log').open('a') as log:\n"
        "        log.write(task.id + '\\n')\n"
        "    if task.metadata['touch']:\n"
        "        task.environment.exec(['true'])\n"
        "    return task.input\n"
    )
    (root / "img").mkdir()
    (root / "img/Dockerfile").write_text(f'# {time.time_ns()}\nFROM scratch\nRUN ["/bin/none"]\n')
    pytester.runpytest("--agenteval", "ds").assert_outcomes(errors=2)
    pytester.runpytest("--agenteval", "ds", "--resume-suite").assert_outcomes(errors=2)
    assert dataset.calls() == []
    for task_id in ("quiet", "busy"):
        record = latest_record(pytester.path, task_id, 0)
        assert (record["phase"], record["error_type"]) == ("build", "build_failed")


def _listener() -> tuple[socket.socket, threading.Thread]:
    """A TCP server on the host's loopback that answers every connection with `42`."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"42")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


LIFTING = """\
input: x
expected: "42"
sandbox:
  docker: {{image: {image}}}
  network: host
  memory: unbounded
"""


@pytest.mark.parametrize(
    "allow",
    [
        pytest.param([], id="refused"),
        pytest.param(["--agenteval-sandbox-allow", "network,unbounded"], id="option"),
        pytest.param(
            ["-o", "agenteval_sandbox_allow=network,unbounded"], id="ini", marks=pytest.mark.slow
        ),
    ],
)
def test_a_task_file_cannot_lift_its_own_sandbox_unless_the_run_allows_it(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str, allow: list[str]
) -> None:
    """A task whose `sandbox:` asks for the host's network and no memory limit, under a
    manifest of `network: none` and 128m, is a load error at each field's line saying what
    allows it; the other tasks run. With the run's `--agenteval-sandbox-allow` (or its ini
    twin) it runs, and reaches a listener on the host's loopback."""
    server, thread = _listener()
    port = server.getsockname()[1]
    agent = {"command": ["nc", "-w", "5", "127.0.0.1", str(port)]}
    dataset(
        {
            "lifts.yaml": LIFTING.format(image=image),
            "inside.yaml": {
                "input": "x",
                "expected": "x",
                "agent": {"command": ["echo", "-n", "x"]},
            },
        },
        manifest={
            "agent": agent,
            "defaults": {"sandbox": _sandboxed(image, network="none", memory="128m")},
        },
    )
    try:
        result = pytester.runpytest("--agenteval", "ds", *allow)
    finally:
        server.shutdown(socket.SHUT_RDWR)  # wakes the accept() it waits in
        server.close()
        thread.join(5)
    if allow:
        result.assert_outcomes(passed=2)
        return
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*lifts.yaml:5: at sandbox.network: `network: host` lifts the sandbox's isolation*",
            "Hint: *--agenteval-sandbox-allow network* (ini `agenteval_sandbox_allow = network`)*",
            "*lifts.yaml:6: at sandbox.memory: `memory: unbounded` lifts*",
            "Hint: *--agenteval-sandbox-allow unbounded*",
        ]
    )


def test_memory_zero_is_refused_and_a_manifest_cannot_lift_either(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`memory: "0"` (Docker's "no limit") is refused at its line; a manifest whose default
    sandbox has a network stops the session at the manifest's line; a bad allowance is a
    usage error naming the allowed words."""
    dataset(
        {"zero.yaml": 'input: x\nexpected: x\nsandbox:\n  docker: {image: a}\n  memory: "0"\n'},
        manifest={"agent": {"command": ["echo", "-n", "x"]}},
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*zero.yaml:5: at sandbox.memory: *0 is no memory at all*"])
    dataset(
        {"t.yaml": {"input": "x", "expected": "x"}},
        manifest={"defaults": {"sandbox": {"docker": {"image": "a"}, "network": "bridge"}}},
    )
    result = pytester.runpytest("--agenteval", "ds")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*agenteval.yaml*: at defaults.sandbox.network: `network: bridge`*"]
    )
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-sandbox-allow", "everything")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*'everything' is not a comma-separated list of network and unbounded*"]
    )


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A Docker daemon of this test's own (its own socket, data root, exec root, pid file)
    holding the busybox test image; removed with all it made."""
    made = own_daemon()
    try:
        build_busybox(made, tmp_path / "image", IMAGE)
        yield made
    finally:
        made.close()


def _kill_when_a_container_runs(daemon: Daemon, label: str, then: float) -> threading.Thread:
    """A thread that kills the daemon `then` seconds after a container labelled `label`
    runs in it."""

    def watch() -> None:
        deadline = time.monotonic() + 120  # hang guard
        while time.monotonic() < deadline:
            listed = daemon.docker("ps", "-q", "--filter", f"label={label}", check=False)
            if listed.stdout.strip():
                time.sleep(then)
                daemon.kill()
                return
            time.sleep(0.1)

    thread = threading.Thread(target=watch)
    thread.start()
    return thread


@pytest.mark.slow
def test_a_daemon_that_dies_mid_run_is_a_sandbox_error_a_plain_resume_runs_again(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    daemon: Daemon,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kill -9 of the Docker daemon while a command agent and then a Python agent wait on
    programs in their containers: those attempts, and the one after whose container cannot
    be made, are errors of type `sandbox_error` (phase `sandbox`), never wrong answers or
    agent errors; the terminal counts them apart and the gate refuses them even with
    `--agenteval-allow-errors`; once the daemon is back a plain `--resume-suite` runs them
    again and they pass."""
    sandbox = _sandboxed(IMAGE)
    root = dataset(
        {
            "a_command.yaml": {
                "input": "x",
                "graders": [{"contains": "42"}],
                "agent": {"command": ["sh", "-c", "sleep 4; echo -n 42"]},
            },
            "b_python.yaml": {"input": "x", "graders": [{"contains": "42"}]},
            "c_after.yaml": {
                "input": "x",
                "graders": [{"contains": "42"}],
                "agent": {"command": ["echo", "-n", "42"]},
            },
        },
        manifest={"agent": "boxed:run", "defaults": {"sandbox": sandbox}},
    )
    (root / "boxed.py").write_text(
        "def run(task):\n"
        "    return task.environment.exec(['sh', '-c', 'sleep 4; echo -n 42']).stdout\n"
    )
    monkeypatch.setenv("DOCKER_HOST", daemon.host)
    run_id = f"daemon{os.getpid()}"
    killer = _kill_when_a_container_runs(daemon, f"{RUN_LABEL}={run_id}", 1.5)
    try:
        first = pytester.runpytest_subprocess(
            *("--agenteval", "ds", "--agenteval-run-id", run_id, "--agenteval-allow-errors"),
            *("--agenteval-concurrency", "2"),
        )
    finally:
        killer.join()
    first.assert_outcomes(errors=3)
    first.stdout.fnmatch_lines(
        [
            "0 passed, 0 failed, 3 errors (3 sandbox errors)*",
            "*gate NOT met: 3 attempt(s) lost their sandbox*",
        ]
    )
    for task_id in ("a_command", "b_python", "c_after"):
        record = latest_record(pytester.path, task_id, 0)
        assert (record["error_type"], record["phase"]) == ("sandbox_error", "sandbox"), record
    daemon.start()
    again = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-run-id", run_id, "--resume-suite"
    )
    again.assert_outcomes(passed=3)
    assert daemon.docker("ps", "-aq", "--filter", f"label={RUN_LABEL}={run_id}").stdout == ""


def _labelled(label: str) -> list[str]:
    """The containers (running or not) carrying `label` (`name` or `name=value`)."""
    listed = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def _gone_pid() -> int:
    """The pid of a process that ran and is gone."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(child.stdout)


def test_a_sessions_orphan_sweep_says_what_it_removed(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """The first sandbox of a session removes the containers of sessions that are gone and
    says so in one line at the end, naming their pids and host."""
    pid = _gone_pid()
    name = f"agenteval-test-swept-{os.getpid()}"
    subprocess.run(
        [
            *("docker", "run", "-d", "--name", name, "--network", "none"),
            *("--label", f"{LABEL}={socket.gethostname()}/{pid}/1", "--entrypoint", "sleep"),
            *(image, "infinity"),
        ],
        check=True,
        capture_output=True,
    )
    dataset(
        {"a.yaml": {"input": "x", "expected": "x"}},
        manifest={
            "agent": {"command": ["echo", "-n", "{input}"]},
            "defaults": {"sandbox": _sandboxed(image)},
        },
    )
    try:
        result = pytester.runpytest("--agenteval", "ds")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    result.assert_outcomes(passed=1)
    said = [line for line in result.outlines if "sandbox container" in line]
    assert len(said) == 1, said
    assert re.fullmatch(
        r"agenteval: removed \d+ sandbox containers? of (a session that is|sessions that are) "
        rf"gone \(pids? [\d, ]*\b{pid}\b[\d, ]* on host {re.escape(socket.gethostname())}\)",
        said[0],
    ), said


@pytest.mark.slow
def test_a_worker_killed_with_its_sandbox_running_leaves_no_container_after_the_session(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """kill -9 of the xdist worker whose sandboxed attempt runs (`-n 2`) leaves its container
    running; when the session ends the controller has removed it, and says so."""
    root = dataset(
        {
            "fast.yaml": {"input": "a", "expected": "a"},
            "slow.yaml": {"input": "b", "expected": "b"},
        },
        manifest={"agent": "boxed:run", "defaults": {"sandbox": _sandboxed(image)}},
    )
    (root / "boxed.py").write_text(
        "def run(task):\n"
        "    if task.id == 'slow':\n"
        "        task.environment.exec(['sleep', '600'])\n"
        "    return task.input\n"
    )
    run_id = f"killedworker{os.getpid()}"
    session = pytester.popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "--agenteval",
            "ds",
            "-n",
            "2",
            "--agenteval-run-id",
            run_id,
        ],
        stdin=None,  # type: ignore[arg-type]
        start_new_session=True,
    )
    deadline = time.monotonic() + 120  # hang guard
    slow: list[str] = []
    while not slow and time.monotonic() < deadline:
        slow = [n for n in _labelled(f"{RUN_LABEL}={run_id}") if "-ds--slow--" in n]
        time.sleep(0.1)
    (container,) = slow
    label = subprocess.run(
        ["docker", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL}"}}}}', container],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    worker = int(label.split("/")[1])
    os.kill(worker, signal.SIGKILL)
    out, _ = session.communicate(timeout=120)
    assert _labelled(f"{RUN_LABEL}={run_id}") == []
    assert (
        f"agenteval: removed 1 sandbox container of a session that is gone (pid {worker} on "
        f"host {socket.gethostname()})"
    ) in out.decode(), out.decode()[-3000:]


def test_container_names_of_equal_pids_on_two_client_hosts_differ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two client machines whose sessions have the same pid, sharing a daemon, never give
    their attempts the same container name (the name carries a tag of the session label)."""
    from pytest_agenteval.execution.docker import container_name

    key = aid("ds", "t", 0)
    names = set()
    for host in ("ci-1", "ci-2"):
        monkeypatch.setattr(socket, "gethostname", lambda host=host: host)
        names.add(container_name(key, os.getpid()))
    assert len(names) == 2
    assert all(name.startswith(f"agenteval-{os.getpid()}-") for name in names)
    assert container_name(key, os.getpid()) == container_name(key, os.getpid())


def test_the_read_file_tool_holds_no_more_of_a_huge_sandbox_file_than_it_sends(
    image: str, tmp_path: Path
) -> None:
    """The react agent's `read_file` of a 300 MB file in a container reads its first part and
    its size from the tar header, and stops the copy: the host never holds the file."""
    session = DockerSession()
    spec = SandboxSpec(docker=DockerImage(image=image))
    sandbox = DockerEnvironment(spec, f"agenteval-test-huge-{os.getpid()}", None, session)
    size = 300 * 2**20
    task = Task(
        id="t",
        input="",
        metadata={},
        attempt=0,
        seed=0,
        workspace=tmp_path,
        environment=lambda: sandbox,
    )
    try:
        made = sandbox.exec(["sh", "-c", f"head -c {size} /dev/zero | tr '\\0' x > big.txt"])
        assert made.returncode == 0, made.stderr
        tracemalloc.start()
        try:
            read = asyncio.run(BUILTIN_TOOLS["read_file"].run(task, {"path": "big.txt"}, 60))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        sandbox.teardown(keep=False)
        session.wait()
    assert peak < 16 * 2**20, f"{peak:,} bytes held at the peak"
    assert not read.error, read.text
    assert read.text.startswith("x" * 1000)
    assert f"the file holds {size:,} bytes" in read.text
    assert len(read.text) < 2 * TOOL_OUTPUT
