"""Whether a process of this machine still runs. `kill(pid, 0)` alone is not enough: a
killed process whose parent does not reap it (an xdist worker whose controller was killed,
in a container whose PID 1 is no init) stays a zombie, which it still finds."""

from __future__ import annotations

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
