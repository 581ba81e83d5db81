"""What the built-in sandbox kinds share, whoever runs them: the errors of an environment
that could not be had or failed under its attempt, each with its phase; who a session is and
whether it is gone (what orphan sweeps decide by); what a sweep removed, in a line for a
person; and this machine's sandbox slots (Docker's, and each plugin kind's apart).

The protocol a kind answers is `core/kinds.py`'s `EnvironmentKind`; a kind's own module
(`docker.py` and its helpers, `docker_kind.py`) keeps what only it knows: how to make, list
and remove its sandboxes, where their images come from.
"""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import EnvironmentUnavailable
from ..core.pids import start_time
from .limits import take_slot, try_slot

__all__ = ["AGAIN", "BuildFailed", "EnvironmentUnavailable", "Swept"]

AGAIN = "(its whole story is told at this image's first attempt)"
"""The detail of a build failure said already."""


class BuildFailed(EnvironmentUnavailable):
    """The task's image cannot be had: its build failed, or it is missing and cannot be
    pulled. The attempt errs in phase `build`, counted apart, and a resume runs it again."""

    error_type = "build_failed"
    phase = "build"

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message, detail=detail, phase="build")

    def again(self) -> BuildFailed:
        """The same error for a later attempt, its story (what to do, the build's log) told
        at the image's first attempt, so the terminal shows it once."""
        return BuildFailed(self.message, detail=AGAIN)


def session_label(pid: int | None = None) -> str:
    """This process's (or `pid`'s) session label: host, pid, and the pid's start time, so a
    reused pid is not taken for the session that had it."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}/{pid}/{start_time(pid) or '?'}"


def session_alive(label: str) -> bool:
    """Whether the session a sandbox's label names still runs (other hosts' are alive)."""
    host, _, rest = label.partition("/")
    pid_text, _, started = rest.partition("/")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    now = start_time(int(pid_text))
    return now is not None and started in ("?", now)


@dataclass(frozen=True)
class Swept:
    """The sandboxes an orphan sweep removed, and the gone sessions (`host/pid/start`)
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


def machine_folder() -> Path:
    """This user's folder for what all sessions on the machine share (sandbox slots, build
    locks), under the temp dir."""
    folder = Path(tempfile.gettempdir()) / f"agenteval-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def free_sandbox_slot(size: int, kind: str = "docker") -> int | None:
    """One of `size` sandbox slots of `kind` of this machine's user, held now (flock'd
    files: a dead holder's slot is free again at once), or None when all are held (never
    waits); `release_slot` gives it back."""
    return try_slot(_slots(kind), "sandbox", size)


def kind_slot(size: int, kind: str) -> int:
    """Wait for one of `size` slots of the sandboxes of a plugin's kind (its own on this
    machine, apart from Docker's) and hold it."""
    return take_slot(_slots(kind), "sandbox", size)


def _slots(kind: str = "docker") -> Path:
    """The slot files of `kind`'s sandboxes on this machine (Docker's keep their old folder)."""
    folder = machine_folder() / ("sandboxes" if kind == "docker" else f"sandboxes-{kind}")
    folder.mkdir(exist_ok=True)
    return folder


def host_slots(url: str) -> Path:
    """The slot files of the Docker daemon `url`'s own bound (`?max_sandboxes=N`) on this
    machine: one folder per daemon, named by a digest of its address."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    folder = machine_folder() / f"sandboxes-host-{digest}"
    folder.mkdir(exist_ok=True)
    return folder
