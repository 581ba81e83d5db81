"""Whether a process of this machine still runs. `kill(pid, 0)` alone is not enough: a
killed process whose parent does not reap it (an xdist worker whose controller was killed,
in a container whose PID 1 is no init) stays a zombie, which it still finds."""

from __future__ import annotations

import os
from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields of `/proc/PID/stat` after the command's name (its state first, its start
    time at index 19); None when there is no such file to read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def gone(fields: list[str] | None) -> bool:
    """Whether a process's stat fields say it ended (a zombie not yet reaped, or dead)."""
    return fields is not None and fields[0] in ("Z", "X")


def pid_running(pid: int) -> bool:
    """Whether process `pid` exists (another user's too) and has not ended."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not gone(stat_fields(pid))
