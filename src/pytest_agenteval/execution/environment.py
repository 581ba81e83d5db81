"""Where an attempt's files live and its programs run: the Environment seam, and its first kind,
a local folder.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

from ..core.environment import ChangedFile, Environment, Finished
from ..core.files import open_below
from ..core.identity import AttemptId
from ..core.model import local_folder
from ..sources.templates import copy_template, template_entries
from .process import run_program

if TYPE_CHECKING:
    from ..core.model import Task
    from ..sources.dataset import TaskDef
    from .docker import DockerSession
    from .sandboxes import SandboxSession
    from .workspaces import Workspaces

Keep = Literal["failed", "all"]


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


MakeEnvironment = Callable[["TaskDef", AttemptId], "Environment | None"]
"""A plugin's environment for (task, attempt key), or None to leave it to the built-in kinds."""


class Environments:
    """The one factory of attempts' environments: a plugin's, else a Docker container when
    the task has a `sandbox:`, else a local folder."""

    def __init__(
        self,
        workspaces: Workspaces,
        plugins: MakeEnvironment | None = None,
        sandboxes: SandboxPolicy | None = None,
        run_id: str | None = None,
    ) -> None:
        """`run_id`: the run this process's attempts belong to (its containers are labelled
        with it, and the session's end sweeps its orphans); None: not known yet."""
        self.workspaces = workspaces
        self._plugins = plugins
        self._session = os.getpid()  # a forked agent's container is named for its session
        self._sandboxes = sandboxes
        self._run_id = run_id
        self._docker: DockerSession | None = None
        self._swept: list[str] = []
        """What the session's end sweep removed (`sweep`), a line each."""
        self._lock = threading.Lock()

    def at_turn_only(self, task: TaskDef) -> bool:
        """Whether the task's attempts must make their environment at their item's turn, not
        ahead of it: a sandbox under `--agenteval-max-sandboxes`, since an attempt ahead would
        hold a slot until its turn, which may wait for that very slot (each process then holds
        at most one, and its current item always goes on)."""
        return (
            task.sandbox is not None
            and self._sandboxes is not None
            and (self._sandboxes.max_alive is not None)
        )

    def for_run(self, run_id: str) -> Environments:
        """The same factory for the attempts of run `run_id` (a new one: this is not changed)."""
        return Environments(self.workspaces, self._plugins, self._sandboxes, run_id)

    def create(self, task: TaskDef, key: AttemptId) -> Environment:
        """A fresh environment for the attempt `key` (its variant's own, in a run with
        variants), holding a copy of the task's template."""
        made = self._plugins(task, key) if self._plugins is not None else None
        if made is not None:
            return made
        if task.sandbox is not None:
            from .docker import DockerEnvironment, DockerSession, container_name
            from .sandboxes import session_label

            with self._lock:  # pool threads make sandboxes at once
                if self._docker is None:
                    self._docker = DockerSession(session_label(self._session), self._sandboxes)
                    self._docker.run_id = self._run_id
            name = container_name(key, self._session)
            kept = task.artifacts.max_bytes if task.artifacts is not None else 0
            return DockerEnvironment(
                task.sandbox, name, task.workspace_dir, self._docker, task.sandbox_build, kept
            )
        return self.workspaces.create(key, task.workspace_dir)

    def ready(self) -> None:
        """Make what this process's environments share (the base folder) now."""
        self.workspaces.base  # noqa: B018 - made on first use

    def adopt(self, task: TaskDef, key: AttemptId) -> Environment | None:
        """The local folder an attempt made in another process (`--agenteval-isolate`), if it
        made one."""
        return self.workspaces.existing(key, task.workspace_dir)

    def sweep(self) -> None:
        """Remove the sandboxes of this run whose session is gone (an xdist worker killed
        with them running), as the session ends (asked only of a run with sandboxes)."""
        if self._run_id is None:
            return
        from .docker import remove_orphans
        from .sandboxes import EnvironmentUnavailable

        try:
            swept = remove_orphans(self._run_id)
        except EnvironmentUnavailable:
            return  # no docker, or its daemon is gone: the next session's sweep
        if swept.names:
            self._swept.append(swept.line())

    def said(self) -> list[str]:
        """What this process's orphan sweeps removed, a line each, for the terminal."""
        sessions: list[SandboxSession] = [self._docker] if self._docker is not None else []
        return [swept.line() for session in sessions for swept in session.swept] + self._swept

    def close(self) -> None:
        """The session is over: the sandboxes being removed are gone."""
        if self._docker is not None:
            self._docker.close()
        self.workspaces.close()


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
        return self._inside(path).read_bytes()

    def write_file(self, path: str, data: bytes | str) -> None:
        data = data.encode() if isinstance(data, str) else data
        target = self._inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

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

    def _inside(self, path: str) -> Path:
        """`path` below the folder; one that leads out of it is refused."""
        rel = PurePosixPath(path)
        if rel.is_absolute():
            rel = PurePosixPath(os.path.relpath(rel, self.root))
        if ".." in rel.parts:
            raise PermissionError(f"{path!r} is outside the attempt's workspace")
        return self.root / rel

    def __repr__(self) -> str:
        return f"LocalEnvironment({str(self.root)!r})"


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


def environment_of(task: Task) -> Environment:
    """The attempt's environment; a Task made by hand with a workspace folder gets that
    folder as a local environment."""
    made = task.environment
    return made if made is not None else LocalEnvironment(task.workspace)


def host_folder(environment: Environment) -> Path:
    """The folder on this machine holding the environment's files (`task.workspace`)."""
    return local_folder(environment)
