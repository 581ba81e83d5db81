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
class ExecResult:
    """How a program run by `Environment.exec` ended."""

    returncode: int
    """Its exit status; negative: killed by that signal (-9 at a timeout)."""
    stdout: str
    """What it wrote to stdout, as UTF-8 text (a byte that is not UTF-8 becomes U+FFFD)."""
    stderr: str
    """What it wrote to stderr, decoded the same way."""
    timed_out: bool
    """Killed at `exec`'s `timeout`, with everything it started."""

    def tail(self, lines: int = 15) -> str:
        """The last lines of stdout and stderr, for a failure reason."""
        text = (self.stdout.rstrip() + "\n" + self.stderr.rstrip()).strip()
        return "\n".join(text.splitlines()[-lines:])


Finished = ExecResult
"""The name the execution modules use."""

Change = Literal["added", "modified", "deleted"]


@dataclass(frozen=True, slots=True)
class ChangedFile:
    """A file of the environment that differs from the task's workspace template."""

    path: str
    """Below the working directory, in POSIX form."""
    change: Change
    """`added`, `modified` or `deleted`."""
    size: int
    """Its size in bytes now (0 when deleted)."""
    link: bool = field(default=False, compare=False)
    """Not a regular file: a symbolic link (its size is its target's name's; what it points
    to is never read), a FIFO, a device or a socket. Its bytes are never read or kept."""
    data: bytes | None = field(default=None, compare=False, repr=False)
    """Its bytes now, when the environment read them to compare (a container's, as they
    streamed, while they fit in the room its artifacts leave); None: read them with
    `read_file`."""


@runtime_checkable
class Environment(Protocol):
    """One attempt's files and programs: `task.environment` for an agent, `ctx.environment`
    for a grader. Made from the task's workspace template when the attempt first needs it,
    torn down when the attempt's outcome is known. Paths are relative to `workdir` (an
    absolute one must lie below it, and one that leads out is refused with PermissionError);
    nothing here names a folder of this machine, so the same agent works on a local folder
    and in a container."""

    @property
    def workdir(self) -> str:
        """The working directory as programs inside see it, `{workspace}` in an argv."""
        ...

    @property
    def python(self) -> str:
        """The Python that programs inside run as `{python}` (a container's: `python3`)."""
        ...

    @property
    def local_path(self) -> Path | None:
        """The folder on this machine holding the files (`task.workspace`); None for a
        container."""
        ...

    @property
    def where(self) -> str:
        """Where the files are, for a person (`workspace kept:`); empty when none are kept."""
        ...

    def exec(
        self,
        argv: Sequence[str],
        input: bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run `argv` (no shell) in `workdir` with `input` on stdin and `env` added to its
        variables; at `timeout` seconds it is killed with all it started (`timed_out`).
        Raises OSError when the program cannot start."""
        ...

    def read_file(self, path: str) -> bytes:
        """The bytes of the file `path`; raises OSError (FileNotFoundError: there is none)."""
        ...

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write the file `path` (a str as UTF-8), making its folders; raises OSError."""
        ...

    def changed_files(self) -> list[ChangedFile]:
        """The files added, modified or deleted against the template, sorted by path."""
        ...

    def teardown(self, keep: bool) -> None:
        """The attempt is over: remove everything, or, when `keep`, keep it for a person
        (a container only under `--agenteval-keep-sandboxes`)."""
        ...
