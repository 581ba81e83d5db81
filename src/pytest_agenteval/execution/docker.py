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

import hashlib
import io
import os
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from ..core.environment import Change, ChangedFile, Finished
from ..core.errors import AgentError
from ..core.model import DockerImage, Key, SandboxSpec
from ..sources.templates import template_entries
from ..store.locks import locked
from .environment import SandboxPolicy
from .limits import release_slot, take_slot
from .process import run_program
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
    """The attempt's container could not be made: no daemon, or docker refused it."""

    error_type = "sandbox_unavailable"


class BuildFailed(SandboxUnavailable):
    """The task's image cannot be had: its build failed, or it is missing and cannot be
    pulled. The attempt errs in phase `build`, counted apart, and a resume runs it again."""

    error_type = "build_failed"
    phase = "build"

    def again(self) -> BuildFailed:
        """The same error for a later attempt, its story told once already (the terminal
        shows it once)."""
        return BuildFailed(self.message, detail="said at this image's first attempt")


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
    if done.returncode != 0 and b"Cannot connect to the Docker daemon" in done.stderr:
        raise SandboxUnavailable(
            "sandbox: the Docker daemon is not running",
            detail="start it (`sudo systemctl start docker`, or as root `dockerd &`), "
            "then run again: " + done.stderr.decode(errors="replace").strip(),
        )
    return done


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


def remove_orphans() -> list[str]:
    """Remove the containers of this host's sessions that are gone (kept ones aside); their
    names."""
    listed = _checked(
        [
            "ps",
            "-a",
            "--filter",
            f"label={LABEL}",
            "--format",
            NAME_AND_SESSION,
        ],
        "listing the sandboxes",
    )
    gone = []
    for line in listed.decode().splitlines():
        name, _, label = line.partition("\t")
        if name and not name.startswith(KEPT) and not session_alive(label):
            gone.append(name)
    if gone:
        docker(["rm", "-f", *gone])
    return gone


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
            docker(["rm", "-f", *left])
        self.wait()

    def wait(self) -> None:
        """Wait until the containers being removed, and those waiting for it, are gone."""
        with self._lock:
            removing, self._removing = self._removing, []
            doomed, self._doomed = self._doomed, []
        for removal in removing:
            removal.wait()
        if doomed:
            docker(["rm", "-f", *doomed])

    def ensure(self, docker: DockerImage, build: tuple[Path, str] | None = None) -> tuple[str, str]:
        """The name and id of the image to start from, pulled or built first when needed;
        raises BuildFailed (a missing image's whole story only the first time)."""
        key = docker.image if build is None else f"{BUILT}:{build[1]}"
        assert key is not None
        with self._lock:
            if not self._orphans_checked:
                remove_orphans()
                self._orphans_checked = True
            if key not in self._known:
                self._known[key] = self._find(key) if build is None else _build(key, build[0])
            found = self._known[key]
            said = key in self._said
            self._said.add(key)
        if isinstance(found, BuildFailed):
            raise found if build is not None or not said else found.again()
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


def _image_id(image: str) -> str | None:
    done = docker(["image", "inspect", "--format", "{{.Id}}", image])
    return done.stdout.decode().strip() if done.returncode == 0 else None


def _build(tag: str, folder: Path) -> tuple[str, str] | BuildFailed:
    """Build `folder` as `tag` unless an image of that tag (that content) exists; one process
    of the machine builds a tag at a time, the others then find it built."""
    with locked(machine_folder() / f"build-{tag.rpartition(':')[2]}.lock"):
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
        build: tuple[Path, str] | None = None,
    ) -> None:
        """A started container of `spec`'s image (built from `build`, the folder and its
        digest, when it has one) holding a copy of `template`."""
        self.spec = spec
        self.name = name
        self.template = template
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
        argv += ["--network", spec.network, "--memory", spec.memory, "--memory-swap", spec.memory]
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
        return done

    def _oom_killed(self) -> bool:
        state = docker(["inspect", "--format", "{{.State.OOMKilled}}", self.name])
        return state.stdout.strip() == b"true"

    def read_file(self, path: str) -> bytes:
        done = docker(["cp", f"{self.name}:{self._inside(path)}", "-"])
        if done.returncode != 0:
            raise FileNotFoundError(f"{path}: {done.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
            member = tar.next()
            extracted = tar.extractfile(member) if member is not None else None
            if extracted is None:
                raise IsADirectoryError(path)
            return extracted.read()

    def write_file(self, path: str, data: bytes | str) -> None:
        data = data.encode() if isinstance(data, str) else data
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
        before = {
            rel: hashlib.sha256(source.read_bytes()).digest()
            for rel, source in (template_entries(self.template) if self.template else [])
            if source is not None
        }
        now = self._files_now()
        changed = [ChangedFile(rel, "deleted", 0) for rel in before.keys() - now.keys()]
        for rel, (member, data) in now.items():
            if rel not in before:
                change: Change = "added"
            elif before[rel] != hashlib.sha256(data).digest():
                change = "modified"
            else:
                continue
            link = not member.isfile()
            changed.append(ChangedFile(rel, change, member.size, link, None if link else data))
        return sorted(changed, key=lambda c: c.path)

    def _files_now(self) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
        """The files below `workdir` now, by relative path: each one's tar entry and bytes (a
        link's: its target's name), copied out in one `docker cp`."""
        done = docker(["cp", f"{self.name}:{self.spec.workdir.rstrip('/')}/.", "-"])
        if done.returncode != 0:
            raise OSError(done.stderr.decode(errors="replace").strip())
        found = {}
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
            for member in tar:
                rel = PurePosixPath(member.name)
                rel = PurePosixPath(*rel.parts[1:]) if rel.parts[:1] == (".",) else rel
                if member.isdir() or not rel.parts:
                    continue
                body = tar.extractfile(member) if member.isfile() else None
                data = body.read() if body is not None else member.linkname.encode()
                found[rel.as_posix()] = (member, data)
        return found

    def teardown(self, keep: bool) -> None:
        """Remove the container, or keep it stopped and renamed when the run's
        `--agenteval-keep-sandboxes` asks (`failed`: when `keep`, the attempt did not pass)."""
        if self.keep == "all" or (self.keep == "failed" and keep):
            docker(["kill", self.name])
            _checked(["rename", self.name, self.kept_name], "keeping the sandbox")
            if self._images is not None:
                self._images.forget(self.name)
            release_slot(self._slot)
            return
        self._remove()

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


def container_name(key: Key, pid: int) -> str:
    """A container name only this attempt of the session `pid` gets."""
    return f"agenteval-{pid}-{folder_name(*key)}"  # a variant's key names its variant


def find(name: str, spec: SandboxSpec, template: Path | None) -> DockerEnvironment | None:
    """The container another process of this session made for an attempt, if it made one."""
    if docker(["inspect", "--format", "{{.Id}}", name]).returncode != 0:
        return None
    return DockerEnvironment.existing(spec, name, template)
