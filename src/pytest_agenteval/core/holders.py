"""Who holds a flock'd slot file, since when and for how long: the kernel frees a slot the
moment its holder dies, but what the holder's call started (a request at a provider, an
agent's program) may run on until the call's timeout. A holder stamps its slot when it takes
it and clears it before giving it back, so a stamp found on a slot just locked is a dead
holder's, and the slot stays taken until the stamp's timeout has passed. Whether the holder
still shows in `/proc` is not asked: the kernel releases a dying process's locks before it
becomes a zombie, so a holder being killed can look alive to the process that got its slot."""

from __future__ import annotations

import os
import struct
import time

from .pids import own_identity

RECORD = struct.Struct("<qqdd")
"""The holder's pid and start time (-1: unknown), when it took the slot (epoch seconds) and
its call's timeout; zeros once given back."""
FREE = bytes(RECORD.size)


def stamp(fd: int, timeout: float) -> None:
    """Note on the slot file `fd` (locked by this process) that this process's call took it
    now and may run for `timeout` seconds."""
    os.pwrite(fd, RECORD.pack(*own_identity(), time.time(), timeout), 0)


def clear(fd: int) -> None:
    """The call is over: its slot is free once unlocked."""
    os.pwrite(fd, FREE, 0)


def dead_until(fd: int) -> float | None:
    """Until when the slot file `fd`, just locked, stays taken by a holder that died holding
    it (its call may still run); None when it is free."""
    data = os.pread(fd, RECORD.size, 0)
    if len(data) != RECORD.size or data == FREE:
        return None
    pid, started, taken_at, timeout = RECORD.unpack(data)
    until = float(taken_at + timeout)
    if until <= time.time() or (pid, started) == own_identity():  # over, or a stamp of ours
        return None
    return until
