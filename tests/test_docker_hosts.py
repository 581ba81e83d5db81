"""Several Docker daemons in one run, against two real ones: the default daemon and a second
one of the test's own (its own socket, data root, exec root and pid file). Attempts spread
over both, each daemon builds the image once, records name the daemon, and nothing is left
on either after a kill -9 and a resume."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemons import Daemon, own_daemon
from helpers import DatasetMaker, default_sigint, sampling
from pytest_agenteval.execution.docker import RUN_LABEL, known_hosts

DEFAULT = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
"""The default daemon's address, as a host list names it."""


@pytest.fixture(scope="module")
def second() -> Iterator[Daemon]:
    """A second dockerd of this module's own, removed with all it made at the end."""
    if shutil.which("busybox") is None:
        pytest.skip("busybox-static is not installed")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker daemon answers")
    daemon = own_daemon()
    try:
        yield daemon
    finally:
        daemon.close()


def _image_folder(root: Path) -> dict[str, object]:
    """A `build:` folder in the dataset (busybox `FROM scratch`): each daemon builds it."""
    folder = root / "img"
    folder.mkdir()
    shutil.copy(shutil.which("busybox") or "", folder / "busybox")
    (folder / "Dockerfile").write_text(
        'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\n'
    )
    return {"build": "img"}


def _on(host: str, run_id: str) -> list[str]:
    """The names of the run's containers on the daemon `host`."""
    listed = subprocess.run(
        [
            *("docker", "--host", host, "ps", "-a"),
            *("--filter", f"label={RUN_LABEL}={run_id}", "--format", "{{.Names}}"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def _started_on(host: str, run_id: str, since: float) -> int:
    """How many containers of the run the daemon `host` started since `since` (its events)."""
    events = subprocess.run(
        [
            *("docker", "--host", host, "events", "--since", str(int(since)), "--until", "0s"),
            *("--filter", "event=start", "--filter", f"label={RUN_LABEL}={run_id}"),
            *("--format", "{{.Actor.Attributes.name}}"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return len(events.stdout.split())


def _records(root: Path, run_id: str) -> list[dict[str, Any]]:
    path = root / ".pytest_cache/agenteval/runs" / run_id / "records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_attempts_spread_over_two_daemons_and_records_name_theirs(
    pytester: pytest.Pytester, dataset: DatasetMaker, second: Daemon
) -> None:
    """40 sandboxed attempts at concurrency 8 on two xdist workers, the manifest naming two
    daemons (`docker: hosts:`): both daemons start containers of the run (by their events),
    each built the `build:` image (one tag on each), each record names the daemon its
    attempt ran on, and none of the run's containers is left on either."""
    tasks = {f"h{i:02}.yaml": {"input": f"n{i}", "expected": f"n{i}"} for i in range(40)}
    root = dataset(
        tasks, manifest={"agent": {"command": ["sh", "-c", 'sleep 0.3; echo -n "$0"', "{input}"]}}
    )
    docker = {**_image_folder(root), "hosts": [DEFAULT, second.host]}
    manifest = json.loads((root / "agenteval.yaml").read_text())
    manifest["defaults"] = {"sandbox": {"docker": docker}}
    (root / "agenteval.yaml").write_text(json.dumps(manifest))
    run_id = f"hosts{os.getpid()}"
    since = time.time() - 1
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "-n", "2", "--agenteval-concurrency", "8",
        "--agenteval-run-id", run_id,
    )  # fmt: skip
    result.assert_outcomes(passed=40)
    hosts = Counter(record["sandbox"].get("host") for record in _records(pytester.path, run_id))
    assert set(hosts) == {DEFAULT, second.host} and sum(hosts.values()) == 40, hosts
    for host in (DEFAULT, second.host):
        assert 0 < _started_on(host, run_id, since) <= hosts[host]
        assert _on(host, run_id) == []
    built = second.docker("images", "--format", "{{.Repository}}", "agenteval-build").stdout
    assert built.split() == ["agenteval-build"]
    assert second.host in known_hosts()


@pytest.mark.slow
def test_a_killed_session_on_two_daemons_leaves_nothing_after_a_resume(
    pytester: pytest.Pytester, dataset: DatasetMaker, second: Daemon
) -> None:
    """kill -9 of a session with containers running on both daemons
    (`--agenteval-docker-host`, twice) leaves them running; `--resume-suite` removes them
    on both, runs those attempts again, and leaves no container of the run on either."""
    tasks = {f"k{i}.yaml": {"input": f"n{i}", "expected": f"n{i}"} for i in range(4)}
    root = dataset(tasks, manifest={"agent": "boxed:run"})
    manifest = json.loads((root / "agenteval.yaml").read_text())
    manifest["defaults"] = {"sandbox": {"docker": _image_folder(root)}}
    (root / "agenteval.yaml").write_text(json.dumps(manifest))
    (root / "boxed.py").write_text(
        "import pathlib\n"
        "def run(task):\n"
        "    if pathlib.Path(__file__).with_name('hold').exists():\n"
        "        task.environment.exec(['sleep', '600'])\n"
        "    return task.input\n"
    )
    (root / "hold").touch()
    run_id = f"hostskill{os.getpid()}"
    hosts = ["--agenteval-docker-host", DEFAULT, "--agenteval-docker-host", second.host]
    argv = ["--agenteval", "ds", "--agenteval-run-id", run_id, *hosts]
    session = pytester.popen(
        [sys.executable, "-m", "pytest", *argv, "--agenteval-concurrency", "4"],
        stdin=None,  # type: ignore[arg-type]
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    deadline = time.monotonic() + 180  # hang guard
    while time.monotonic() < deadline:
        if all(len(_on(host, run_id)) == 2 for host in (DEFAULT, second.host)):
            break
        time.sleep(0.2)
    os.killpg(session.pid, signal.SIGKILL)
    session.wait(30)
    # The dead session's containers outlive it (the second daemon is this test's alone; on
    # the shared default one another test's session may sweep them first, see below).
    assert len(_on(second.host, run_id)) == 2
    (root / "hold").unlink()
    resumed = pytester.runpytest_subprocess(*argv, "--resume-suite")
    resumed.assert_outcomes(passed=4)
    # The second daemon's two are the resume's to sweep; the default daemon's, unless swept.
    resumed.stdout.re_match_lines([r".*removed [234] sandbox containers of a session that is gone"])
    assert [_on(host, run_id) for host in (DEFAULT, second.host)] == [[], []]


def test_a_docker_host_that_is_no_address_is_a_usage_error(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`--agenteval-docker-host` and its ini twin take what `docker --host` takes, and say
    so, quoting the bad value."""
    dataset({"a.yaml": {"input": "x", "expected": "x"}})
    result = pytester.runpytest("--agenteval-docker-host", "build-2")
    result.stderr.fnmatch_lines(["*'build-2' is not a Docker daemon's address*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    pytester.makeini("[pytest]\nagenteval_docker_hosts = unix:///run/a.sock ci@build-2\n")
    result = pytester.runpytest("--agenteval", "ds")
    result.stderr.fnmatch_lines(["*agenteval_docker_hosts: 'ci@build-2' is not a Docker*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_a_task_naming_a_bad_docker_host_is_an_error_at_its_line(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A task's `docker: hosts:` entry that is no daemon address is a load error at its line,
    naming the field; the other tasks run."""
    dataset(
        {
            "good.yaml": {"input": "x", "expected": "x"},
            "bad.yaml": {
                "input": "x",
                "expected": "x",
                "sandbox": {"docker": {"image": "i:1", "hosts": ["build-2"]}},
            },
        },
        manifest={"agent": {"command": ["echo", "-n", "{input}"]}},
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.stdout.fnmatch_lines(
        ["*bad.yaml:*sandbox.docker.hosts*'build-2' is not a Docker daemon's address*"]
    )
    result.assert_outcomes(passed=1, errors=1)


@pytest.mark.slow
def test_each_daemon_keeps_its_own_bound_and_the_roomier_takes_the_rest(
    pytester: pytest.Pytester, dataset: DatasetMaker, second: Daemon, own_slots: Path
) -> None:
    """Two daemons with their own `max_sandboxes` (the default one 1, the second 3) at
    concurrency 8 on two xdist workers: never more than one container of the run is alive on
    the first, nor three on the second (each sampled with `docker ps` from a thread), the
    second runs the rest, and each record names the daemon its attempt ran on."""
    tasks = {f"b{i:02}.yaml": {"input": f"n{i}", "expected": f"n{i}"} for i in range(16)}
    root = dataset(
        tasks, manifest={"agent": {"command": ["sh", "-c", 'sleep 1; echo -n "$0"', "{input}"]}}
    )
    hosts = [{"url": DEFAULT, "max_sandboxes": 1}, {"url": second.host, "max_sandboxes": 3}]
    manifest = json.loads((root / "agenteval.yaml").read_text())
    manifest["defaults"] = {"sandbox": {"docker": {**_image_folder(root), "hosts": hosts}}}
    (root / "agenteval.yaml").write_text(json.dumps(manifest))
    run_id = f"bound{os.getpid()}"
    with _sampled([DEFAULT, second.host], run_id) as seen:
        result = pytester.runpytest_subprocess(
            "--agenteval", "ds", "-n", "2", "--agenteval-concurrency", "8",
            "--agenteval-run-id", run_id,
        )  # fmt: skip
    result.assert_outcomes(passed=16)
    assert max(seen[DEFAULT]) == 1, f"alive on the bound-1 daemon, sampled: {seen[DEFAULT]}"
    assert max(seen[second.host]) == 3, f"alive on the second, sampled: {seen[second.host]}"
    ran = Counter(record["sandbox"].get("host") for record in _records(pytester.path, run_id))
    assert set(ran) == {DEFAULT, second.host} and ran[second.host] > ran[DEFAULT], ran


@pytest.mark.slow
def test_attempts_ahead_take_the_machine_bound_and_a_daemon_bound_together(
    pytester: pytest.Pytester, dataset: DatasetMaker, second: Daemon, own_slots: Path
) -> None:
    """`--agenteval-max-sandboxes 3` over two daemons bounded to 2 each, at concurrency 8 on
    two xdist workers: an attempt is admitted ahead only with its machine slot and its
    daemon's at once, so the run ends (no deadlock), never more than two containers of the
    run are alive on either daemon (sampled), and both ran some."""
    tasks = {f"t{i:02}.yaml": {"input": f"n{i}", "expected": f"n{i}"} for i in range(12)}
    root = dataset(
        tasks, manifest={"agent": {"command": ["sh", "-c", 'sleep 1; echo -n "$0"', "{input}"]}}
    )
    manifest = json.loads((root / "agenteval.yaml").read_text())
    hosts = [{"url": DEFAULT, "max_sandboxes": 2}, {"url": second.host, "max_sandboxes": 2}]
    manifest["defaults"] = {"sandbox": {"docker": {**_image_folder(root), "hosts": hosts}}}
    (root / "agenteval.yaml").write_text(json.dumps(manifest))
    run_id = f"both{os.getpid()}"
    with _sampled([DEFAULT, second.host], run_id) as seen:
        result = pytester.runpytest_subprocess(
            "--agenteval", "ds", "-n", "2", "--agenteval-concurrency", "8",
            "--agenteval-max-sandboxes", "3", "--agenteval-run-id", run_id,
        )  # fmt: skip
    result.assert_outcomes(passed=12)
    for host, counts in seen.items():
        assert max(counts) <= 2, f"alive on {host}, sampled: {counts}"
    ran = Counter(record["sandbox"].get("host") for record in _records(pytester.path, run_id))
    assert set(ran) == {DEFAULT, second.host}, ran
    assert _on(DEFAULT, run_id) == [] and _on(second.host, run_id) == []


@contextlib.contextmanager
def _sampled(hosts: list[str], run_id: str) -> Iterator[dict[str, list[int]]]:
    """How many containers of the run each daemon of `hosts` has, sampled with `docker ps`
    over and over while the block runs (filled in when it ends)."""
    by_host: dict[str, list[int]] = {host: [] for host in hosts}
    with sampling(lambda: [len(_on(host, run_id)) for host in hosts]) as rounds:
        yield by_host
    for counts in rounds:
        for host, count in zip(hosts, counts, strict=True):
            by_host[host].append(count)


def test_a_bound_on_the_command_line_is_checked(pytester: pytest.Pytester) -> None:
    """`--agenteval-docker-host URL?max_sandboxes=N` wants N a whole number of at least 1
    and says so, quoting the value."""
    result = pytester.runpytest("--agenteval-docker-host", "unix:///a.sock?max_sandboxes=0")
    result.stderr.fnmatch_lines(["*max_sandboxes must be a whole number of at least 1*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_a_bounded_host_in_a_task_is_kept_as_its_entry_and_a_bad_bound_is_refused() -> None:
    """`docker: hosts:` takes plain addresses and `{url, max_sandboxes}` mixed; a bounded
    one is kept as `URL?max_sandboxes=N` (what the command line takes), and a bound below 1
    or an unknown key is refused."""
    from pydantic import ValidationError

    from pytest_agenteval.core.model import DockerImage
    from pytest_agenteval.core.options import split_docker_host

    hosts = [{"url": "unix:///a.sock", "max_sandboxes": 4}, "ssh://ci@build-2"]
    docker = DockerImage.model_validate({"image": "i:1", "hosts": hosts})
    assert docker.hosts == ["unix:///a.sock?max_sandboxes=4", "ssh://ci@build-2"]
    assert [split_docker_host(h) for h in docker.hosts] == [
        ("unix:///a.sock", 4),
        ("ssh://ci@build-2", None),
    ]
    for bad in ({"url": "unix:///a.sock", "max_sandboxes": 0}, {"url": "unix:///a", "max": 2}):
        with pytest.raises(ValidationError):
            DockerImage.model_validate({"image": "i:1", "hosts": [bad]})


def test_the_task_schema_takes_both_forms_of_a_docker_host() -> None:
    """The published task schema describes `hosts:` as written: addresses and bounded ones."""
    from written import schema_problems

    hosts = [{"url": "unix:///a.sock", "max_sandboxes": 4}, "ssh://ci@build-2"]
    task = {"id": "t", "input": "x", "sandbox": {"docker": {"image": "i:1", "hosts": hosts}}}
    assert schema_problems("task", task) == []
    bad = {**task, "sandbox": {"docker": {"image": "i:1", "hosts": [{"url": "u"}]}}}
    assert schema_problems("task", bad) != []


def test_a_reservation_takes_the_machine_slot_and_the_daemon_slot_together(own_slots: Path) -> None:
    """Admission ahead under `--agenteval-max-sandboxes 2` to a daemon bounded to 1: the
    first reservation holds both slots; the second finds the daemon full and holds nothing
    (no machine slot sits idle while it waits), and gets both once the first gives back."""
    from pytest_agenteval.execution.docker import DockerSession
    from pytest_agenteval.execution.environment import SandboxPolicy
    from pytest_agenteval.execution.limits import held_slots

    bounded = "unix:///nowhere.sock"
    policy = SandboxPolicy(max_alive=2, hosts=(f"{bounded}?max_sandboxes=1",))
    session = DockerSession(policy=policy)
    hosts = session.policy.hosts

    def held() -> tuple[int, int]:
        from pytest_agenteval.execution.sandboxes import host_slots

        return (
            held_slots(own_slots / "sandboxes", "sandbox", 2),
            held_slots(host_slots(bounded), "sandbox", 1),
        )

    assert session.reserve("a", hosts) and held() == (1, 1)
    assert not session.reserve("b", hosts) and held() == (1, 1)
    session.unreserve("a")
    assert held() == (0, 0)
    assert session.reserve("b", hosts) and held() == (1, 1)
    assert session.place(hosts, "b")[0] == bounded, "the container takes what was reserved"
    assert held() == (1, 1)


def test_a_slot_given_back_in_this_process_wakes_its_waiter(own_slots: Path) -> None:
    """A thread waiting for a slot given back (`wait_freed`, with no poll at all) is woken
    when this process releases one, and then takes it (`take_slot` waits so)."""
    from pytest_agenteval.execution.limits import freed, release_slot, try_slot, wait_freed

    holder = try_slot(own_slots, "s", 1)
    assert holder is not None
    mark = freed()
    got: list[int | None] = []

    def wait() -> None:
        wait_freed(mark, timeout=None)
        got.append(try_slot(own_slots, "s", 1))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    release_slot(holder)
    waiter.join(60)  # a hang guard: without the wake-up it would wait forever
    assert not waiter.is_alive() and got and got[0] is not None
    release_slot(got[0])


@pytest.mark.slow
def test_a_daemon_killed_mid_run_gets_no_attempt_after_it_died(
    pytester: pytest.Pytester, dataset: DatasetMaker, own_slots: Path
) -> None:
    """Two daemons taking turns, the second kill -9'd once two attempts are recorded: every
    attempt made after it died runs on the default daemon and passes (the one that found it
    dead is made there instead of failing), none is placed on the dead one."""
    if shutil.which("busybox") is None:
        pytest.skip("busybox-static is not installed")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker daemon answers")
    # killed: not the module's `second`, which later tests use; its own machine folder keeps
    # its sweep off the daemons other tests' sessions used (`second`'s orphans are theirs)
    dying = own_daemon()
    try:
        tasks = {f"d{i}.yaml": {"input": f"n{i}", "expected": f"n{i}"} for i in range(8)}
        root = dataset(
            tasks,
            manifest={"agent": {"command": ["sh", "-c", 'sleep 0.3; echo -n "$0"', "{input}"]}},
        )
        docker = {**_image_folder(root), "hosts": [DEFAULT, dying.host]}
        manifest = json.loads((root / "agenteval.yaml").read_text())
        manifest["defaults"] = {"sandbox": {"docker": docker}}
        (root / "agenteval.yaml").write_text(json.dumps(manifest))
        run_id = f"down{os.getpid()}"
        records = pytester.path / ".pytest_cache/agenteval/runs" / run_id / "records.jsonl"
        done, recorded_at_death = threading.Event(), []

        def kill_after_two() -> None:
            while not done.wait(0.05):
                if records.exists() and len(records.read_text().splitlines()) >= 2:
                    dying.kill()
                    recorded_at_death.append(len(records.read_text().splitlines()))
                    return

        killer = threading.Thread(target=kill_after_two)
        killer.start()
        try:
            pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-run-id", run_id)
        finally:
            done.set()
            killer.join()
        (dead_at,) = recorded_at_death
        ran = _records(pytester.path, run_id)
        assert len(ran) == 8
        assert dying.host in [r.get("sandbox", {}).get("host") for r in ran[:dead_at]]
        after = ran[dead_at + 1 :]  # the attempt in flight when it died aside
        assert after, f"the daemon died only after the run: {dead_at} records"
        placed = [(r["status"], r.get("sandbox", {}).get("host")) for r in after]
        assert placed == [("pass", DEFAULT)] * len(after), placed
    finally:
        dying.close()


def test_placement_passes_over_a_daemon_found_down_while_another_is_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A daemon marked down (it did not answer) gets no container while another daemon of the
    task's is up, and is tried again once `DOWN_FOR` has passed; with every one down,
    placement still names one (its attempt then says the daemon is gone)."""
    from pytest_agenteval.execution import docker

    session = docker.DockerSession("client/1/1")
    hosts = ("unix:///tmp/a.sock", "unix:///tmp/b.sock")
    session.mark_down(hosts[1])
    assert [session.place(hosts)[0] for _ in range(4)] == [hosts[0]] * 4
    assert session.up(hosts) == (hosts[0],)
    session.mark_down(hosts[0])
    assert session.up(hosts) == () and session.place(hosts)[0] in hosts
    monkeypatch.setattr(docker, "DOWN_FOR", 0.0)
    session.mark_down(hosts[1])
    assert session.up(hosts) == (hosts[1],)  # its time is over: tried again


def test_the_placement_rule_weighs_an_unbounded_daemon_like_the_roomiest_bounded_one() -> None:
    """`ranked`: an unbounded daemon counts as bounded like the roomiest bounded one beside it
    (as 1 when none is), so it is tried after a less loaded bounded daemon; a full bounded
    daemon is left out; equal loads go to the fewest alive, then the fewest made."""
    from pytest_agenteval.execution.docker_placement import Daemon, ranked

    plain, bounded = "unix:///a.sock", "unix:///b.sock"
    assert ranked([Daemon(plain, None, 0, 1), Daemon(bounded, 2, 0, 0)]) == [bounded, plain]
    assert ranked([Daemon(plain, None, 1), Daemon(bounded, 2, 0)]) == [bounded, plain]
    assert ranked([Daemon(plain, None, 2), Daemon(bounded, 2, 1)]) == [bounded, plain]
    assert ranked([Daemon(plain, None, 3), Daemon(bounded, 2, 2)]) == [plain]
    assert ranked([Daemon(plain, None, 3), Daemon(bounded, 8, 4)]) == [plain, bounded]
    assert ranked([Daemon(plain, None, 1, 3), Daemon(None, None, 1, 2)]) == [None, plain]


def test_a_bounded_daemon_beside_a_plain_one_gets_containers_in_turns(own_slots: Path) -> None:
    """`hosts: [plain, {url: B, max_sandboxes: 2}]`: containers alternate between the two
    while both have room, B never holds more than its 2, and the plain daemon takes the
    rest (before, every container went to the plain one)."""
    from pytest_agenteval.execution.docker import DockerSession
    from pytest_agenteval.execution.environment import SandboxPolicy
    from pytest_agenteval.execution.limits import release_slot

    plain, bounded = "unix:///nowhere-a.sock", "unix:///nowhere-b.sock"
    policy = SandboxPolicy(hosts=(plain, f"{bounded}?max_sandboxes=2"))
    session = DockerSession(policy=policy)
    release_later: list[int | None] = []
    order: list[tuple[str | None, bool]] = []
    for i in range(6):
        host, slot, _ = session.place(session.policy.hosts, f"c{i}")
        session.started(f"c{i}", host)
        order.append((host, slot is not None))
        release_later.append(slot)
    assert [host for host, _ in order] == [plain, bounded, plain, bounded, plain, plain]
    assert all(held == (host == bounded) for host, held in order)
    for slot in release_later:
        release_slot(slot)


@pytest.mark.slow
def test_a_plain_daemon_and_a_bounded_one_both_run_containers(
    pytester: pytest.Pytester, dataset: DatasetMaker, second: Daemon, own_slots: Path
) -> None:
    """The guide's mix, `hosts: [default, {url: second, max_sandboxes: 2}]`, 8 attempts at
    concurrency 4: both daemons ran containers of the run (records and events), never more
    than 2 alive on the bounded one (sampled), and none is left on either."""
    tasks = {f"m{i}.yaml": {"input": f"n{i}", "expected": f"n{i}"} for i in range(8)}
    root = dataset(
        tasks, manifest={"agent": {"command": ["sh", "-c", 'sleep 0.5; echo -n "$0"', "{input}"]}}
    )
    hosts = [DEFAULT, {"url": second.host, "max_sandboxes": 2}]
    manifest = json.loads((root / "agenteval.yaml").read_text())
    manifest["defaults"] = {"sandbox": {"docker": {**_image_folder(root), "hosts": hosts}}}
    (root / "agenteval.yaml").write_text(json.dumps(manifest))
    run_id = f"mix{os.getpid()}"
    since = time.time() - 1
    with _sampled([second.host], run_id) as seen:
        result = pytester.runpytest_subprocess(
            "--agenteval", "ds", "--agenteval-concurrency", "4", "--agenteval-run-id", run_id
        )
    result.assert_outcomes(passed=8)
    ran = Counter(record["sandbox"].get("host") for record in _records(pytester.path, run_id))
    assert set(ran) == {DEFAULT, second.host}, ran
    assert max(seen[second.host]) <= 2, f"alive on the bounded daemon: {seen[second.host]}"
    for host in (DEFAULT, second.host):
        assert _started_on(host, run_id, since) > 0 and _on(host, run_id) == []
