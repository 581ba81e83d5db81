"""The Docker sandbox: an attempt's files and programs in a fresh container of its own, and
the session that owns a process's containers.

A second kind of `Environment`. Each attempt gets a container created from the task's image
(`docker_images.py`), with no network by default, bounded memory, processes and CPUs, no
privileges and no host mount; the workspace template is copied in as a tar stream
(`docker_files.py`), programs run with `docker exec` (`docker_cli.py`), and the container is
removed when the attempt ends.

Orphans: every container carries labels naming its session (host, pid and the pid's start
time) and its run. A session or worker killed before it could tear down leaves containers
running; the first sandbox of the next process on this machine (and `agenteval repair`)
removes those whose session is gone, as does the xdist controller at the end of a session
whose worker died. Kept containers (`--agenteval-keep-sandboxes`) are renamed
`agenteval-kept-...` and left alone.

A daemon that stops answering (killed, its socket gone) is passed over by placement for
`DOWN_FOR` seconds, then tried again; the container being made there when it was found gone
is made on another daemon of the task's with room instead (its attempt does not fail for it).
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath

from ..core.environment import ChangedFile, Finished
from ..core.identity import AttemptId
from ..core.model import ARTIFACTS_MAX_BYTES, DockerImage, SandboxSpec
from ..core.options import split_docker_host
from ..sources.dataset import BuildFolder
from ..store.locks import locked
from .docker_cli import (
    DAEMON_GONE,
    DOCKER_TIMEOUT,
    DaemonGone,
    SandboxUnavailable,
    checked,
    cli,
    docker,
    docker_env,
    remove_now,
    removed,
    unreachable,
)
from .docker_files import changes, copy_out, file_tar, first_file, workspace_tar
from .docker_images import DockerImages
from .docker_placement import Daemon, ranked
from .environment import SandboxPolicy
from .limits import freed, held_slots, release_slot, try_slot, wait_freed
from .process import run_program
from .sandboxes import (
    Swept,
    free_sandbox_slot,
    host_slots,
    machine_folder,
    session_alive,
    session_label,
)
from .workspaces import folder_name

LABEL = "agenteval.session"
"""Label on every container: the session that made it, `host/pid/start time`."""
RUN_LABEL = "agenteval.run"
"""Label on every container: the id of the run its attempt belongs to."""
KEPT = "agenteval-kept-"
"""Prefix a kept container is renamed to: no session's cleanup removes it."""
NAME_AND_SESSION = '{{.Names}}\t{{.Label "agenteval.session"}}'
"""`docker ps --format` of a container's name and session label."""
REMOVE_AGAIN = (0.5, 2.0, 0.0)
"""Seconds before a refused removal of a slot-holding container is tried again (three tries)."""
HOSTS_FILE = "docker-hosts"
"""In the machine folder: the daemons this user's sessions used besides the default one."""
DOWN_FOR = 30.0
"""Seconds placement passes over a daemon found not answering before trying it again."""


def remove_orphans(run_id: str | None = None, hosts: Sequence[str | None] = (None,)) -> Swept:
    """Remove the containers of this client host's sessions that are gone, on every daemon of
    `hosts` (None: the default one; kept containers aside; of the run `run_id` only, when
    given). A daemon that cannot be reached is passed over unless none can be."""
    names: list[str] = []
    sessions: list[str] = []
    failed: list[SandboxUnavailable] = []
    for host in dict.fromkeys(hosts):
        try:
            swept = _remove_orphans_on(run_id, host)
        except SandboxUnavailable as exc:
            failed.append(exc)
            continue
        names += swept.names
        sessions += swept.sessions
    if failed and len(failed) == len(dict.fromkeys(hosts)):
        raise failed[0]
    return Swept(tuple(names), tuple(dict.fromkeys(sessions)))


def _remove_orphans_on(run_id: str | None, host: str | None) -> Swept:
    wanted = f"{RUN_LABEL}={run_id}" if run_id is not None else LABEL
    listed = checked(
        ["ps", "-a", "--filter", f"label={wanted}", "--format", NAME_AND_SESSION],
        "listing the sandboxes",
        host=host,
    )
    gone: dict[str, str] = {}
    for line in listed.decode().splitlines():
        name, _, label = line.partition("\t")
        if name and label and not name.startswith(KEPT) and not session_alive(label):
            gone[name] = label
    if gone:
        docker(["rm", "-f", *gone], host=host)
    return Swept(tuple(gone), tuple(dict.fromkeys(gone.values())))


def known_hosts() -> list[str | None]:
    """The daemons sessions of this client machine's user used (`note_host`), the default
    one first: what `agenteval repair` sweeps."""
    try:
        listed = (machine_folder() / HOSTS_FILE).read_text().splitlines()
    except OSError:
        listed = []
    return [None, *dict.fromkeys(line for line in listed if line and _may_be_there(line))]


def _may_be_there(host: str) -> bool:
    """Whether a daemon may still answer there: a unix socket whose file is gone cannot."""
    return not host.startswith("unix://") or Path(host.removeprefix("unix://")).exists()


def note_host(host: str) -> None:
    """Remember a daemon a session of this machine used, for later sweeps (`known_hosts`)."""
    if host in known_hosts():
        return
    with locked(machine_folder() / f"{HOSTS_FILE}.lock"):
        if host not in known_hosts():
            with (machine_folder() / HOSTS_FILE).open("a") as f:
                f.write(host + "\n")


class DockerSession:
    """What every container of a process shares: its labels, the run's policy, the images
    (made sure of once per daemon), and the containers alive, on which daemon. Its first
    image sweeps the orphans of sessions that are gone, on every daemon it may use; `close`
    ends it with none of its containers left."""

    def __init__(self, session: str | None = None, policy: SandboxPolicy | None = None) -> None:
        """`session` is the label of the session the containers belong to (default: this
        process's)."""
        self.session = session or session_label()
        policy = policy or SandboxPolicy()
        self.caps: dict[str, int] = {}
        """Each daemon's own bound of containers alive on this machine (`?max_sandboxes=N`)."""
        self.policy = replace(policy, hosts=self._addresses(policy.hosts))
        self.run_id: str | None = None
        """The run the containers' attempts belong to (labelled), once known."""
        self.images: dict[str | None, DockerImages] = {}
        """The images of each daemon (None: the default one)."""
        self.swept: list[Swept] = []
        """What this process's orphan sweep removed (said at the session's end)."""
        self._lock = threading.Lock()
        self._swept_on: set[str | None] = set()
        self._removing: dict[str | None, subprocess.Popen[bytes]] = {}
        self._doomed: dict[str | None, list[str]] = {}
        """Containers torn down while a removal on their daemon ran: the next removal's."""
        self._freeing: list[threading.Thread] = []
        """Removals of containers that hold a slot (`remove_then_free`)."""
        self.alive: dict[str, str | None] = {}
        """Containers of this process not torn down yet (an interrupted attempt's), and the
        daemon each is on."""
        self._placed: dict[str | None, int] = {}
        self._reserved: dict[str, tuple[str | None, int | None, int | None]] = {}
        """What `reserve` took ahead for a container not made yet: its daemon and slots."""
        self._down: dict[str | None, float] = {}
        """Daemons found not answering, until when (monotonic) placement passes them over."""

    def _addresses(self, entries: Sequence[str]) -> tuple[str, ...]:
        """The daemons' addresses of host entries, their bounds noted in `caps` (the run's
        are noted first and win)."""
        addresses = []
        for entry in entries:
            url, cap = split_docker_host(entry)
            if cap is not None:
                self.caps.setdefault(url, cap)
            addresses.append(url)
        return tuple(dict.fromkeys(addresses))

    def hosts_for(self, spec: SandboxSpec) -> tuple[str | None, ...]:
        """The daemons the task's containers may go to: the run's (`--agenteval-docker-host`,
        ini `agenteval_docker_hosts`), else the task's `docker: hosts:`, else the default."""
        if self.policy.hosts:
            return self.policy.hosts
        named = spec.docker.hosts if spec.docker is not None else []
        with self._lock:
            return self._addresses(named) or (None,)

    def reserve(self, name: str, hosts: Sequence[str | None]) -> bool:
        """Take now, for the container `name` (made later by `place`), every slot it holds:
        the machine's and its daemon's, all or none, so no slot is held while another is
        waited for; False when one is not free (nothing is held then)."""
        placed = self._try_place(hosts)
        if placed is None:
            return False
        with self._lock:
            self._reserved[name] = placed
        return True

    def unreserve(self, name: str) -> None:
        """Give back the slots `reserve` took for `name` if its container never took them."""
        with self._lock:
            placed = self._reserved.pop(name, None)
        if placed is not None:
            release_slot(placed[1])
            release_slot(placed[2])

    def place(
        self, hosts: Sequence[str | None], name: str = ""
    ) -> tuple[str | None, int | None, int | None]:
        """The daemon of `hosts` the container `name` goes to, the slot of that daemon's own
        bound and the machine's (`--agenteval-max-sandboxes`) it holds (None: no such
        bound): what `reserve` took for it, else taken now, waiting until both are free."""
        with self._lock:
            placed = self._reserved.pop(name, None)
        while placed is None:
            mark = freed()
            placed = self._try_place(hosts)
            if placed is None:
                wait_freed(mark)
        return placed

    def mark_down(self, host: str | None) -> None:
        """The daemon `host` does not answer: place nothing there for `DOWN_FOR` seconds."""
        with self._lock:
            self._down[host] = time.monotonic() + DOWN_FOR

    def up(self, hosts: Sequence[str | None]) -> tuple[str | None, ...]:
        """The daemons of `hosts` not found down lately (`mark_down`)."""
        now = time.monotonic()
        with self._lock:
            return tuple(h for h in hosts if self._down.get(h, 0.0) <= now)

    def _try_place(
        self, hosts: Sequence[str | None]
    ) -> tuple[str | None, int | None, int | None] | None:
        """The least loaded daemon of `hosts` (`docker_placement.ranked`) and the slots held
        (its own, the machine's), or None when one of them is not free now (nothing is held
        then). A daemon found down lately is passed over while another is up."""
        hosts = self.up(hosts) or hosts
        machine = None
        if self.policy.max_alive is not None:
            machine = free_sandbox_slot(self.policy.max_alive)
            if machine is None:
                return None
        if len(hosts) == 1 and hosts[0] not in self.caps:
            return hosts[0], None, machine
        for host in ranked(self._daemons(hosts)):
            slot = None
            if host in self.caps:
                slot = try_slot(host_slots(host), "sandbox", self.caps[host])
                if slot is None:
                    continue
            with self._lock:
                self._placed[host] = self._placed.get(host, 0) + 1
            return host, slot, machine
        release_slot(machine)
        return None

    def _daemons(self, hosts: Sequence[str | None]) -> list[Daemon]:
        """What placement weighs of each daemon of `hosts`: a bounded one's slots held on this
        machine, an unbounded one's containers of this process (made or reserved)."""
        with self._lock:
            mine = Counter(self.alive.values())
            mine.update(placed[0] for placed in self._reserved.values())
            made = dict(self._placed)
        daemons = []
        for host in hosts:
            cap = self.caps.get(host) if host is not None else None
            alive = mine[host]
            if host is not None and cap is not None:
                alive = held_slots(host_slots(host), "sandbox", cap)
            daemons.append(Daemon(host, cap, alive, made.get(host, 0)))
        return daemons

    def image(
        self,
        docker: DockerImage,
        build: BuildFolder | None = None,
        host: str | None = None,
        hosts: Sequence[str | None] = (),
    ) -> tuple[str, str]:
        """The name and id of the image a container on `host` starts from
        (`DockerImages.ensure`); the session's first sweeps the orphans of sessions that are
        gone on every daemon of `hosts` it has not swept yet."""
        with self._lock:
            sweep = [h for h in dict.fromkeys([host, *hosts]) if h not in self._swept_on]
            self._swept_on.update(sweep)
            images = self.images.setdefault(host, DockerImages(host))
        if sweep:
            for each in sweep:
                if each is not None:
                    note_host(each)
            with contextlib.suppress(SandboxUnavailable):  # its own attempt says so
                swept = remove_orphans(hosts=sweep)
                if swept.names:
                    with self._lock:
                        self.swept.append(swept)
        return images.ensure(docker, build)

    def start(self) -> list[Swept]:
        """Sweep the orphans of sessions that are gone on every daemon this machine's sessions
        used and the run names, once per session; what it removed. (A daemon only a task
        names is swept at its first image.)"""
        with self._lock:
            hosts = [*known_hosts(), *self.policy.hosts]
            sweep = [h for h in dict.fromkeys(hosts) if h not in self._swept_on]
            self._swept_on.update(sweep)
        if not sweep:
            return []
        try:
            swept = remove_orphans(hosts=sweep)
        except SandboxUnavailable:
            with self._lock:  # the next start tries again
                self._swept_on.difference_update(sweep)
            raise
        if not swept.names:
            return []
        with self._lock:
            self.swept.append(swept)
        return [swept]

    def labels(self) -> dict[str, str]:
        """The labels of this process's containers: its session, and its run when known."""
        return {LABEL: self.session, **({RUN_LABEL: self.run_id} if self.run_id else {})}

    def started(self, name: str, host: str | None = None) -> None:
        """A container of this process is being made (removed at `close` unless torn down)."""
        with self._lock:
            self.alive[name] = host

    def remove_later(self, name: str, host: str | None = None) -> None:
        """Remove a container without waiting for it (`wait` does, at the end). One `docker
        rm` runs at a time per daemon: the containers torn down meanwhile go together in the
        next, so under concurrency an attempt costs less than one docker call to remove."""
        with self._lock:
            self.alive.pop(name, None)
            doomed = self._doomed.setdefault(host, [])
            doomed.append(name)
            running = self._removing.get(host)
            if running is not None and running.poll() is None:
                return  # the next teardown (or `wait`) takes this one along
            self._removing[host] = self._remove(doomed, host)
            self._doomed[host] = []

    def remove_then_free(self, name: str, slots: Sequence[int], host: str | None = None) -> None:
        """Remove a container that holds sandbox slots (the machine's, its daemon's) without
        waiting for it, and give them back once it is gone (never before: the caps count
        containers that exist). A removal the daemon refused (busy under load) is tried
        again before the slots are given back; one that never succeeds is left to `close`."""

        def remove() -> None:
            try:
                for pause in REMOVE_AGAIN:
                    if removed([name], host):
                        self.forget(name)
                        break
                    time.sleep(pause)
            finally:
                for slot in slots:
                    release_slot(slot)

        thread = threading.Thread(target=remove, name="agenteval-remove", daemon=True)
        with self._lock:
            self._freeing = [t for t in self._freeing if t.is_alive()] + [thread]
        thread.start()

    @staticmethod
    def _remove(names: list[str], host: str | None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*cli(host), "rm", "-f", *names],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=docker_env(),
        )

    def forget(self, name: str) -> None:
        """A container of this process is gone or kept: `close` leaves it."""
        with self._lock:
            self.alive.pop(name, None)

    def close(self) -> None:
        """The session is over: remove the containers no attempt tore down (Ctrl-C, a stop)
        and wait until every removal is done."""
        with self._lock:
            left, self.alive = self.alive, {}
            reserved = list(self._reserved)
        for name in reserved:
            self.unreserve(name)
        for host in dict.fromkeys(left.values()):
            remove_now(sorted(n for n, h in left.items() if h == host), host)
        self.wait()

    def wait(self) -> None:
        """Wait until the containers being removed, and those waiting for it, are gone."""
        with self._lock:
            removing, self._removing = self._removing, {}
            doomed, self._doomed = self._doomed, {}
            freeing, self._freeing = self._freeing, []
        for removal in removing.values():
            removal.wait()
        for thread in freeing:
            thread.join()
        for host, names in doomed.items():
            if names:
                remove_now(names, host)


class DockerEnvironment:
    """One attempt's container: created at once, removed (or kept) at teardown."""

    def __init__(
        self,
        spec: SandboxSpec,
        name: str,
        template: Path | None,
        session: DockerSession,
        build: BuildFolder | None = None,
        max_bytes: int = ARTIFACTS_MAX_BYTES,
    ) -> None:
        """A started container of `spec`'s image (built from `build`, the folder and its
        digest, when it has one) holding a copy of `template`; `changed_files` holds the
        bytes of at most `max_bytes` of them (the task's `artifacts: {max_bytes}`). Under
        `--agenteval-max-sandboxes` or on a bounded daemon it holds the slots
        `session.reserve` took ahead for `name`, else waits until they are free."""
        self.spec = spec
        self.name = name
        self.template = template
        self.max_bytes = max_bytes
        self._dead: str | None = None
        assert spec.docker is not None, "a Docker sandbox names its image"
        hosts = session.hosts_for(spec)
        self.host, self._host_slot, self._slot = session.place(hosts, name)
        """The daemon the container is on (None: the default one), and the slots of its own
        bound (`?max_sandboxes=N`) and of the machine's (`--agenteval-max-sandboxes`) the
        container holds until it is gone."""
        self.sandbox_host = self.host if hosts != (None,) else None
        """The daemon the record names: when the run or task names its daemons."""
        self.image_id: str | None = None
        """The id of the image the container was made of."""
        self._session = session
        self.keep = session.policy.keep
        self.captured: dict[str, str] | None = None
        """What `sandbox: environment:` captured inside, by name (None: nothing asked)."""
        while True:
            try:
                self._make(build, hosts)
                return
            except DaemonGone:
                session.mark_down(self.host)
                if not session.up(hosts):
                    raise
            self.host, self._host_slot, self._slot = session.place(hosts)  # one with room
            if self.sandbox_host is not None:
                self.sandbox_host = self.host

    def _make(self, build: BuildFolder | None, hosts: Sequence[str | None]) -> None:
        """Start the container on `self.host`, the workspace copied in; a failure gives back
        what it held."""
        spec, name, session = self.spec, self.name, self._session
        assert spec.docker is not None
        try:
            image, self.image_id = session.image(spec.docker, build, self.host, hosts)
        except BaseException:
            release_slot(self._slot)
            release_slot(self._host_slot)
            raise
        session.started(name, self.host)
        try:
            checked(
                self._run_argv(image, session.labels()),
                f"starting a container of {image!r}",
                host=self.host,
            )
            owner = _owner(spec.user)
            if self.template is not None or owner != (0, 0):
                # else `docker run --workdir` made the empty folder, and it is root's
                checked(
                    ["cp", "--archive", "-", f"{name}:/"],
                    "copying the workspace in",
                    input=workspace_tar(self.template, spec.workdir, owner),
                    host=self.host,
                )
            if spec.environment:
                self.captured = self._capture(spec.environment)
        except DaemonGone:  # nothing of it runs: its slots are free, its name for another daemon
            session.remove_later(name, self.host)  # should the daemon come back
            release_slot(self._slot)
            release_slot(self._host_slot)
            self._slot = self._host_slot = None
            raise
        except BaseException:
            self._remove()
            raise

    def _run_argv(self, image: str, labels: Mapping[str, str]) -> list[str]:
        """`docker run` of a container that waits (`sleep infinity`) for programs to exec;
        the workspace is copied in before any runs."""
        spec = self.spec
        argv = ["run", "--detach", "--name", self.name]
        for label, value in labels.items():
            argv += ["--label", f"{label}={value}"]
        argv += ["--network", spec.network]
        if spec.memory != "unbounded":  # the run allowed no limit (`--agenteval-sandbox-allow`)
            argv += ["--memory", spec.memory, "--memory-swap", spec.memory]
        argv += ["--pids-limit", str(spec.pids_limit), "--workdir", spec.workdir]
        argv += ["--security-opt", "no-new-privileges", "--init"]
        if spec.cpus is not None:
            argv += ["--cpus", f"{spec.cpus:g}"]
        for key, value in spec.env.items():
            argv += ["--env", f"{key}={value}"]
        return [*argv, "--entrypoint", "sleep", image, "infinity"]

    @property
    def workdir(self) -> str:
        return self.spec.workdir

    @property
    def python(self) -> str:
        return "python3"

    @property
    def local_path(self) -> None:
        return None

    @property
    def where(self) -> str:
        if self.keep is None:
            return ""  # removed when the attempt ends; its changed files are its artifacts
        kept = self.kept_name
        return (
            f"docker container {kept} (kept, stopped: `docker start {kept}` to look inside, "
            f"`docker rm -f {kept}` when done)"
        )

    @property
    def kept_name(self) -> str:
        """The name a kept container is renamed to (no session's cleanup removes it)."""
        return KEPT + self.name.removeprefix("agenteval-")

    def _capture(self, commands: Mapping[str, str]) -> dict[str, str]:
        """Each command's output (stdout and stderr, stripped) by name, from one `docker exec`:
        the commands are the arguments of one small script, never joined into it."""
        script = 'for c in "$@"; do printf "\\0"; sh -c "$c" 2>&1; done'
        done = self.exec(["sh", "-c", script, "sh", *commands.values()], timeout=DOCKER_TIMEOUT)
        outputs = done.stdout.split("\0")[1:]
        outputs += [""] * (len(commands) - len(outputs))
        return {name: out.strip() for name, out in zip(commands, outputs, strict=True)}

    def exec(
        self,
        argv: Sequence[str],
        input: bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Finished:
        """Run `argv` in the container; at `timeout` the container is killed (its programs
        with it) and later calls fail. A docker failure under it (its daemon gone, the
        container stopped) raises SandboxUnavailable, never passes for the program's exit."""
        if self._dead is not None:
            raise OSError(f"the sandbox {self.name} is gone: {self._dead}")
        command = [*cli(self.host), "exec", "--workdir", self.spec.workdir]
        if self.spec.user is not None:  # the container's own user stays the image's: `cp` needs it
            command += ["--user", self.spec.user]
        if input is not None:
            command.append("--interactive")
        for key, value in (env or {}).items():
            command += ["--env", f"{key}={value}"]
        done = run_program(
            [*command, self.name, *argv], cwd=Path.cwd(), stdin=input, timeout=timeout
        )
        if done.timed_out:
            self._dead = f"killed at the timeout of {timeout:g}s"
            docker(["kill", self.name], host=self.host)
        elif done.returncode in (126, 127) and "exec failed" in done.stdout + done.stderr:
            raise OSError((done.stdout + done.stderr).strip())  # docker says it on stdout
        elif done.returncode == 137 and self._oom_killed():
            return Finished(137, done.stdout, done.stderr + "\n(sandbox: out of memory)", False)
        elif _docker_failed(done):
            self._check_alive(done.stderr)
        return done

    def _check_alive(self, said: str) -> None:
        """After an exit that may be docker's own (its daemon died mid-call, the container is
        gone): raise SandboxUnavailable unless the container still runs, so the program's own
        status stands."""
        try:
            unreachable(said)
        except DaemonGone:
            self._session.mark_down(self.host)  # the next containers go elsewhere
            raise
        state = docker(["inspect", "--format", "{{.State.Running}}", self.name], host=self.host)
        if state.returncode != 0 or state.stdout.strip() != b"true":
            why = (said.strip() or state.stderr.decode(errors="replace").strip())[-2000:]
            self._dead = "its container stopped under the attempt"
            raise SandboxUnavailable(
                f"sandbox: the container {self.name} stopped under the attempt",
                detail=why or "the docker CLI ended the program's run without a word",
            )

    def _oom_killed(self) -> bool:
        state = docker(["inspect", "--format", "{{.State.OOMKilled}}", self.name], host=self.host)
        return state.stdout.strip() == b"true"

    def read_file(self, path: str) -> bytes:
        inside = self._inside(path)
        with copy_out(self.name, inside, self.host) as tar:
            return first_file(tar, path)[0]

    def read_head(self, path: str, limit: int) -> tuple[bytes, int]:
        """The first `limit` bytes of the file and its size, read from the tar's header: the
        copy is stopped there, so a huge file is never held on the host."""
        inside = self._inside(path)
        with copy_out(self.name, inside, self.host) as tar:
            return first_file(tar, path, limit)

    def write_file(self, path: str, data: bytes | str) -> None:
        data = data.encode() if isinstance(data, str) else data
        tar = file_tar(PurePosixPath(self._inside(path)), data, _owner(self.spec.user))
        done = docker(["cp", "--archive", "-", f"{self.name}:/"], input=tar, host=self.host)
        if done.returncode != 0:
            raise OSError(f"{path}: {done.stderr.decode(errors='replace').strip()}")

    def changed_files(self) -> list[ChangedFile]:
        """The changes against the template, from one `docker cp` of `workdir` read as it
        streams: no file's bytes past the room `max_bytes` leaves are held."""
        with copy_out(self.name, f"{self.spec.workdir.rstrip('/')}/.", self.host) as tar:
            return changes(tar, self.template, self.max_bytes)

    def teardown(self, keep: bool) -> None:
        """Remove the container, or keep it stopped and renamed when the run's
        `--agenteval-keep-sandboxes` asks (`failed`: when `keep`, the attempt did not pass)."""
        try:
            if self.keep == "all" or (self.keep == "failed" and keep):
                docker(["kill", self.name], host=self.host)
                checked(
                    ["rename", self.name, self.kept_name], "keeping the sandbox", host=self.host
                )
            else:
                self._remove()
                return
        except SandboxUnavailable:  # its daemon is gone: the next orphan sweep removes it
            pass
        self._session.forget(self.name)
        for held in (self._slot, self._host_slot):
            release_slot(held)
        self._slot = self._host_slot = None

    def _remove(self) -> None:
        """Remove the container in the background; one that holds a slot gives it back once
        it is gone (the next sandbox may start only then)."""
        slots = [held for held in (self._slot, self._host_slot) if held is not None]
        self._slot = self._host_slot = None
        if not slots:
            self._session.remove_later(self.name, self.host)
        else:
            self._session.remove_then_free(self.name, slots, self.host)

    def _inside(self, path: str) -> str:
        """`path` as an absolute path below `workdir`; one that leads out of it is refused."""
        root = PurePosixPath(self.spec.workdir)
        rel = PurePosixPath(path)
        if rel.is_absolute():
            if not rel.is_relative_to(root):
                raise PermissionError(f"{path!r} is outside the attempt's workspace")
            rel = rel.relative_to(root)
        if ".." in rel.parts:
            raise PermissionError(f"{path!r} is outside the attempt's workspace")
        return str(root / rel)

    def __repr__(self) -> str:
        return f"DockerEnvironment({self.name!r})"


def _docker_failed(done: Finished) -> bool:
    """Whether a `docker exec` may have failed itself rather than its program: 255 (its
    connection to the daemon broke), 125, or the daemon's own words on stderr."""
    return done.returncode in (125, 255) or (
        done.returncode != 0
        and any(w in done.stderr for w in ("Error response from daemon", *DAEMON_GONE))
    )


def _owner(user: str | None) -> tuple[int, int]:
    """The numeric uid/gid the workspace's files get: the sandbox's user when it is numeric."""
    uid_text, _, gid_text = (user or "0").partition(":")
    uid = int(uid_text) if uid_text.isdigit() else 0
    return uid, int(gid_text) if gid_text.isdigit() else uid


def container_name(key: AttemptId, pid: int) -> str:
    """A container name only this attempt of the session `pid` gets, on any daemon: the pid
    and a tag of the session's label (host, pid, start), so two client machines whose
    sessions have equal pids never collide on a shared daemon."""
    tag = hashlib.sha256(session_label(pid).encode()).hexdigest()[:8]
    return f"agenteval-{pid}-{tag}-{folder_name(key)}"  # a variant's key names its variant
