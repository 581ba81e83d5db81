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
"""

from __future__ import annotations

import hashlib
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from ..core.environment import ChangedFile, Finished
from ..core.identity import AttemptId
from ..core.model import ARTIFACTS_MAX_BYTES, DockerImage, SandboxSpec
from ..sources.dataset import BuildFolder
from .docker_cli import (
    DAEMON_GONE,
    DOCKER_TIMEOUT,
    SandboxUnavailable,
    checked,
    docker,
    docker_env,
    remove_now,
    unreachable,
)
from .docker_files import changes, copy_out, file_tar, first_file, workspace_tar
from .docker_images import DockerImages
from .environment import SandboxPolicy
from .limits import release_slot
from .process import run_program
from .sandboxes import Swept, sandbox_slot, session_alive, session_label
from .workspaces import folder_name

LABEL = "agenteval.session"
"""Label on every container: the session that made it, `host/pid/start time`."""
RUN_LABEL = "agenteval.run"
"""Label on every container: the id of the run its attempt belongs to."""
KEPT = "agenteval-kept-"
"""Prefix a kept container is renamed to: no session's cleanup removes it."""
NAME_AND_SESSION = '{{.Names}}\t{{.Label "agenteval.session"}}'
"""`docker ps --format` of a container's name and session label."""


def remove_orphans(run_id: str | None = None) -> Swept:
    """Remove the containers of this host's sessions that are gone (kept ones aside; of the
    run `run_id` only, when given)."""
    wanted = f"{RUN_LABEL}={run_id}" if run_id is not None else LABEL
    listed = checked(
        ["ps", "-a", "--filter", f"label={wanted}", "--format", NAME_AND_SESSION],
        "listing the sandboxes",
    )
    gone: dict[str, str] = {}
    for line in listed.decode().splitlines():
        name, _, label = line.partition("\t")
        if name and label and not name.startswith(KEPT) and not session_alive(label):
            gone[name] = label
    if gone:
        docker(["rm", "-f", *gone])
    return Swept(tuple(gone), tuple(dict.fromkeys(gone.values())))


class DockerSession:
    """What every container of a process shares: its labels, the run's policy, the images
    (made sure of once), and the containers alive. Its first image sweeps the orphans of
    sessions that are gone; `close` ends it with none of its containers left."""

    def __init__(self, session: str | None = None, policy: SandboxPolicy | None = None) -> None:
        """`session` is the label of the session the containers belong to (default: this
        process's)."""
        self.session = session or session_label()
        self.policy = policy or SandboxPolicy()
        self.run_id: str | None = None
        """The run the containers' attempts belong to (labelled), once known."""
        self.images = DockerImages()
        self.swept: list[Swept] = []
        """What this process's orphan sweep removed (said at the session's end)."""
        self._lock = threading.Lock()
        self._started = False
        self._removing: list[subprocess.Popen[bytes]] = []
        self._doomed: list[str] = []
        """Containers torn down while a removal ran: the next removal's."""
        self.alive: set[str] = set()
        """Containers of this process not torn down yet (an interrupted attempt's)."""

    def image(self, docker: DockerImage, build: BuildFolder | None = None) -> tuple[str, str]:
        """The name and id of the image a container starts from (`DockerImages.ensure`); the
        session's first sweeps the orphans of sessions that are gone."""
        self.start()
        return self.images.ensure(docker, build)

    def start(self) -> list[Swept]:
        """Sweep the orphans of sessions that are gone, once per session (again after a
        sweep that failed); what it removed."""
        with self._lock:
            if self._started:
                return []
            swept = remove_orphans()
            if swept.names:
                self.swept.append(swept)
            self._started = True
            return [swept] if swept.names else []

    def labels(self) -> dict[str, str]:
        """The labels of this process's containers: its session, and its run when known."""
        return {LABEL: self.session, **({RUN_LABEL: self.run_id} if self.run_id else {})}

    def started(self, name: str) -> None:
        """A container of this process is being made (removed at `close` unless torn down)."""
        with self._lock:
            self.alive.add(name)

    def remove_later(self, name: str) -> None:
        """Remove a container without waiting for it (`wait` does, at the end). One `docker
        rm` runs at a time: the containers torn down meanwhile go together in the next, so
        under concurrency an attempt costs less than one docker call to remove."""
        with self._lock:
            self.alive.discard(name)
            self._doomed.append(name)
            if self._removing and self._removing[-1].poll() is None:
                return  # the next teardown (or `wait`) takes this one along
            self._removing = [self._remove(self._doomed)]
            self._doomed = []

    @staticmethod
    def _remove(names: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            ["docker", "rm", "-f", *names],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=docker_env(),
        )

    def forget(self, name: str) -> None:
        """A container of this process is gone or kept: `close` leaves it."""
        with self._lock:
            self.alive.discard(name)

    def close(self) -> None:
        """The session is over: remove the containers no attempt tore down (Ctrl-C, a stop)
        and wait until every removal is done."""
        with self._lock:
            left, self.alive = sorted(self.alive), set()
        if left:
            remove_now(left)
        self.wait()

    def wait(self) -> None:
        """Wait until the containers being removed, and those waiting for it, are gone."""
        with self._lock:
            removing, self._removing = self._removing, []
            doomed, self._doomed = self._doomed, []
        for removal in removing:
            removal.wait()
        if doomed:
            remove_now(doomed)


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
        bytes of at most `max_bytes` of them (the task's `artifacts: {max_bytes}`)."""
        self.spec = spec
        self.name = name
        self.template = template
        self.max_bytes = max_bytes
        self._dead: str | None = None
        assert spec.docker is not None, "a Docker sandbox names its image"
        image, image_id = session.image(spec.docker, build)
        self.image_id: str | None = image_id
        """The id of the image the container was made of."""
        self._session = session
        self.keep = session.policy.keep
        self.captured: dict[str, str] | None = None
        """What `sandbox: environment:` captured inside, by name (None: nothing asked)."""
        max_alive = session.policy.max_alive
        self._slot = sandbox_slot(max_alive) if max_alive is not None else None
        session.started(name)
        try:
            checked(self._run_argv(image, session.labels()), f"starting a container of {image!r}")
            owner = _owner(spec.user)
            if template is not None or owner != (0, 0):
                # else `docker run --workdir` made the empty folder, and it is root's
                checked(
                    ["cp", "--archive", "-", f"{name}:/"],
                    "copying the workspace in",
                    input=workspace_tar(template, spec.workdir, owner),
                )
            if spec.environment:
                self.captured = self._capture(spec.environment)
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
        command = ["docker", "exec", "--workdir", self.spec.workdir]
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
            docker(["kill", self.name])
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
        unreachable(said)
        state = docker(["inspect", "--format", "{{.State.Running}}", self.name])
        if state.returncode != 0 or state.stdout.strip() != b"true":
            why = (said.strip() or state.stderr.decode(errors="replace").strip())[-2000:]
            self._dead = "its container stopped under the attempt"
            raise SandboxUnavailable(
                f"sandbox: the container {self.name} stopped under the attempt",
                detail=why or "the docker CLI ended the program's run without a word",
            )

    def _oom_killed(self) -> bool:
        state = docker(["inspect", "--format", "{{.State.OOMKilled}}", self.name])
        return state.stdout.strip() == b"true"

    def read_file(self, path: str) -> bytes:
        inside = self._inside(path)
        with copy_out(self.name, inside) as tar:
            return first_file(tar, path)

    def write_file(self, path: str, data: bytes | str) -> None:
        data = data.encode() if isinstance(data, str) else data
        tar = file_tar(PurePosixPath(self._inside(path)), data, _owner(self.spec.user))
        done = docker(["cp", "--archive", "-", f"{self.name}:/"], input=tar)
        if done.returncode != 0:
            raise OSError(f"{path}: {done.stderr.decode(errors='replace').strip()}")

    def changed_files(self) -> list[ChangedFile]:
        """The changes against the template, from one `docker cp` of `workdir` read as it
        streams: no file's bytes past the room `max_bytes` leaves are held."""
        with copy_out(self.name, f"{self.spec.workdir.rstrip('/')}/.") as tar:
            return changes(tar, self.template, self.max_bytes)

    def teardown(self, keep: bool) -> None:
        """Remove the container, or keep it stopped and renamed when the run's
        `--agenteval-keep-sandboxes` asks (`failed`: when `keep`, the attempt did not pass)."""
        try:
            if self.keep == "all" or (self.keep == "failed" and keep):
                docker(["kill", self.name])
                checked(["rename", self.name, self.kept_name], "keeping the sandbox")
            else:
                self._remove()
                return
        except SandboxUnavailable:  # its daemon is gone: the next orphan sweep removes it
            pass
        self._session.forget(self.name)
        release_slot(self._slot)
        self._slot = None

    def _remove(self) -> None:
        """Remove the container: in the background, or at once when it holds a slot (the
        next sandbox may start only once it is gone)."""
        if self._slot is None:
            self._session.remove_later(self.name)
            return
        docker(["rm", "-f", self.name])
        self._session.forget(self.name)
        release_slot(self._slot)
        self._slot = None

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
