"""The `Environment` protocol users implement (a plugin's kind of environment) and what it
returns: where an attempt's files live and its programs run, named without any host path.

The kinds (a local folder, a container) and their factory are `execution/environment.py`'s;
the protocol lives here, below every package that names it (`Task.environment`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Finished:
    """How a program ended."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool

    def tail(self, lines: int = 15) -> str:
        """The last lines of stdout and stderr, for a failure reason."""
        text = (self.stdout.rstrip() + "\n" + self.stderr.rstrip()).strip()
        return "\n".join(text.splitlines()[-lines:])


ExecResult = Finished
"""How a program run in an environment ended: returncode, stdout, stderr, timed_out."""

Change = Literal["added", "modified", "deleted"]


@dataclass(frozen=True, slots=True)
class ChangedFile:
    """A file of the environment that differs from the task's workspace template."""

    path: str
    """Below the working directory, in POSIX form."""
    change: Change
    size: int
    """Its size in bytes now (0 when deleted)."""
    link: bool = field(default=False, compare=False)
    """Not a regular file: a symbolic link (its size is its target's name's; what it points
    to is never read), a FIFO, a device or a socket. Its bytes are never read or kept."""
    data: bytes | None = field(default=None, compare=False, repr=False)
    """Its bytes now, when the environment read them to compare (a container's, all copied
    out at once); None: read them with `read_file`."""


@runtime_checkable
class Environment(Protocol):
    """One attempt's files and programs. Made from the task's workspace template when the
    attempt first needs it; torn down when the attempt's outcome is known."""

    @property
    def workdir(self) -> str:
        """The working directory as programs inside see it (`{workspace}`)."""
        ...

    @property
    def python(self) -> str:
        """The Python programs inside run as `{python}`."""
        ...

    @property
    def local_path(self) -> Path | None:
        """The folder on this machine holding the files, when there is one (for
        `task.workspace`; a container has none)."""
        ...

    @property
    def where(self) -> str:
        """Where the files are, for a person (the failure report's `workspace kept:`); empty
        when nothing of the attempt's environment is kept after it."""
        ...

    def exec(
        self,
        argv: Sequence[str],
        input: bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run `argv` (no shell) in the working directory with `env` added to the variables;
        at `timeout` the program and all it started are killed (`timed_out`). Raises OSError
        when the program cannot start."""
        ...

    def read_file(self, path: str) -> bytes:
        """The bytes of `path` (below the working directory); raises OSError."""
        ...

    def write_file(self, path: str, data: bytes) -> None:
        """Write `path` (below the working directory), making its folders."""
        ...

    def changed_files(self) -> list[ChangedFile]:
        """The files added, modified or deleted against the template, sorted by path."""
        ...

    def teardown(self, keep: bool) -> None:
        """The attempt is over: remove everything, or keep it for a person to look at."""
        ...
