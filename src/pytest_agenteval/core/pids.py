"""Whether a process of this machine still runs. `kill(pid, 0)` alone is not enough: a
killed process whose parent does not reap it (an xdist worker whose controller was killed,
in a container whose PID 1 is no init) stays a zombie, which it still finds."""

from __future__ import annotations

import functools
import os
from pathlib import Path


def start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, `/proc`'s field 22), so a reused
    pid is not taken for the process that had it; "?" where `/proc` does not say; None when
    it has ended (no such process, or a zombie nobody reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # another user's process
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    fields = stat.rsplit(")", 1)[1].split()  # after the command's name: the state first
    return None if fields[0] in ("Z", "X") else fields[19]


def identity(pid: int) -> tuple[int, int]:
    """A process as a slot names it: its pid and start time (-1 where `/proc` does not say),
    so a later process with the same pid is another."""
    started = start_time(pid)
    return pid, int(started) if started is not None and started.isdigit() else -1


def still_runs(pid: int, started: int) -> bool:
    """Whether the process `identity` named as (`pid`, `started`) still runs."""
    now = start_time(pid)
    return now is not None and (now == "?" or started == -1 or now == str(started))


def own_identity() -> tuple[int, int]:
    """This process's `identity`, read once (a forked child is another process)."""
    return _identity_of(os.getpid())


@functools.cache
def _identity_of(pid: int) -> tuple[int, int]:
    return identity(pid)
