"""Where an attempt's files live and its programs run: the Environment seam, its dispatch to
the sandbox kinds (`core/kinds.py`'s `EnvironmentKind`: Docker's, a plugin's), and the first
kind of environment, a local folder.

Command agents, the `command` grader, python graders and Python agents reach an attempt's files
and programs only through its `Environment`, made by one factory (`Environments`). The protocol
names no host path: a path is relative to the environment's working directory, programs run
inside it, and `workdir` / `python` are what `{workspace}` / `{python}` mean *there*, so a
container can be another kind (as Inspect AI's `SandboxEnvironment`: exec, read and write files,
per-attempt setup and cleanup).
"""

from __future__ import annotations

import filecmp
import os
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ..core.environment import ChangedFile, Environment, Finished
from ..core.errors import EnvironmentUnavailable
from ..core.files import NotRegular, open_below, open_fd
from ..core.identity import AttemptId
from ..core.kinds import EnvironmentKind, Keep, KindSession, SandboxRequest
from ..core.model import local_folder
from ..sources.templates import copy_template, template_entries
from .limits import release_slot
from .process import run_program
from .sandboxes import kind_slot

if TYPE_CHECKING:
    from ..core.model import SandboxSpec, Task
    from ..sources.dataset import TaskDef
    from .docker_kind import DockerKind
    from .workspaces import Workspaces


@dataclass(frozen=True)
class SandboxPolicy:
    """What the run's options say of every sandbox."""

    keep: Keep | None = None
    """Keep (stopped) the containers of failed attempts, or of all; None: remove them."""
    max_alive: int | None = None
    """Containers alive at once on this machine, across processes and sessions."""
    allow: frozenset[str] = frozenset()
    """What the datasets' sandboxes may lift (`--agenteval-sandbox-allow`): `network`,
    `unbounded`."""
    hosts: tuple[str, ...] = ()
    """The Docker daemons sandboxes go to (`--agenteval-docker-host`); empty: the datasets'
    `docker: hosts:`, else the default daemon."""


MakeEnvironment = Callable[["TaskDef", AttemptId], "Environment | None"]
"""A plugin's environment for (task, attempt key), or None to leave it to the built-in kinds."""


class Environments:
    """The one factory of attempts' environments: a plugin's, else one of the sandbox kind the
    task's `sandbox:` names (Docker's, a plugin kind's), else a local folder."""

    def __init__(
        self,
        workspaces: Workspaces,
        plugins: MakeEnvironment | None = None,
        sandboxes: SandboxPolicy | None = None,
        kinds: Mapping[str, EnvironmentKind] | None = None,
        run_id: str | None = None,
    ) -> None:
        """`kinds`: the sandbox kinds by name (default: the built-in `docker` alone); `run_id`:
        the run this process's attempts belong to (its sandboxes are labelled with it, and the
        session's end sweeps its orphans); None: not known yet."""
        self.workspaces = workspaces
        self._plugins = plugins
        self._session = os.getpid()  # a forked agent's container is named for its session
        self._sandboxes = sandboxes or SandboxPolicy()
        self._run_id = run_id
        if kinds is None:
            from .kinds import builtin_kinds

            kinds = builtin_kinds()
        self.kinds: dict[str, EnvironmentKind] = dict(kinds)
        self._started: dict[str, KindSession] = {}
        """The kinds this process's session started, and what each was told."""
        self._swept: list[str] = []
        """What the orphan sweeps removed, a line each."""
        self._lock = threading.Lock()
        self._reserved: dict[AttemptId, tuple[int | None, Callable[[], None]]] = {}
        """What was taken for attempts admitted ahead whose sandbox is not made yet: a plugin
        kind's slot (None: Docker's session holds it) and how to give it back."""

    def kind_of(self, task: TaskDef) -> EnvironmentKind | None:
        """The kind of the task's sandbox (None: no sandbox, or a kind the run does not know,
        which loading the task reported)."""
        return self.kinds.get(task.sandbox.kind) if task.sandbox is not None else None

    def on_host(self, task: TaskDef) -> bool:
        """Whether the task's programs run on this machine (its agent's program is looked up
        on this machine's PATH): no sandbox, or a kind that says so."""
        if task.sandbox is None:
            return True
        kind = self.kind_of(task)
        return kind is not None and kind.on_host

    def max_alive(self, kind: EnvironmentKind) -> int | None:
        """Sandboxes of `kind` alive at once on this machine: `--agenteval-max-sandboxes`,
        else the kind's default, never above its maximum."""
        wanted = self._sandboxes.max_alive
        size = wanted if wanted is not None else kind.default_alive
        if kind.max_alive is not None:
            size = kind.max_alive if size is None else min(size, kind.max_alive)
        return size

    def admission(self, task: TaskDef, key: AttemptId) -> Callable[[], bool] | None:
        """What the attempt must take before it starts ahead of its turn (every slot its
        sandbox will hold: its kind's bound of alive sandboxes, a bounded Docker daemon's;
        tried without waiting, all or none: see `Ahead`), or None."""
        kind = self.kind_of(task)
        if kind is None or task.sandbox is None:
            return None
        size = self.max_alive(kind)
        if isinstance(kind, _docker_kind()):
            if size is None and not kind.bounded(task.sandbox, self._sandboxes.hosts):
                return None
            from .docker import container_name

            name = container_name(key, self._session)
            return partial(self._place_ahead, key, kind, task.sandbox, name)
        if size is None:
            return None
        return partial(self._reserve, key, kind.name, size)

    def _reserve(self, key: AttemptId, kind: str, size: int) -> bool:
        from .sandboxes import free_sandbox_slot

        slot = free_sandbox_slot(size, kind)
        if slot is None:
            return False
        with self._lock:
            self._reserved[key] = (slot, partial(release_slot, slot))
        return True

    def _place_ahead(self, key: AttemptId, kind: DockerKind, spec: SandboxSpec, name: str) -> bool:
        """Docker's admission: its session takes the machine's slot and the daemon's the
        container `name` will hold, together (its first admission starts the session)."""
        try:
            self._start(kind)
        except EnvironmentUnavailable:
            return True  # no daemon: the attempt says so when it makes its sandbox
        if not kind.reserve(spec, name):
            return False
        with self._lock:
            self._reserved[key] = (None, partial(kind.unreserve, name))
        return True

    def unreserve(self, key: AttemptId) -> None:
        """Give back the slots taken for the attempt if its environment never took them on."""
        if not self._reserved:  # no sandbox slots reserved (every local attempt): no lock
            return
        with self._lock:
            reserved = self._reserved.pop(key, None)
        if reserved is not None:
            reserved[1]()

    def release(self, environment: Environment) -> bool:
        """Tear down a Docker sandbox its attempt is done with before the attempt's turn, when
        the run keeps none (`--agenteval-keep-sandboxes` unset: it is removed whatever the
        verdict); whether it did. Other environments wait for the turn, whose verdict their
        teardown may keep them by (a failed attempt's local folder is kept)."""
        from .docker import DockerEnvironment  # it imports this module

        if not isinstance(environment, DockerEnvironment) or environment.keep is not None:
            return False
        environment.teardown(keep=False)
        return True

    def for_run(self, run_id: str) -> Environments:
        """The same factory for the attempts of run `run_id` (a new one: this is not changed)."""
        return Environments(
            self.workspaces, self._plugins, self._sandboxes, self.kinds, run_id=run_id
        )

    def create(self, task: TaskDef, key: AttemptId) -> Environment:
        """A fresh environment for the attempt `key` (its variant's own, in a run with
        variants), holding a copy of the task's template."""
        made = self._plugins(task, key) if self._plugins is not None else None
        if made is not None:
            return made
        if task.sandbox is None:
            return self.workspaces.create(key, task.workspace_dir)
        kind = self._kind(task.sandbox)
        session = self._start(kind)
        request = self._request(task, key, kind)
        with self._lock:
            reserved = self._reserved.pop(key, None)  # taken ahead (`admission`)
        if isinstance(kind, _docker_kind()):
            try:  # Docker takes and frees its own slots (its session holds what was reserved)
                return kind.create(request)
            except BaseException:
                kind.unreserve(request.name)
                raise
        slot = reserved[0] if reserved is not None else None
        if session.max_alive is None:
            return kind.create(request)
        if slot is None:
            slot = kind_slot(session.max_alive, kind.name)
        try:
            return Held(kind.create(request), slot)
        except BaseException:
            release_slot(slot)
            raise

    def _request(self, task: TaskDef, key: AttemptId, kind: EnvironmentKind) -> SandboxRequest:
        from .docker import container_name

        assert task.sandbox is not None
        return SandboxRequest(
            key=key,
            name=container_name(key, self._session),
            options=kind.options.model_validate(task.sandbox.kind_options),
            spec=task.sandbox,
            template=task.workspace_dir,
            dataset_root=task.dataset.root,
            max_bytes=task.artifacts.max_bytes if task.artifacts is not None else 0,
            prepared=task.sandbox_build,
        )

    def _kind(self, sandbox: SandboxSpec) -> EnvironmentKind:
        kind = self.kinds.get(sandbox.kind)
        if kind is None:
            raise EnvironmentUnavailable(
                f"no sandbox kind {sandbox.kind!r} is registered in this process",
                detail="a plugin or conftest.py registers it through "
                "`pytest_agenteval_environment_kinds`",
                phase="start",
            )
        return kind

    def _start(self, kind: EnvironmentKind) -> KindSession:
        """The kind's session in this process, started (its orphans swept) at its first
        sandbox; a start that failed is tried again by the next."""
        with self._lock:  # pool threads make sandboxes at once
            session = self._started.get(kind.name)
            if session is None:
                from .sandboxes import session_label

                session = KindSession(
                    session_label(self._session),
                    self._run_id,
                    self.max_alive(kind),
                    self._sandboxes.keep,
                    self._sandboxes.hosts,
                )
                self._swept += kind.start(session)
                self._started[kind.name] = session
            return session

    def describe(self, task: TaskDef, environment: Environment | None) -> dict[str, Any] | None:
        """What the attempt's record keeps of its sandbox (`sandbox`): its kind and what the
        kind says of it; None for no sandbox or one that was never made."""
        kind = self.kind_of(task)
        if kind is None or environment is None or kind.name not in self._started:
            return None
        inner = environment.inner if isinstance(environment, Held) else environment
        said = kind.describe(inner)
        return {"kind": kind.name, **(said or {})}

    def ready(self) -> None:
        """Make what this process's environments share (the base folder) now."""
        self.workspaces.base  # noqa: B018 - made on first use

    def adopt(self, task: TaskDef, key: AttemptId) -> Environment | None:
        """The local folder an attempt made in another process (`--agenteval-isolate`), if it
        made one."""
        return self.workspaces.existing(key, task.workspace_dir)

    def sweep(self, kinds: Iterable[str] = ("docker",)) -> None:
        """Remove the sandboxes of this run whose session is gone (an xdist worker killed
        with them running), of each kind named, as the session ends."""
        if self._run_id is None:
            return
        for name in kinds:
            kind = self.kinds.get(name)
            if kind is None:
                continue
            try:
                self._swept += kind.sweep(self._run_id)
            except EnvironmentUnavailable:
                continue  # no docker, or its daemon is gone: the next session's sweep

    def said(self) -> list[str]:
        """What this process's orphan sweeps removed, a line each, for the terminal."""
        return list(self._swept)

    def close(self) -> None:
        """The session is over: every started kind ends (the sandboxes being removed are
        gone), and no slot is held."""
        for key in list(self._reserved):
            self.unreserve(key)
        with self._lock:
            started, self._started = [self.kinds[name] for name in self._started], {}
        for kind in started:
            kind.end()
        self.workspaces.close()


class Held:
    """A plugin kind's environment holding one of its kind's slots on this machine, given
    back once its teardown is done (so no more are alive than the bound)."""

    def __init__(self, inner: Environment, slot: int) -> None:
        self.inner = inner
        self._slot: int | None = slot

    @property
    def workdir(self) -> str:
        return self.inner.workdir

    @property
    def python(self) -> str:
        return self.inner.python

    @property
    def local_path(self) -> Path | None:
        return self.inner.local_path

    @property
    def where(self) -> str:
        return self.inner.where

    @property
    def captured(self) -> dict[str, str] | None:
        """What the environment captured inside for the record (`sandbox: environment:`)."""
        captured: dict[str, str] | None = getattr(self.inner, "captured", None)
        return captured

    def exec(
        self,
        argv: Sequence[str],
        input: bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Finished:
        return self.inner.exec(argv, input=input, timeout=timeout, env=env)

    def read_file(self, path: str) -> bytes:
        return self.inner.read_file(path)

    def read_head(self, path: str, limit: int) -> tuple[bytes, int]:
        return read_head(self.inner, path, limit)

    def write_file(self, path: str, data: bytes | str) -> None:
        self.inner.write_file(path, data)

    def changed_files(self) -> list[ChangedFile]:
        return self.inner.changed_files()

    def teardown(self, keep: bool) -> None:
        try:
            self.inner.teardown(keep)
        finally:
            release_slot(self._slot)
            self._slot = None

    def __repr__(self) -> str:
        return f"Held({self.inner!r})"


class LocalEnvironment:
    """A folder on this machine; programs run as this user with the folder as cwd."""

    def __init__(self, root: Path, template: Path | None = None) -> None:
        self.root = root
        self.template = template

    @classmethod
    def create(cls, root: Path, template: Path | None) -> LocalEnvironment:
        """A new folder at `root` (any old one replaced): empty, or a copy of `template`."""
        if root.exists():
            shutil.rmtree(root)
        if template is not None:
            copy_template(template, root)
        else:
            root.mkdir()
        return cls(root, template)

    @property
    def workdir(self) -> str:
        return str(self.root)

    @property
    def python(self) -> str:
        return sys.executable

    @property
    def local_path(self) -> Path:
        return self.root

    @property
    def where(self) -> str:
        return str(self.root)

    def exec(
        self,
        argv: Sequence[str],
        input: bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Finished:
        return run_program(argv, cwd=self.root, stdin=input, env=env, timeout=timeout)

    def read_file(self, path: str) -> bytes:
        """The file's bytes, read through no link (`_inside` resolved them all): a link the
        agent made between the look and the read, a FIFO or a device is refused."""
        root, names = self._inside(path)
        try:
            with open_below(root, names) as f:
                return f.read()
        except NotRegular as exc:
            raise PermissionError(f"{path!r} {exc.why}") from None

    def read_head(self, path: str, limit: int) -> tuple[bytes, int]:
        """The first `limit` bytes of the file and its size (`read_file`'s checks)."""
        root, names = self._inside(path)
        try:
            with open_below(root, names) as f:
                return f.read(limit), os.fstat(f.fileno()).st_size
        except NotRegular as exc:
            raise PermissionError(f"{path!r} {exc.why}") from None

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write the file, never through a link at its end (nor a FIFO)."""
        data = data.encode() if isinstance(data, str) else data
        root, names = self._inside(path)
        target = root.joinpath(*names)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = open_fd(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        except NotRegular as exc:
            raise PermissionError(f"{path!r} {exc.why}") from None
        with open(fd, "wb") as out:
            out.write(data)

    def changed_files(self) -> list[ChangedFile]:
        return self.changes_until(None)[0]

    def changes_until(self, deadline: float | None) -> tuple[list[ChangedFile], bool]:
        """`changed_files`, and whether they are all of them: past `deadline` (of
        `time.monotonic`) the folder is looked at no further. A file that is not regular
        (`lstat`: a link, FIFO, device) is never opened, so none can block or read forever."""
        before = {
            rel: source
            for rel, source in (template_entries(self.template) if self.template else [])
            if source is not None
        }
        now, complete = _files_below(self.root, deadline)
        gone = before.keys() - now.keys() if complete else ()
        changed = [ChangedFile(rel, "deleted", 0) for rel in gone]
        for rel, path in now.items():
            if deadline is not None and time.monotonic() > deadline:
                complete = False
                break
            try:
                status = os.lstat(path)
            except OSError:  # gone since (a program the agent left running)
                continue
            special = not stat.S_ISREG(status.st_mode)
            if rel not in before:
                changed.append(ChangedFile(rel, "added", status.st_size, special))
            elif special or not filecmp.cmp(before[rel], path, shallow=False):
                changed.append(ChangedFile(rel, "modified", status.st_size, special))
        return sorted(changed, key=lambda c: c.path), complete

    def read_regular(self, path: str, limit: int) -> bytes:
        """The first `limit` bytes of the regular file `path` below the folder, reached without
        following a link (the agent's programs may still be changing the folder); raises
        OSError, or NotRegular for anything but a regular file."""
        with open_below(self.root, path.split("/")) as f:
            return f.read(limit)

    def teardown(self, keep: bool) -> None:
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def _inside(self, path: str) -> tuple[Path, tuple[str, ...]]:
        """`path` as the folder's real path and the names below it, every link resolved; one
        that leads out of the folder, by `..` or through a link (one the agent made with
        `bash` included), is refused."""
        rel = PurePosixPath(path)
        if rel.is_absolute():
            rel = PurePosixPath(os.path.relpath(rel, self.root))
        if ".." in rel.parts:
            raise PermissionError(f"{path!r} is outside the attempt's workspace")
        root = self.root.resolve()
        real = (root / rel).resolve()
        if real == root:
            raise IsADirectoryError(f"{path!r} is the workspace folder, not a file")
        if not real.is_relative_to(root):
            raise PermissionError(f"{path!r} leads out of the attempt's workspace (a link)")
        return root, real.relative_to(root).parts

    def __repr__(self) -> str:
        return f"LocalEnvironment({str(self.root)!r})"


def read_head(environment: Environment, path: str, limit: int) -> tuple[bytes, int]:
    """The first `limit` bytes of a file of `environment` and its size: the built-in ones
    read no more (a file of a gigabyte in a container is never held whole on the host); an
    environment without `read_head` (a plugin's) reads it whole with `read_file`."""
    head: Callable[[str, int], tuple[bytes, int]] | None = getattr(environment, "read_head", None)
    if head is not None:
        return head(path, limit)
    data = environment.read_file(path)
    return data[:limit], len(data)


def _files_below(root: Path, deadline: float | None) -> tuple[dict[str, Path], bool]:
    """Every file (and link) below `root`, by POSIX path relative to it, and whether that is
    all of them (the walk stops at `deadline`)."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(root):
        if deadline is not None and time.monotonic() > deadline:
            return found, False
        here = Path(folder)
        for name in files + [d for d in dirs if (here / d).is_symlink()]:
            path = here / name
            found[path.relative_to(root).as_posix()] = path
    return found, True


def _docker_kind() -> type[DockerKind]:
    from .docker_kind import DockerKind  # it imports this module

    return DockerKind


def environment_of(task: Task) -> Environment:
    """The attempt's environment; a Task made by hand with a workspace folder gets that
    folder as a local environment."""
    made = task.environment
    return made if made is not None else LocalEnvironment(task.workspace)


def host_folder(environment: Environment) -> Path:
    """The folder on this machine holding the environment's files (`task.workspace`)."""
    return local_folder(environment)
