"""The Docker sandbox: an attempt's files and programs in a fresh container of its own.

A second kind of `Environment`. Each attempt gets a container created from the task's image,
with no network by default, bounded memory, processes and CPUs, no privileges and no host
mount; the workspace template is copied in as a tar stream, programs run with `docker exec`,
and the container is removed when the attempt ends.

Why the docker CLI and not the `docker` package: the CLI is what every Docker install has,
speaks to whatever daemon the user configured (contexts, `DOCKER_HOST`, rootless) with no
extra dependency, and its `exec` streams stdin/stdout exactly like a local program, so the
timeout and output handling of `run_program` apply unchanged. Every call is an argv list,
never a command string.

Orphans: every container carries labels naming its session (host, pid and the pid's start
time) and its run. A session or worker killed before it could tear down leaves containers
running; the first sandbox of the next process on this machine (and `agenteval repair`)
removes those whose session is gone. Kept containers (`--agenteval-keep-sandboxes`) are
renamed `agenteval-kept-...` and left alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..core.errors import AgentError
from ..core.model import ARTIFACTS_MAX_BYTES, DockerImage, Key, SandboxSpec
from ..sources.dataset import BuildFolder
from ..sources.templates import template_entries
from .environment import Change, ChangedFile, SandboxPolicy
from .limits import locked, release_slot, take_slot
from .process import Finished, run_program
from .workspaces import folder_name

LABEL = "agenteval.session"
"""Label on every container: the session that made it, `host/pid/start time`."""
RUN_LABEL = "agenteval.run"
"""Label on every container: the id of the run its attempt belongs to."""
KEPT = "agenteval-kept-"
"""Prefix a kept container is renamed to: no session's cleanup removes it."""
NAME_AND_SESSION = '{{.Names}}\t{{.Label "agenteval.session"}}'
"""`docker ps --format` of a container's name and session label."""
PULL_TIMEOUT = 300.0
BUILD_TIMEOUT = 1800.0
BUILD_LOG_LINES = 20
"""Lines of a failed build's log an attempt's error shows."""
BUILT = "agenteval-build"
"""Repository of images built from `build:` folders, tagged by the folder's content digest."""
DOCKER_TIMEOUT = 120.0
"""Seconds a docker command other than an attempt's program may take."""
SLOT_POLL = 0.05
"""Seconds between looks for a free sandbox slot (`--agenteval-max-sandboxes`)."""


class SandboxUnavailable(AgentError):
    """The attempt's sandbox could not be had or failed under it: no docker command, a
    daemon that does not answer or died, a container docker refused or lost. Infrastructure,
    not the agent's doing: phase `sandbox`, and a resume runs the attempt again."""

    error_type = "sandbox_error"
    phase = "sandbox"


AGAIN = "(its whole story is told at this image's first attempt)"
"""The detail of a build failure said already."""


class BuildFailed(SandboxUnavailable):
    """The task's image cannot be had: its build failed, or it is missing and cannot be
    pulled. The attempt errs in phase `build`, counted apart, and a resume runs it again."""

    error_type = "build_failed"
    phase = "build"

    def again(self) -> BuildFailed:
        """The same error for a later attempt, its story (what to do, the build's log) told
        at the image's first attempt, so the terminal shows it once."""
        return BuildFailed(self.message, detail=AGAIN)


def machine_folder() -> Path:
    """This user's folder for what all sessions on the machine share (sandbox slots, build
    locks), under the temp dir."""
    folder = Path(tempfile.gettempdir()) / f"agenteval-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def sandbox_slot(size: int) -> int:
    """Wait for one of `size` sandbox slots of this machine's user and hold it (flock'd
    files: a dead holder's slot is free again at once); `release_slot` gives it back."""
    folder = machine_folder() / "sandboxes"
    folder.mkdir(exist_ok=True)
    return take_slot(folder, "sandbox", size, SLOT_POLL)


def docker(
    args: Sequence[str], *, input: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run the docker CLI (`args` after `docker`); a missing CLI or daemon is a clear error."""
    try:
        done = subprocess.run(
            ["docker", *args], input=input, capture_output=True, timeout=DOCKER_TIMEOUT, env=_env()
        )
    except FileNotFoundError:
        raise SandboxUnavailable(
            "sandbox: the docker command is not installed",
            detail="install Docker (Debian: apt-get install docker.io) or remove `sandbox:`",
        ) from None
    if done.returncode != 0:
        unreachable(done.stderr.decode(errors="replace"))
    return done


DAEMON_GONE = ("Cannot connect to the Docker daemon", "error during connect")
"""What the docker CLI says when its daemon does not answer (not running, died mid-call)."""


def unreachable(said: str) -> None:
    """Raise SandboxUnavailable when a failed docker command says its daemon is gone."""
    if any(words in said for words in DAEMON_GONE):
        raise SandboxUnavailable(
            "sandbox: the Docker daemon is not running",
            detail="start it (`sudo systemctl start docker`, or as root `dockerd &`), "
            "then run again: " + said.strip(),
        )


def _env() -> dict[str, str]:
    """An explicit copy of the variables: attempts in flight start docker from pool threads
    while pytest's main thread rewrites the C environment (see `run_program`)."""
    return os.environ.copy()


def _checked(args: Sequence[str], what: str, *, input: bytes | None = None) -> bytes:
    done = docker(args, input=input)
    if done.returncode != 0:
        raise SandboxUnavailable(
            f"sandbox: {what} failed", detail=done.stderr.decode(errors="replace").strip()
        )
    return done.stdout


def session_label(pid: int | None = None) -> str:
    """This process's (or `pid`'s) session label: host, pid, and the pid's start time, so a
    reused pid is not taken for the session that had it."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}/{pid}/{_start_time(pid)}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat.rsplit(")", 1)[1].split()[19]  # field 22: start time in clock ticks


def session_alive(label: str) -> bool:
    """Whether the session a container's label names still runs (other hosts' are alive)."""
    host, _, rest = label.partition("/")
    pid_text, _, started = rest.partition("/")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return started in ("?", _start_time(pid))


@dataclass(frozen=True)
class Swept:
    """The containers an orphan sweep removed, and the gone sessions (`host/pid/start`)
    they belonged to."""

    names: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()

    def line(self) -> str:
        """What to tell a person: `removed 2 sandbox containers of sessions that are gone
        (pid 1234 on host ci-3)`."""
        hosts: dict[str, list[str]] = {}
        for session in self.sessions:
            host, _, rest = session.partition("/")
            pid = rest.partition("/")[0]
            if pid not in hosts.setdefault(host, []):
                hosts[host].append(pid)
        whose = "; ".join(
            f"{'pid' if len(pids) == 1 else 'pids'} {', '.join(pids)} on host {host}"
            for host, pids in hosts.items()
        )
        n = len(self.names)
        of = "a session that is gone" if len(self.sessions) == 1 else "sessions that are gone"
        return f"removed {n} sandbox container{'' if n == 1 else 's'} of {of} ({whose})"


def remove_orphans(run_id: str | None = None) -> Swept:
    """Remove the containers of this host's sessions that are gone (kept ones aside; of the
    run `run_id` only, when given)."""
    wanted = f"{RUN_LABEL}={run_id}" if run_id is not None else LABEL
    listed = _checked(
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


class Images:
    """What every sandbox of a process shares: its labels and the run's policy, and the images
    made sure of once: present, pulled, or built from a folder (tagged by its content digest,
    so later runs and other workers find it built; one process of the machine builds a digest
    at a time). A failure is given to every attempt of the image."""

    def __init__(self, session: str | None = None, policy: SandboxPolicy | None = None) -> None:
        """`session` is the label of the session the containers belong to (default: this
        process's)."""
        self.session = session or session_label()
        self.policy = policy or SandboxPolicy()
        self.run_id: str | None = None
        """The run the containers' attempts belong to (labelled), once known."""
        self._known: dict[str, tuple[str, str] | BuildFailed] = {}
        self._said: set[str] = set()
        self._lock = threading.Lock()
        self._orphans_checked = False
        self.swept: list[Swept] = []
        """What this process's orphan sweeps removed (said at the session's end)."""
        self._removing: list[subprocess.Popen[bytes]] = []
        self._doomed: list[str] = []
        """Containers torn down while a removal ran: the next removal's."""
        self.alive: set[str] = set()
        """Containers of this process not torn down yet (an interrupted attempt's)."""

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
            env=_env(),
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
            _remove_now(left)
        self.wait()

    def wait(self) -> None:
        """Wait until the containers being removed, and those waiting for it, are gone."""
        with self._lock:
            removing, self._removing = self._removing, []
            doomed, self._doomed = self._doomed, []
        for removal in removing:
            removal.wait()
        if doomed:
            _remove_now(doomed)

    def ensure(self, docker: DockerImage, build: BuildFolder | None = None) -> tuple[str, str]:
        """The name and id of the image to start from, pulled or built first when needed;
        raises BuildFailed: its whole story (what to do, the build's log) the first time,
        a reference to it afterwards."""
        key = docker.image if build is None else f"{BUILT}:{build.digest or build.folder}"
        assert key is not None
        with self._lock:
            if not self._orphans_checked:
                swept = remove_orphans()
                if swept.names:
                    self.swept.append(swept)
                self._orphans_checked = True
            if key not in self._known:
                self._known[key] = self._find(key) if build is None else _build(key, build)
            found = self._known[key]
            said = key in self._said
            self._said.add(key)
        if isinstance(found, BuildFailed):
            raise found.again() if said else found
        return found

    @staticmethod
    def _find(image: str) -> tuple[str, str] | BuildFailed:
        present = _image_id(image)
        if present is not None:
            return image, present
        try:
            pulled = subprocess.run(
                ["docker", "pull", "--quiet", image],
                capture_output=True,
                timeout=PULL_TIMEOUT,
                env=_env(),
            )
        except subprocess.TimeoutExpired:
            why = f"the pull gave no answer in {PULL_TIMEOUT:g}s"
        else:
            pulled_id = _image_id(image) if pulled.returncode == 0 else None
            if pulled_id is not None:
                return image, pulled_id
            why = pulled.stderr.decode(errors="replace").strip()
        return BuildFailed(
            f"sandbox build: the image {image!r} is not present and cannot be pulled",
            detail=f"build or load it (`docker build -t {image} DIR`, `docker load`), "
            f"or name one `docker images` lists: {why}",
        )


def _remove_now(names: list[str]) -> None:
    """`docker rm -f` of `names`; with its daemon gone they are left to the orphan sweep."""
    with contextlib.suppress(SandboxUnavailable):
        docker(["rm", "-f", *names])


def _image_id(image: str) -> str | None:
    done = docker(["image", "inspect", "--format", "{{.Id}}", image])
    return done.stdout.decode().strip() if done.returncode == 0 else None


def _build(tag: str, build: BuildFolder) -> tuple[str, str] | BuildFailed:
    """Build the folder as `tag` unless an image of that tag (that content) exists; one
    process of the machine builds a tag at a time, the others then find it built. A folder
    that cannot be read has no tag: it is never built, nor any image of a tag used."""
    folder = build.folder
    if build.digest is None:
        return BuildFailed(
            f"sandbox build: the build folder {folder} cannot be read: {build.problem}",
            detail="make it a folder of plain files (a Dockerfile and what it copies)",
        )
    with locked(machine_folder() / f"build-{build.digest}.lock"):
        present = _image_id(tag)
        if present is not None:
            return tag, present
        failed = _run_build(tag, folder)
        built = _image_id(tag) if failed is None else None
    if built is None:
        return failed or BuildFailed(f"sandbox build: {folder} built no image {tag}")
    return tag, built


def _run_build(tag: str, folder: Path) -> BuildFailed | None:
    """`docker build` of `folder`; the failure, or None. A failed build leaves no container."""
    if not (folder / "Dockerfile").is_file():
        return BuildFailed(
            f"sandbox build: no Dockerfile in {folder}",
            detail="`build:` names a folder holding a Dockerfile, relative to the dataset root",
        )
    try:
        done = subprocess.run(
            ["docker", "build", "--force-rm", "--tag", tag, str(folder)],
            capture_output=True,
            timeout=BUILD_TIMEOUT,
            env=_env(),
        )
    except subprocess.TimeoutExpired:
        return BuildFailed(f"sandbox build: {folder} took over {BUILD_TIMEOUT:g}s")
    if done.returncode == 0:
        return None
    log = (done.stdout + done.stderr).decode(errors="replace").strip().splitlines()
    return BuildFailed(
        f"sandbox build: building the image of {folder} failed (exit status {done.returncode})",
        detail="\n".join(log[-BUILD_LOG_LINES:]),
    )


class DockerEnvironment:
    """One attempt's container: created at once, removed (or kept) at teardown."""

    def __init__(
        self,
        spec: SandboxSpec,
        name: str,
        template: Path | None,
        images: Images,
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
        image, image_id = images.ensure(spec.docker, build)
        self.image_id: str | None = image_id
        """The id of the image the container was made of (None: not known here)."""
        self._images: Images | None = images
        self.keep = images.policy.keep
        self.captured: dict[str, str] | None = None
        """What `sandbox: environment:` captured inside, by name (None: nothing asked)."""
        max_alive = images.policy.max_alive
        self._slot = sandbox_slot(max_alive) if max_alive is not None else None
        images.started(name)
        try:
            _checked(self._run_argv(image, images.labels()), f"starting a container of {image!r}")
            if template is not None or _owner(spec.user) != (0, 0):
                # else `docker run --workdir` made the empty folder, and it is root's
                _checked(
                    ["cp", "--archive", "-", f"{name}:/"],
                    "copying the workspace in",
                    input=self._workspace_tar(),
                )
            if spec.environment:
                self.captured = self._capture(spec.environment)
        except BaseException:
            self._remove()
            raise

    @classmethod
    def existing(cls, spec: SandboxSpec, name: str, template: Path | None) -> DockerEnvironment:
        """The environment of a container that exists already."""
        made = cls.__new__(cls)
        made.spec, made.name, made.template = spec, name, template
        made.max_bytes = ARTIFACTS_MAX_BYTES
        made._dead, made._images, made._slot, made.keep = None, None, None, None
        made.image_id, made.captured = None, None
        return made

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

    def _workspace_tar(self) -> bytes:
        """The template as a tar below `workdir`, owned by the sandbox's numeric user."""
        uid, gid = _owner(self.spec.user)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            root = self.spec.workdir.strip("/")
            _add(tar, root, None, uid, gid)
            for rel, source in template_entries(self.template) if self.template else []:
                _add(tar, f"{root}/{rel}", source, uid, gid)
        return buffer.getvalue()

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
        with it) and later calls fail."""
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
        with self._copy_out(self._inside(path)) as tar:
            member = tar.next()
            if member is not None and member.isdir():
                raise IsADirectoryError(path)
            if member is None or not member.isfile():  # a link: never followed
                raise OSError(f"{path}: not a regular file")
            body = tar.extractfile(member)
            assert body is not None
            return body.read()

    def write_file(self, path: str, data: bytes) -> None:
        target = PurePosixPath(self._inside(path))
        uid, gid = _owner(self.spec.user)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(str(target).lstrip("/"))
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, uid, gid
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
        done = docker(["cp", "--archive", "-", f"{self.name}:/"], input=buffer.getvalue())
        if done.returncode != 0:
            raise OSError(f"{path}: {done.stderr.decode(errors='replace').strip()}")

    def changed_files(self) -> list[ChangedFile]:
        """The changes against the template, from one `docker cp` of `workdir` read as its
        tar streams: a file is hashed as it passes (only when its template has one of its
        size), and only the bytes of changed files that fit in the room `max_bytes` leaves
        are held, in the tar's order (artifacts' `collect` reads any other it keeps)."""
        before = _template_files(self.template)
        room = self.max_bytes
        seen: set[str] = set()
        changed: list[ChangedFile] = []
        files: dict[str, tuple[int, bytes | None, bytes | None]] = {}
        """Each changed file's size, digest (when hashed) and bytes (when held), for the
        hard links to it that come later in the tar."""
        with self._copy_out(f"{self.spec.workdir.rstrip('/')}/.") as tar:
            for member in tar:
                rel = _relative(member.name)
                if member.isdir() or not rel:
                    continue
                seen.add(rel)
                was = before.get(rel)
                if member.isfile():
                    size, digest, data = member.size, None, None
                    if size <= room or (was is not None and was[0] == size):
                        digest, data = _hashed(tar, member, keep=size <= room)
                elif member.islnk():  # a second name of a file the tar gave before
                    size, digest, data = files.get(_relative(member.linkname), (0, None, None))
                else:  # a symbolic link (its size: its target's name's), a device: never read
                    change: Change = "added" if was is None else "modified"
                    changed.append(ChangedFile(rel, change, member.size, True))
                    continue
                if was is not None and was == (size, digest):
                    continue
                held = data if data is not None and size <= room else None
                room -= size if held is not None else 0
                files[rel] = size, digest, held
                change = "added" if was is None else "modified"
                changed.append(ChangedFile(rel, change, size, False, held))
        changed += [ChangedFile(rel, "deleted", 0) for rel in before.keys() - seen]
        return sorted(changed, key=lambda c: c.path)

    @contextlib.contextmanager
    def _copy_out(self, path: str) -> Iterator[tarfile.TarFile]:
        """`path` of the container as a tar, read as `docker cp` streams it (never whole);
        a copy that fails or is cut short raises OSError (FileNotFoundError: no such path)."""
        proc = subprocess.Popen(
            ["docker", "cp", f"{self.name}:{path}", "-"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
        )
        timer = threading.Timer(DOCKER_TIMEOUT, proc.kill)
        timer.start()
        assert proc.stdout is not None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                yield tar
        except (tarfile.TarError, EOFError):  # no tar, or one cut short
            raise _copy_failed(proc, path) from None
        finally:
            timer.cancel()
            proc.stdout.close()
            if proc.poll() is None:
                proc.kill()  # what was wanted is read (a file's first member): stop the copy
            proc.wait()
            assert proc.stderr is not None
            proc.stderr.close()

    def teardown(self, keep: bool) -> None:
        """Remove the container, or keep it stopped and renamed when the run's
        `--agenteval-keep-sandboxes` asks (`failed`: when `keep`, the attempt did not pass)."""
        try:
            if self.keep == "all" or (self.keep == "failed" and keep):
                docker(["kill", self.name])
                _checked(["rename", self.name, self.kept_name], "keeping the sandbox")
            else:
                self._remove()
                return
        except SandboxUnavailable:  # its daemon is gone: the next orphan sweep removes it
            pass
        if self._images is not None:
            self._images.forget(self.name)
        release_slot(self._slot)
        self._slot = None

    def _remove(self) -> None:
        """Remove the container: in the background, or at once when it holds a slot (the
        next sandbox may start only once it is gone)."""
        if self._images is not None and self._slot is None:
            self._images.remove_later(self.name)
            return
        docker(["rm", "-f", self.name])
        if self._images is not None:
            self._images.forget(self.name)
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


def _add(tar: tarfile.TarFile, name: str, source: Path | None, uid: int, gid: int) -> None:
    info = tarfile.TarInfo(name)
    info.uid, info.gid, info.mtime = uid, gid, int(time.time())
    if source is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
        return
    data = source.read_bytes()
    stat = source.stat()
    info.size, info.mode, info.mtime = len(data), stat.st_mode & 0o777, int(stat.st_mtime)
    tar.addfile(info, io.BytesIO(data))


def _relative(name: str) -> str:
    """A tar member's path below the copied folder (`./src/a.py`: `src/a.py`; `.`: empty)."""
    return "/".join(PurePosixPath(name).parts)


def _hashed(
    tar: tarfile.TarFile, member: tarfile.TarInfo, *, keep: bool
) -> tuple[bytes, bytes | None]:
    """The digest of a member's bytes read as they stream, and the bytes when `keep`."""
    body = tar.extractfile(member)
    assert body is not None
    if keep:
        data = body.read()
        return hashlib.sha256(data).digest(), data
    sha = hashlib.sha256()
    while chunk := body.read(1 << 20):
        sha.update(chunk)
    return sha.digest(), None


def _template_files(template: Path | None) -> dict[str, tuple[int, bytes]]:
    """The template's files by relative path: each one's size and digest (read in chunks)."""
    found = {}
    for rel, source in template_entries(template) if template else []:
        if source is not None:
            with source.open("rb") as f:
                found[rel] = os.fstat(f.fileno()).st_size, hashlib.file_digest(f, "sha256").digest()
    return found


def _copy_failed(proc: subprocess.Popen[bytes], path: str) -> OSError:
    """Why a copy out of a container gave no (whole) tar, from docker's own words."""
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    said = proc.stderr.read().decode(errors="replace").strip()
    proc.wait()
    if "Could not find the file" in said or "No such container:path" in said:
        return FileNotFoundError(f"{path}: {said}")
    unreachable(said)
    return OSError(f"{path}: {said or 'the copy out of the sandbox was cut short'}")


def container_name(key: Key, pid: int) -> str:
    """A container name only this attempt of the session `pid` gets."""
    return f"agenteval-{pid}-{folder_name(*key)}"  # a variant's key names its variant


def find(name: str, spec: SandboxSpec, template: Path | None) -> DockerEnvironment | None:
    """The container another process of this session made for an attempt, if it made one."""
    if docker(["inspect", "--format", "{{.Id}}", name]).returncode != 0:
        return None
    return DockerEnvironment.existing(spec, name, template)
